"""Tests of tools/patchtool/source/ (same layout as the package)."""

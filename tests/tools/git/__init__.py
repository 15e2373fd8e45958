"""Tests of tools/patchtool/git/ (same layout as the package)."""

"""Tests of tools/patchtool/model/ (same layout as the package)."""

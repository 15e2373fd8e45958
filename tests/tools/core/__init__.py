"""Tests of tools/patchtool/core/ (same layout as the package)."""

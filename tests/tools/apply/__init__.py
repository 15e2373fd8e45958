"""Tests of tools/patchtool/apply/ (same layout as the package)."""

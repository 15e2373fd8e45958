"""Tests of tools/patchtool/verify/ (same layout as the package)."""

"""Tests of tools/patchtool/commands/ (same layout as the package)."""

"""Tests of tools/patchtool/pr/ (same layout as the package)."""

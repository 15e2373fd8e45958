"""Tests of tools/patchtool/upstream_check/ (same layout as the package)."""

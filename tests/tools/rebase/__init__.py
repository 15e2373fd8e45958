"""Tests of tools/patchtool/rebase/ (same layout as the package)."""

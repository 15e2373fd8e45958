"""Tests of this folder (a package, so test modules import siblings by full name)."""

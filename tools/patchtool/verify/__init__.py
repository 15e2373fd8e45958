"""Verification: each patch's tripwire test run with and without it, in forked processes."""

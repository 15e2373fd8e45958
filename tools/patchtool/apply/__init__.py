"""The series on an upstream checkout's branch `patched`: `apply`/`reset` (apply.py, with what
they check first in apply_guards.py) and `export`, the branch back into patch files."""

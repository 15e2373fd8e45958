"""The git layer: the one git runner (git.py) and the one `gh` runner (gh.py); below every other
layer, with errors.py, interrupts.py and command_lock.py (docs/layers.md)."""

"""The one switch this project sets for Ray's import: its `uv run` hook off.

Why: the actors must run this driver's own interpreter (the project venv). Ray's default
`uv run` integration would instead re-launch them through an ancestor `uv run` (e.g. `uv run
pytest`) from another working directory, where they find no ray ("No module named 'ray'").
Ray reads `RAY_ENABLE_UV_RUN_RUNTIME_ENV` once, when it is first imported
(`ray_constants`), so the variable is set only before that import: later it would change
nothing, and a process that imported ray already keeps its environment as it is.
"""

from __future__ import annotations

import os
import sys

UV_RUN_HOOK_ENV = "RAY_ENABLE_UV_RUN_RUNTIME_ENV"


def before_ray_import() -> None:
    """Turn Ray's `uv run` hook off if ray is not imported yet (a caller's own setting stays)."""
    if "ray" not in sys.modules:
        os.environ.setdefault(UV_RUN_HOOK_ENV, "0")

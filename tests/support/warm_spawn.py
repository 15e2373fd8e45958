"""Start test ranks from a fork server that imported the heavy modules once.

Why: a `spawn` child is a fresh interpreter, and on a 2-core machine importing megatron.core
takes ~13 s and megatron.bridge ~27 s; every rank of every multi-rank test paid that again
while its peers waited. The fork server imports them once per pytest run and forks each rank
from that state: the same code runs in a fresh process that only differs by not importing.
The server runs nothing but imports (no torch op, so no thread pool is forked mid-use), and
each rank gets the caller's environment as `spawn` would give it."""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable
from multiprocessing.context import ForkServerContext
from typing import Any

# What a rank imports anyway; a module missing here is only imported by the rank itself.
PRELOAD = (
    "torch",
    "torch.distributed",
    "transformers",
    "megatron.core",
    "megatron.bridge",
    "mcore_grpo.worker.policy_worker",
    "mcore_grpo.worker.model",
)


def context() -> ForkServerContext:
    """The suite's fork-server context, its preload set before the server first starts."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(list(PRELOAD))
    return ctx


def with_environment(fn: Callable[..., Any], environ: dict[str, str]) -> Callable[..., Any]:
    """`fn` run under `environ`: the server's environment is the one it started with, a
    `spawn` child's is the caller's at spawn time."""
    return _Environed(fn, dict(environ))


class _Environed:
    """A picklable closure (a rank's target crosses to the server by pickle)."""

    def __init__(self, fn: Callable[..., Any], environ: dict[str, str]) -> None:
        self.fn, self.environ = fn, environ

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        os.environ.clear()
        os.environ.update(self.environ)
        return self.fn(*args, **kwargs)

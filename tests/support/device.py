"""The device the in-process worker tests run on: `cuda` where CUDA is available, else `cpu`
(where the worker's CPU redirects make megatron-core run)."""

from __future__ import annotations

import torch

TEST_DEVICE = "cuda" if torch.cuda.is_available() else "cpu"

# Why the multi-rank spawn tests are CPU-only: the harness spawns gloo ranks in one machine.
MULTI_RANK_CPU = (
    "spawns 2+ gloo ranks with CPU workers on one machine; a single GPU cannot host two NCCL "
    "ranks (multi-GPU runs go through torchrun/Ray)"
)

"""Fixtures shared by the worker's sampler tests."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from mcore_grpo.worker.config import ModelConfig

from tests.integration.worker.harness import REAL_VOCAB, VOCAB, make_worker, tiny_config


@pytest.fixture(scope="module")
def rope_model(module_world1: None) -> torch.nn.Module:
    """The tiny GPT with rope positions (the cpu-count-on preset's kind), ready to sample."""
    cfg = dataclasses.replace(
        tiny_config(overlap=False),
        model=ModelConfig(
            vocab_size=REAL_VOCAB, padded_vocab_size_override=VOCAB, position_embedding_type="rope"
        ),
    )
    worker = make_worker(cfg)
    worker.prepare_for_generation()
    worker.policy.ddp.eval()
    return worker.policy.ddp

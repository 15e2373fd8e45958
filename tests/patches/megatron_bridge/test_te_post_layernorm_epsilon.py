"""Tripwire for patches/Megatron-Bridge/te-post-layernorm-epsilon.patch.

`TERowParallelLinearLayerNorm` (Bridge's row-parallel linear + Post-LN of Gemma 2, Gemma 3 and
EXAONE 4.0 under Transformer Engine) built its Post-LN as `TENorm(config, output_size)`: TENorm's
default epsilon, 1e-5, whatever the model's. Gemma's RMSNorms use 1e-6 (`rms_norm_eps`, which
Bridge maps to `layernorm_epsilon`), so with TE every post-attention and post-MLP norm of a
Gemma model ran with the wrong epsilon; Bridge's own non-TE twin (`RowParallelLinearLayerNorm`)
and every other norm of the layer use the config's.

Without TE the class is a `safe_import_from` stand-in, so the module is executed afresh against a
stand-in for megatron-core's TE extensions: the real `__init__` runs, and what it passes to
`TENorm` is checked against the Gemma 3 provider's epsilon.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from unittest.mock import Mock, patch

import torch

TE_EXTENSIONS = "megatron.core.extensions.transformer_engine"


def te_layers_with_stand_in_te(te_norm: Mock) -> types.ModuleType:
    from megatron.bridge.models.common import te_layers

    class StandInRowParallelLinear(torch.nn.Module):
        def __init__(self, input_size: int, output_size: int, *, config: object, **kw: object):
            super().__init__()

    stand_in = types.ModuleType(TE_EXTENSIONS)
    stand_in.TENorm = te_norm  # type: ignore[attr-defined]
    stand_in.TERowParallelLinear = StandInRowParallelLinear  # type: ignore[attr-defined]
    spec = importlib.util.spec_from_file_location("te_layers_stand_in", te_layers.__file__)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    with patch.dict(sys.modules, {TE_EXTENSIONS: stand_in}):
        spec.loader.exec_module(module)
    return module


def test_gemma3_te_post_layernorm_gets_the_model_epsilon() -> None:
    from megatron.bridge.models.gemma.gemma3_provider import Gemma3ModelProvider

    epsilon = Gemma3ModelProvider.layernorm_epsilon
    assert epsilon == 1e-6  # Gemma's rms_norm_eps, not TENorm's 1e-5 default
    te_norm = Mock(return_value=torch.nn.Identity())
    module = te_layers_with_stand_in_te(te_norm)
    config = Mock(layernorm_epsilon=epsilon)
    module.TERowParallelLinearLayerNorm(64, 32, config=config, bias=False)
    (args, kwargs) = te_norm.call_args
    assert args == (config, 32)
    assert kwargs.get("eps") == epsilon, (
        f"Post-LN built with eps={kwargs.get('eps', 'TENorm default 1e-5')}, the model's is {epsilon}"
    )

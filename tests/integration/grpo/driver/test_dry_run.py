"""`mcore-grpo --dry-run`: the GPU presets' layouts checked and their models counted on a CPU.

Oracles: `transformers` counts the same model's parameters on its own (a meta build of
`AutoModelForCausalLM`), and megatron-core's real sharded builds at TP=2 and EP=2 (two gloo
ranks, meta device) hold exactly the per-GPU share `ParameterCount.per_rank` computes.
"""

from __future__ import annotations

import json
import re

import pytest
import torch
from mcore_grpo.cli import main
from mcore_grpo.config.loader import load_config
from mcore_grpo.grpo.driver.dry_run import hf_config
from mcore_grpo.worker.model_shape import ParameterCount, count_parameters, hf_parameter_count

from tests.integration.worker.harness import spawn_ranks
from tests.support.ports import free_port

GPU_PRESETS = ("qwen2.5-1.5b-math", "qwen3-30b-a3b")


def _transformers_count(config: object) -> int:
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters())


@pytest.mark.timeout(600)
@pytest.mark.parametrize("preset", GPU_PRESETS)
def test_megatron_count_of_a_gpu_preset_model_equals_transformers(preset: str) -> None:
    config, _ = hf_config(load_config(preset).policy.model_name)
    count = hf_parameter_count(config)
    expected = _transformers_count(config)
    print(f"{preset}: megatron-core {count.total:,} = transformers {expected:,}")
    assert count.total == expected


@pytest.mark.timeout(600)
def test_dry_run_of_the_moe_preset_prints_a_valid_layout_and_a_consistent_estimate(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["--preset", "qwen3-30b-a3b", "--dry-run", "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    layout, count, memory = found["layout"], found["count"], found["memory"]
    # The preset: 2 nodes x 8 GPUs, TP 2, EP 8, ETP 1 (NeMo-RL's qwen30ba3b layout).
    assert (layout["world"], layout["tp"], layout["ep"], layout["etp"]) == (16, 2, 8, 1)
    assert (layout["dp"], layout["expert_dp"]) == (8, 2)
    assert count["expert"] > 0.9 * count["total"]  # 128 routed experts hold nearly all of it
    dense = count["tp_sharded"] // 2 + count["replicated"]
    assert memory["params"] == dense + count["expert"] // 8
    assert memory["weights"] == 2 * memory["params"]  # bf16
    assert memory["grads"] == 4 * memory["params"]  # grad_reduce_in_fp32
    assert memory["optimizer"] == 12 * dense // 8 + 12 * (count["expert"] // 8) // 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["policy.megatron_cfg.expert_model_parallel_size=6", "--workers", "12"],
            r"expert_model_parallel_size=6 does not divide the model's 128 experts; set it "
            r"to one of \[1, 2, 4\]",
        ),
        (["--workers", "4"], r"= 8 x 1 x 1 = 8 does not divide the 4 GPUs of the run"),
        (
            ["policy.megatron_cfg.tensor_model_parallel_size=3", "--workers", "24"],
            r"does not divide its 32 attention heads and 4 key-value heads",
        ),
    ],
)
def test_a_bad_moe_layout_is_one_line_naming_the_fix_before_any_process_group(
    args: list[str],
    message: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import torch.distributed as dist

    def no_group(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("a process group started before the layout was checked")

    monkeypatch.setattr(dist, "init_process_group", no_group)
    assert main(["--preset", "qwen3-30b-a3b", "--dry-run", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("mcore-grpo: config error: "), err
    assert re.search(message, err[0]), err[0]


def test_a_run_with_a_layout_larger_than_its_workers_is_refused_before_workers_start(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(["policy.megatron_cfg.tensor_model_parallel_size=2", "--workers", "1"])
    assert code == 2
    assert "= 2 does not divide the 1 GPUs of the run" in capsys.readouterr().err


def _tiny_moe_config() -> object:
    from mcore_grpo.worker.tiny_hf_checkpoint import tiny_config

    return tiny_config("qwen3_moe")


def _sharded_counts(tp: int, ep: int) -> ParameterCount:
    """One rank of a TP x EP world: the real megatron-core build (meta device), counted."""
    from mcore_grpo.worker.bridge_source import import_auto_bridge
    from mcore_grpo.worker.model_shape import _meta_provider
    from megatron.core import parallel_state

    parallel_state.initialize_model_parallel(
        tensor_model_parallel_size=tp, expert_model_parallel_size=ep, expert_tensor_parallel_size=1
    )
    try:
        provider = import_auto_bridge().from_hf_config(_tiny_moe_config())
        provider = provider.to_megatron_provider(load_weights=False)
        provider.tensor_model_parallel_size = tp
        provider.expert_model_parallel_size = ep
        provider.expert_tensor_parallel_size = 1
        provider = _meta_provider(provider)
        with torch.device("meta"):
            return count_parameters(provider.provide(pre_process=True, post_process=True))
    finally:
        parallel_state.destroy_model_parallel()


def _both_layouts() -> tuple[ParameterCount, ParameterCount]:
    return _sharded_counts(tp=2, ep=1), _sharded_counts(tp=1, ep=2)


@pytest.mark.timeout(600)
def test_per_rank_share_equals_megatron_cores_sharded_build_at_tp2_and_ep2() -> None:
    whole = hf_parameter_count(_tiny_moe_config())
    by_rank = spawn_ranks(_both_layouts, free_port(), world=2)
    for rank, (at_tp2, at_ep2) in by_rank.items():
        dense, expert = whole.per_rank(tp=2)
        assert (at_tp2.tp_sharded + at_tp2.replicated, at_tp2.expert) == (dense, expert), rank
        dense, expert = whole.per_rank(tp=1, ep=2)
        assert (at_ep2.tp_sharded + at_ep2.replicated, at_ep2.expert) == (dense, expert), rank
    assert whole.expert and whole.total == _transformers_count(_tiny_moe_config())


def test_a_model_whose_config_is_nowhere_local_is_refused_naming_the_download() -> None:
    from mcore_grpo.config.schema import ConfigError

    with pytest.raises(ConfigError, match=r"hf download no-such-org/no-such-model config.json"):
        hf_config("no-such-org/no-such-model")

"""The `gpu-smoke` preset: parses, reaches the worker at Qwen2.5-1.5B's published shape, and
refuses clearly on a machine without CUDA."""

from __future__ import annotations

import pytest
import torch
from mcore_grpo.cli import main
from mcore_grpo.config.loader import load_config, preset_names
from mcore_grpo.config.schema import check_data_parallel
from mcore_grpo.grpo.ranks.messages import TaskTokens
from mcore_grpo.grpo.ranks.worker_settings import worker_config
from mcore_grpo.grpo.tasks.task import build_task


def _worker():
    config = load_config("gpu-smoke")
    task = build_task(config.task.name, config.task.max_addend)
    tokens = TaskTokens(vocab_size=task.vocab_size, pad_id=task.pad_id, eos_id=task.eos_id)
    return config, worker_config(config, tokens).validate()


def test_gpu_smoke_is_one_gpu_bf16_at_qwen2_5_1_5b_shape() -> None:
    assert "gpu-smoke" in preset_names()
    config, w = _worker()
    assert (config.cluster.num_nodes, config.cluster.gpus_per_node) == (1, 1)
    assert check_data_parallel(config, 1) == 1
    assert (w.device, w.precision, w.model.hf_checkpoint) == ("cuda", "bfloat16", None)
    m = w.model
    # Qwen/Qwen2.5-1.5B config.json: 28 layers, hidden 1536, 12 heads, 2 KV heads,
    # intermediate 8960, vocab 151936, rope_theta 1e6, RMSNorm, SiLU-gated MLP, qkv bias,
    # tied word embeddings.
    assert (m.num_layers, m.hidden_size, m.num_attention_heads) == (28, 1536, 12)
    assert (m.num_query_groups, m.ffn_hidden_size, m.padded_vocab_size) == (2, 8960, 151936)
    assert (m.position_embedding_type, m.rotary_base, m.normalization) == ("rope", 10**6, "RMSNorm")
    assert (m.swiglu, m.add_bias_linear, m.add_qkv_bias, m.tie_embeddings) == (
        True,
        False,
        True,
        True,
    )
    # Parameter count of that shape, by hand: per layer q/k/v/o projections + qkv bias,
    # gate+up+down MLP, two RMSNorm weights; plus the tied embedding and the final norm.
    head_dim = 1536 // 12
    attention = 1536 * (12 + 2 + 2) * head_dim + (12 + 2 + 2) * head_dim + 1536 * 1536
    mlp = 3 * 1536 * 8960
    total = 28 * (attention + mlp + 2 * 1536) + 151936 * 1536 + 1536
    assert total == pytest.approx(1.54e9, rel=0.005)  # Qwen2.5-1.5B: "1.54B" parameters


def test_gpu_smoke_transformer_config_has_gqa_and_rope() -> None:
    from mcore_grpo.worker.model import layer_spec_name, transformer_config

    _, w = _worker()
    tcfg = transformer_config(w)
    assert (tcfg.num_query_groups, tcfg.kv_channels) == (2, 128)
    assert tcfg.gated_linear_unit and tcfg.normalization == "RMSNorm"
    assert tcfg.bf16 and tcfg.params_dtype == torch.bfloat16
    assert layer_spec_name(w) in ("te", "local")


@pytest.mark.cpu_only(reason="checks the refusal a machine without CUDA gives")
def test_gpu_smoke_refuses_without_cuda(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--preset", "gpu-smoke", "--in-process", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "needs CUDA" in err and "gpu-smoke" in err

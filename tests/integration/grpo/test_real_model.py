"""The real-model preset end to end, as a user runs it: SmolLM2-135M-Instruct from the wheel,
through Megatron-Bridge, a GRPO step on NeMo-RL-rendered arithmetic prompts scored by NeMo-RL's
verifier, greedy held-out evaluation before and after, the trained model exported and graded
again under `transformers`' own `generate`.

A few problems and tokens only (CI time); the learning figures are the benchmark run's
(docs/real-model.md). The oracle for the export is `transformers` alone.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.cli_run import needs_nemo_rl, run_cli

SMALL = (
    "grpo.max_num_steps=1",
    "grpo.num_prompts_per_step=2",
    "grpo.num_generations_per_prompt=4",
    "policy.train_global_batch_size=8",
    "policy.train_micro_batch_size=4",
    "policy.generation.max_new_tokens=24",
    "grpo.max_val_samples=4",
    "grpo.val_batch_size=4",
)


@needs_nemo_rl
@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_a_grpo_step_on_the_real_model_and_its_export_answers_in_transformers(
    tmp_path: Path,
) -> None:
    out = tmp_path / "run"
    log = run_cli(
        tmp_path, "--preset", "cpu-smollm2-arith", "--no-progress", "--output-dir", str(out), *SMALL
    )
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    (last,) = records
    for key in ("validation/accuracy_at_start", "validation/accuracy", "validation/hf_accuracy"):
        assert 0.0 <= last[key] <= 1.0, key
    assert last["validation/problems"] == 4
    assert "held-out accuracy (greedy, arithmetic)" in log
    samples = [
        json.loads(line) for line in (out / "validation_samples.jsonl").read_text().splitlines()
    ]
    assert [s["step"] for s in samples] == [0] * 4 + [1] * 4
    assert all(s["response"].strip() for s in samples)

    from transformers import AutoModelForCausalLM, AutoTokenizer

    hf = out / "checkpoints" / "step_000001" / "hf"
    tokenizer = AutoTokenizer.from_pretrained(hf)
    model = AutoModelForCausalLM.from_pretrained(hf)
    assert type(model).__name__ == "LlamaForCausalLM"
    assert sum(p.numel() for p in model.parameters()) == 134_515_008
    assert tokenizer is not None and tokenizer.chat_template
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is 17 + 25? Answer with just the number."}],
        add_generation_prompt=True,
        return_tensors="pt",
        return_dict=True,
    )
    answer = model.generate(**prompt, max_new_tokens=16, do_sample=False)
    text = tokenizer.decode(answer[0, prompt["input_ids"].shape[1] :], skip_special_tokens=True)
    assert any(ch.isdigit() for ch in text), text


@needs_nemo_rl
@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_nemo_rls_grpo_train_with_its_math_environment_drives_the_real_model(
    tmp_path: Path,
) -> None:
    """`--driver nemo-rl`: NeMo-RL's grpo_train, its math_hf_data_processor prompts and its own
    MathEnvironment actor (the preset's dapo_math_verify) score the real model's samples; its
    consolidated checkpoint loads in transformers."""
    out = tmp_path / "run"
    log = run_cli(
        tmp_path,
        "--driver",
        "nemo-rl",
        "--preset",
        "cpu-smollm2-arith",
        "--no-progress",
        "--output-dir",
        str(out),
        *SMALL,
    )
    assert "driver nemo-rl" in log and "1 steps" in log
    rows = [
        json.loads(line)
        for line in (out / "logs" / "train_data_step1.jsonl").read_text().splitlines()
    ]
    assert len(rows) == 8  # 2 prompts x 4 samples
    for row in rows:  # MathEnvironment's own reply closes every conversation
        assert row["content"][0][-1] in ("Environment: correct", "Environment: incorrect")
        assert row["rewards"] in ([0.0], [1.0])

    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(out / "checkpoints" / "step_1" / "policy" / "hf")
    assert type(model).__name__ == "LlamaForCausalLM"

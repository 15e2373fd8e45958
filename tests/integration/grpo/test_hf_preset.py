"""`cpu-hf-tiny`: HF in, GRPO, HF out, driven by `mcore-grpo` and by NeMo-RL's `grpo_train`.

Both run the CLI in a subprocess (what a user runs; Ray and NeMo-RL have process-wide side
effects). The oracle for "the trained policy came out" is `transformers` alone: the exported
directory loads with `AutoModelForCausalLM`/`AutoTokenizer`, and greedy decoding with it answers
the task's problems (scored by the task's own reward) far better than the checkpoint the run
started from. That the export equals the Megatron model logit for logit (TP 1 and 2) is
`tests/integration/worker/test_hf_bridge.py`'s.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from mcore_grpo.grpo.tasks.task import build_task

from tests.support.cli_run import mean, needs_nemo_rl, run_cli

CPU_RUN = "the cpu-hf-tiny preset on Ray CPU actors (gloo)"


def _cli(tmp_path: Path, *args: str) -> str:
    return run_cli(tmp_path, "--preset", "cpu-hf-tiny", "--no-progress", *args)


def greedy_reward(checkpoint: Path) -> float:
    """Mean task reward of `transformers`' greedy answers (over the task's ids, as the worker
    samples) to every problem of the default task, from the checkpoint at `checkpoint`."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    task = build_task("digit-add")
    model = AutoModelForCausalLM.from_pretrained(checkpoint).float().eval()
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    assert tokenizer is not None
    rewards = []
    for problem in task.all_problems():
        assert tuple(tokenizer(problem.text)["input_ids"]) == problem.prompt_ids
        ids = list(problem.prompt_ids)
        with torch.no_grad():
            for _ in range(task.max_response_tokens):
                logits = model(torch.tensor([ids])).logits[0, -1, : task.vocab_size]
                ids.append(int(logits.argmax()))
        rewards.append(task.reward(ids[len(problem.prompt_ids) :], problem))
    return sum(rewards) / len(rewards)


@pytest.mark.slow
@pytest.mark.cpu_only(reason=CPU_RUN)
@pytest.mark.timeout(1800)
def test_cpu_hf_tiny_at_tp2_learns_and_exports_a_model_transformers_runs(tmp_path: Path) -> None:
    out, hf_out = tmp_path / "run", tmp_path / "hf-out"
    _cli(
        tmp_path,
        "--workers",
        "2",
        "--output-dir",
        str(out),
        "--export-hf",
        str(hf_out),
        "policy.megatron_cfg.tensor_model_parallel_size=2",
        "grpo.max_num_steps=40",
    )
    rewards = [
        json.loads(line)["reward_mean"] for line in (out / "metrics.jsonl").read_text().splitlines()
    ]
    assert len(rewards) == 40
    before, after = greedy_reward(out / "tiny-hf-qwen2"), greedy_reward(hf_out)
    print(
        f"cpu-hf-tiny TP=2: reward {mean(rewards[:5]):.3f} (first 5) -> "
        f"{mean(rewards[-5:]):.3f} (last 5); transformers greedy {before:.2f} -> {after:.2f}"
    )
    assert mean(rewards[-5:]) > mean(rewards[:5]) + 0.2, rewards
    assert after >= before + 0.3
    # save_consolidated: the last checkpoint holds the same model in HF format.
    last = sorted((out / "checkpoints").glob("step_*"))[-1]
    assert greedy_reward(last / "hf") == after


@pytest.mark.slow
@pytest.mark.cpu_only(reason=CPU_RUN)
@needs_nemo_rl
@pytest.mark.timeout(1800)
def test_grpo_train_drives_cpu_hf_tiny_and_the_export_runs_in_transformers(tmp_path: Path) -> None:
    from mcore_grpo.nemo_rl_driver.run_metrics import read_scalars

    out, hf_out = tmp_path / "run", tmp_path / "hf-out"
    steps = 30
    log = _cli(
        tmp_path,
        "--driver",
        "nemo-rl",
        "--workers",
        "2",
        "--output-dir",
        str(out),
        "--export-hf",
        str(hf_out),
        f"grpo.max_num_steps={steps}",
    )
    assert "driver nemo-rl" in log
    held = (out / "upstream-logs" / "driver.log").read_text()  # grpo_train's prints (issue 46)
    assert "Max number of steps has been reached" in held  # grpo_train's own last words
    rewards = [value for _, value in read_scalars(out / "logs")["train/reward"]]
    assert len(rewards) == steps
    before, after = greedy_reward(out / "tiny-hf-qwen2"), greedy_reward(hf_out)
    print(
        f"cpu-hf-tiny nemo-rl: reward {mean(rewards[:5]):.3f} -> {mean(rewards[-5:]):.3f}; "
        f"transformers greedy {before:.2f} -> {after:.2f}"
    )
    assert mean(rewards[-5:]) > mean(rewards[:5]) + 0.2, rewards
    assert after > before
    # NeMo-RL's save_consolidated: its checkpoint holds the policy in HF format too.
    assert greedy_reward(out / "checkpoints" / f"step_{steps}" / "policy" / "hf") == after

"""The exported checkpoint graded outside the worker: `transformers`' own greedy `generate` on
the task's held-out problems, scored by the same verifier as training and the worker's
evaluation (`mcore_grpo.grpo.tasks.evaluation.Evaluator.score`).

This is the check a user makes of the trained model: the Hugging Face directory the run wrote,
loaded by `AutoModelForCausalLM`/`AutoTokenizer` alone, answers as the worker's model did.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mcore_grpo.grpo.ranks.train_batch import left_padded
from mcore_grpo.grpo.tasks.evaluation import Evaluator
from mcore_grpo.run_output import upstream_output


def greedy_responses(
    checkpoint: Path,
    prompts: Sequence[Sequence[int]],
    max_new_tokens: int,
    batch_size: int,
    device: str = "cpu",
) -> list[list[int]]:
    """`transformers`' greedy continuation of each prompt (token ids, up to and including the
    checkpoint's end-of-turn token), batches left-padded, on `device` (the run's own: on a GPU
    the whole GSM8K test split takes seconds there and hours on the host's cores)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with upstream_output():  # transformers' "Loading weights" bar: held back, as a worker's
        model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    model = model.to(device).eval()
    if tokenizer is None:
        raise ValueError(f"{checkpoint}: no tokenizer saved beside the model")
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    pad = eos if pad is None else pad
    out: list[list[int]] = []
    for start in range(0, len(prompts), batch_size):
        ids, mask = left_padded(prompts[start : start + batch_size], pad)
        width = ids.shape[1]
        with torch.no_grad():
            generated = model.generate(
                input_ids=ids.to(device),
                attention_mask=mask.to(device),
                max_new_tokens=max_new_tokens,
                do_sample=False,
                eos_token_id=eos,
                pad_token_id=pad,
            )
        for row in generated[:, width:].tolist():
            end = row.index(eos) + 1 if eos in row else len(row)
            out.append(row[:end])
    return out


def evaluate_checkpoint(
    checkpoint: Path,
    evaluator: Evaluator,
    max_new_tokens: int,
    batch_size: int,
    device: str = "cpu",
    output_dir: Path | None = None,
    step: int = -1,
) -> dict[str, Any]:
    """``validation/hf_accuracy`` (and its mean response length) of `checkpoint` on the
    evaluator's held-out problems; with `output_dir`, each sample appended to its
    validation_samples.jsonl under `step`."""
    problems = evaluator.problems
    responses = greedy_responses(
        checkpoint, [p.prompt_ids for p in problems], max_new_tokens, batch_size, device
    )
    scored = evaluator.score(step, problems, responses, output_dir)
    return {
        "validation/hf_accuracy": scored["validation/accuracy"],
        "validation/hf_response_tokens_mean": scored["validation/response_tokens_mean"],
    }

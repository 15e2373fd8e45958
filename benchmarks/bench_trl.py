"""One GRPO step of this project against Hugging Face TRL's `GRPOTrainer`, same model, task and
settings, each side in a process of its own, run back to back. Prints, never asserts.

Why: the obvious alternative to this stack for a small model is TRL; this says what a GRPO
step costs on each (and, with ``--accuracy-minutes``, what each learns per minute of training).

    uv pip install --no-deps trl==1.16.0        # once (or: uv sync --group trl)
    uv run --no-sync python benchmarks/bench_trl.py --steps 3 [--threads N] [--side both]
    uv run --no-sync python benchmarks/bench_trl.py --accuracy-minutes 30 [--eval-size 200]
    ... [key=value ...]   # overrides of the preset, applied to our side; TRL's follow from them

`trl` is the dependency group ``trl`` (pyproject.toml, not a default group: ``uv sync
--frozen`` never installs it, and removes it again); 1.16.0's requirements are already in the
lock, so ``uv pip install --no-deps trl==1.16.0`` installs the same thing without touching the
rest. Run it on an otherwise idle machine: both sides print the load average, and a side
that shares the cores with other work (or runs under ``nice``) measures the sharing.

Both sides: SmolLM2-135M-Instruct (`resolve_pretrained(SMOLLM2)`, fp32, CPU, the same torch
threads), preset ``cpu-smollm2-arith``: its prompts (NeMo-RL's `math_hf_data_processor` with
the preset's prompt file and the checkpoint's chat template, rendered once by our `MathTask`;
TRL gets the rendered text, which its tokenizer call turns into the same ids: checked and
printed), the same problems in the same order (our loop's `sample_problems` per step, fed to
TRL unshuffled), NeMo-RL's verifier in-process (`MathVerifier(task.math_verify_impl)` as TRL's
reward function, on text decoded without special tokens, as ours).

Settings (ours: the preset's keys; TRL: `trl_settings`, derived from the same config):

| ours (preset value)                                | TRL `GRPOConfig`                                    |
|----------------------------------------------------|-----------------------------------------------------|
| grpo.num_prompts_per_step x num_generations (8x8)  | generation_batch_size 64 = per_device_train_batch_size 8 x steps_per_generation 8; num_generations 8 |
| policy.train_global_batch_size 32 (2 optimizer steps per GRPO step) | per_device_train_batch_size 8 x gradient_accumulation_steps 4 = 32 per optimizer step; steps_per_generation 8 = 2 optimizer steps per generation; num_iterations 1 |
| policy.train_micro_batch_size 8                    | per_device_train_batch_size 8                       |
| policy.generation.max_new_tokens 48, temperature 1.0, top_p 1.0, no top-k | max_completion_length 48, temperature 1.0, top_p 1.0, top_k 0 |
| megatron-core Adam lr 5e-6, betas (0.9, 0.999), eps 1e-8, weight decay 0.01, constant lr | AdamW (torch) lr 5e-6, same betas/eps/decay, lr_scheduler_type constant, no warm-up |
| policy.max_grad_norm 1.0                           | max_grad_norm 1.0                                   |
| loss_fn.reference_policy_kl_penalty 0.01 (k3)      | beta 0.01 (TRL's KL is k3)                          |
| grpo.reward_shaping.stop_properly_penalty_coef 0 (a cut-off response scores 0) | the same shaping applied in TRL's reward function (`shaped_rewards`, on its completion ids) |
| grpo.overlong_filtering false                      | mask_truncated_completions False                    |
| loss_fn.ratio_clip_min/max 0.2                     | epsilon 0.2, epsilon_high 0.2                       |
| loss_fn.token_level_loss true: masked sum / valid tokens of the optimizer step | loss_type "dapo": masked sum / active tokens of the generation batch x accumulation / steps_per_generation |
| old logprobs for the ratio: one no-grad pass per GRPO step | computed because gradient_accumulation_steps 4 % (steps_per_generation 8 x num_iterations 1) != 0 |
| grpo.normalize_rewards true                        | scale_rewards "group"                               |
| policy.precision float32, no activation recompute  | bf16 False, fp16 False, gradient_checkpointing False (GRPOConfig's defaults are True) |

Why ``dapo``: NeMo-RL's token-level loss divides the masked token sum by the number of valid
tokens in the whole optimizer step; ``dapo`` is TRL's only type normalised by a global token
count (``grpo`` averages per sequence, ``bnpo`` per micro-batch, ``dr_grpo`` by a constant).

Not matched (TRL has no setting for it):
- advantages: ours use the preset's leave-one-out baseline (mean and std of the *other* samples
  of the group, std + 1e-6); TRL's GRPOTrainer the whole group's mean and std, std + 1e-4
  (``grpo.use_leave_one_out_baseline=false`` brings ours to TRL's baseline);
- the token normaliser: TRL's ``dapo`` divides by half the generation batch's tokens in each of
  the two optimizer steps, ours by that optimizer step's own tokens (equal on average);
- which samples form an optimizer step: ours the first/second 32 in prompt order, TRL's a
  shuffle of the 64;
- sampling RNG (ours seeded per step and group, TRL torch's global generator), batch
  padding (TRL pads to a multiple, ours to prompt + max_new_tokens), logprob batch size
  (ours policy.logprob_batch_size 16, TRL per_device_train_batch_size 8), Adam
  implementations (megatron-core's distributed optimizer vs torch's AdamW);
- TRL's training forward also computes each token's entropy (for its logs) and its logprobs
  through its chunked LM-head kernel; ours the logits, then the logprobs.

How each side is timed (per GRPO step, wall clock, `time.perf_counter`):
- ours: `GRPOLoop.run` with the preset in-process (`make_runner(..., in_process=True)`,
  the `mcore-grpo --in-process` path), its metrics.jsonl records: ``generation_time_s``,
  ``logprob_time_s``, ``training_time_s``, ``step_time_s``; "other" = step - the three
  (reward scoring, advantages, batching);
- TRL: a GRPO step is ``gradient_accumulation_steps x optimizer steps`` micro-batches, from
  the callback ``on_step_begin`` of its first optimizer step to ``on_step_end`` of its last;
  generation = time in `GRPOTrainer._generate`; logprobs = time in
  `_get_per_token_logps_and_entropies` without grad (the old-logprob pass); other = the rest of
  `_generate_and_score_completions` (rewards, advantages, padding); training = step - all of
  `_generate_and_score_completions` (forward/backward, clipping, AdamW).
Seconds per step: the median of the timed steps after one warm-up step; samples/s: samples per
step / that median; peak RSS: ``ru_maxrss`` of the side's process.

``--accuracy-minutes M``: each side trains for M minutes of GRPO-step time (evaluation and
start-up not counted) and is evaluated before training and at the first step boundary after
each M/``--checkpoints`` minutes: the policy is written as a Hugging Face checkpoint (ours
`GRPOLoop.export`, TRL `save_pretrained`) and graded by the same code,
`mcore_grpo.grpo.tasks.hf_eval.evaluate_checkpoint` (`transformers` greedy generate,
max_new_tokens of the run, the same verifier) on the first ``--eval-size`` of the preset's 200
held-out problems. Writes ``--json`` (seconds, accuracy per side, the held-out accuracy of each
operation per grade, how many distinct training problems the steps drew) and ``--plot``; every
graded sample stays under ``--samples``/<side>/validation_samples.jsonl (step = grade number).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PRESET = "cpu-smollm2-arith"
RESULT_MARK = "BENCH_TRL_RESULT "
DEFAULT_JSON = ROOT / "runs" / "bench-trl" / "accuracy.json"
DEFAULT_PLOT = ROOT / "docs" / "img" / "grpo-vs-trl.png"
DEFAULT_SAMPLES = ROOT / "runs" / "bench-trl" / "samples"
# Upper bound of GRPO steps in --accuracy-minutes mode (the clock stops the run long before).
ACCURACY_STEP_BOUND = 2000


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line; ``key=value`` arguments are overrides of the preset."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--steps", type=int, default=3, help="timed GRPO steps after one warm-up")
    parser.add_argument(
        "--threads", type=int, default=os.cpu_count() or 1, help="torch threads of each side"
    )
    parser.add_argument("--side", choices=("ours", "trl", "both"), default="both")
    parser.add_argument(
        "--accuracy-minutes",
        type=float,
        default=0.0,
        help="train each side this long and grade held-out accuracy along the way",
    )
    parser.add_argument(
        "--eval-size", type=int, default=200, help="held-out problems graded (first N of 200)"
    )
    parser.add_argument(
        "--checkpoints", type=int, default=5, help="evaluations after step 0 (every M/N minutes)"
    )
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON, help="accuracy curves")
    parser.add_argument("--plot", type=Path, default=DEFAULT_PLOT, help="accuracy plot")
    parser.add_argument(
        "--samples",
        type=Path,
        default=DEFAULT_SAMPLES,
        help="each grade's samples: <dir>/<side>/validation_samples.jsonl (step = grade number)",
    )
    parser.add_argument("--child", choices=("ours", "trl"), help=argparse.SUPPRESS)
    parser.add_argument("overrides", nargs="*", metavar="key=value")
    args = parser.parse_args(argv)
    bad = [o for o in args.overrides if "=" not in o]
    if bad:
        parser.error(f"not a key=value override: {' '.join(bad)}")
    if args.steps < 1 or args.threads < 1 or args.eval_size < 1 or args.checkpoints < 1:
        parser.error("--steps, --threads, --eval-size and --checkpoints must be >= 1")
    if args.accuracy_minutes < 0:
        parser.error("--accuracy-minutes must be >= 0")
    return args


def grpo_steps(args: argparse.Namespace) -> int:
    """GRPO steps each side is configured for (the warm-up included)."""
    return ACCURACY_STEP_BOUND if args.accuracy_minutes else args.steps + 1


def bench_overrides(args: argparse.Namespace) -> list[str]:
    """The preset's settings this benchmark changes (no evaluation or checkpoint inside the
    timed run), then the user's."""
    return [
        f"grpo.max_num_steps={grpo_steps(args)}",
        "grpo.val_at_start=false",
        "grpo.val_at_end=false",
        f"grpo.max_val_samples={args.eval_size}",
        "checkpointing.enabled=false",
        "checkpointing.save_consolidated=false",
        *args.overrides,
    ]


def optimizer_steps_per_grpo_step(config: Any) -> int:
    """samples per GRPO step / train_global_batch_size; refuses a shape TRL cannot express."""
    p = config.policy
    samples = config.samples_per_step
    if samples % p.train_global_batch_size or p.train_global_batch_size % p.train_micro_batch_size:
        raise ValueError(
            f"{samples} samples per step, policy.train_global_batch_size="
            f"{p.train_global_batch_size}, train_micro_batch_size={p.train_micro_batch_size}: "
            "TRL needs samples = k x global batch and global batch = m x micro batch; change "
            "the overrides"
        )
    return samples // p.train_global_batch_size


def trl_settings(config: Any, grpo_steps: int) -> dict[str, Any]:
    """`GRPOConfig` keyword arguments for our run config `config` (see the module's table)."""
    g, p, loss = config.grpo, config.policy, config.loss_fn
    opt = p.megatron_cfg.optimizer
    per_step = optimizer_steps_per_grpo_step(config)
    if opt.optimizer != "adam":
        raise ValueError(
            f"policy.megatron_cfg.optimizer.optimizer={opt.optimizer}: TRL side is AdamW"
        )
    if loss.reference_policy_kl_penalty and loss.reference_policy_kl_type != "k3":
        raise ValueError("TRL's KL term is k3: set loss_fn.reference_policy_kl_type=k3")
    return {
        "per_device_train_batch_size": p.train_micro_batch_size,
        "gradient_accumulation_steps": p.train_global_batch_size // p.train_micro_batch_size,
        "steps_per_generation": config.samples_per_step // p.train_micro_batch_size,
        "num_generations": g.num_generations_per_prompt,
        "num_iterations": 1,
        "max_completion_length": p.generation.max_new_tokens,
        "temperature": p.generation.temperature,
        "top_p": p.generation.top_p,
        "top_k": 0,
        "learning_rate": opt.lr,
        "lr_scheduler_type": "constant",
        "warmup_steps": 0,
        "weight_decay": opt.weight_decay,
        "adam_beta1": opt.adam_beta1,
        "adam_beta2": opt.adam_beta2,
        "adam_epsilon": opt.adam_eps,
        "max_grad_norm": p.max_grad_norm,
        "beta": loss.reference_policy_kl_penalty,
        "epsilon": loss.ratio_clip_min,
        "epsilon_high": loss.ratio_clip_max,
        "loss_type": "dapo" if loss.token_level_loss else "grpo",
        "importance_sampling_level": "token",
        "scale_rewards": "group" if g.advantage_normalize_rewards else "none",
        "mask_truncated_completions": g.overlong_filtering,
        "shuffle_dataset": False,
        "seed": g.seed,
        "max_steps": per_step * grpo_steps,
        "logging_steps": per_step,
        "report_to": "none",
        "save_strategy": "no",
        "disable_tqdm": True,
        "use_cpu": True,
        "bf16": False,
        "fp16": False,
        "gradient_checkpointing": False,
        "log_completions": False,
        "dataloader_num_workers": 0,
    }


def shaped_rewards(
    scores: Sequence[float], completion_ids: Sequence[Sequence[int]], stops: Any, config: Any
) -> list[float | None]:
    """The verifier's scores with our loop's `grpo.reward_shaping` (TRL has no stop penalty
    of its own): a completion is truncated when it does not end on a stop token (TRL's
    completion ids keep the EOS that ended one)."""
    import torch
    from mcore_grpo.grpo.algorithm.reward_shaping import shape_rewards, truncated

    rewards = torch.tensor(scores, dtype=torch.float32)
    cut = truncated(completion_ids, tuple(stops))
    lengths = [len(c) for c in completion_ids]
    return shape_rewards(rewards, lengths, cut, config.grpo.reward_shaping).tolist()


def _peak_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def _setup(args: argparse.Namespace, work: Path) -> tuple[Any, Any]:
    """(run config with the model resolved, our `MathTask`), in a child process."""
    import torch

    torch.set_num_threads(args.threads)
    from mcore_grpo.config.loader import load_config
    from mcore_grpo.grpo.policy_model.hf_model import resolve_model
    from mcore_grpo.grpo.tasks.math_task import make_task

    config = resolve_model(load_config(PRESET, None, bench_overrides(args)), work)
    return config, make_task(config)


class WallClock:
    """Held-out accuracy at fixed amounts of training time: `start` grades step 0,
    `after_step` adds a step's seconds and grades at the first step past each mark."""

    def __init__(self, minutes: float, checkpoints: int, grade: Callable[[], float]) -> None:
        total = minutes * 60
        self.marks = [total * (i + 1) / checkpoints for i in range(checkpoints)]
        self.grade = grade
        self.seconds = 0.0
        self.curve: list[tuple[float, float]] = []

    def _record(self) -> None:
        start = time.perf_counter()
        accuracy = self.grade()
        self.curve.append((self.seconds, accuracy))
        print(
            f"[bench_trl] {self.seconds:7.1f} s trained: held-out accuracy {accuracy:.3f} "
            f"(graded in {time.perf_counter() - start:.0f} s)",
            file=sys.stderr,
            flush=True,
        )

    def start(self) -> None:
        """Grade the untrained policy."""
        self._record()

    def after_step(self, seconds: float) -> bool:
        """Count a finished GRPO step; True when the last mark is passed (stop training)."""
        self.seconds += seconds
        if self.seconds >= self.marks[0]:
            self.marks = [m for m in self.marks if m > self.seconds]
            self._record()
        return not self.marks


def _progress(side: str) -> Callable[[dict[str, Any]], None]:
    """A line on stderr per GRPO step: a long run shows it is moving."""

    def show(record: dict[str, Any]) -> None:
        print(
            f"[bench_trl] {side} GRPO step {record['step']}: {record['step_time_s']:.1f} s",
            file=sys.stderr,
            flush=True,
        )

    return show


def _grader(
    task: Any, config: Any, args: argparse.Namespace, path: Path, side: str
) -> Callable[[], float]:
    """Grades the checkpoint at `path` (written just before) with the project's HF grader; the
    samples of the n-th grade go to ``--samples``/`side` under step n."""
    from mcore_grpo.grpo.tasks.evaluation import Evaluator
    from mcore_grpo.grpo.tasks.hf_eval import evaluate_checkpoint

    evaluator = Evaluator(task, args.eval_size)
    g = config.grpo
    samples = args.samples / side
    shutil.rmtree(samples, ignore_errors=True)
    samples.mkdir(parents=True)
    grades = 0

    def grade() -> float:
        nonlocal grades
        found = evaluate_checkpoint(
            path,
            evaluator,
            config.policy.generation.max_new_tokens,
            g.val_batch_size,
            "cpu",
            output_dir=samples,
            step=grades,
        )
        grades += 1
        shutil.rmtree(path, ignore_errors=True)
        return float(found["validation/hf_accuracy"])

    return grade


def training_draws(task: Any, config: Any, steps: int) -> dict[str, int]:
    """How many training prompts `steps` GRPO steps drew and how many distinct problems they
    were (both sides train on the same draws): with a large pool most are seen once, so
    held-out accuracy measures arithmetic learned, not answers remembered."""
    drawn = [
        p.question
        for step in range(1, steps + 1)
        for p in task.sample_problems(config.grpo.num_prompts_per_step, config.grpo.seed, step)
    ]
    return {
        "train_pool": len({p.question for p in task.train}),  # distinct (base_share repeats)
        "drawn": len(drawn),
        "distinct": len(set(drawn)),
    }


def training_tokens(task: Any, config: Any, step: int, record: dict[str, Any]) -> int:
    """Tokens our training pass forwards in GRPO step `step`: each prompt once per group
    (shared-prefix rows) and every sample's generated tokens."""
    problems = task.sample_problems(config.grpo.num_prompts_per_step, config.grpo.seed, step)
    prompts = sum(len(p.prompt_ids) for p in problems)
    return prompts + round(record["mean_gen_tokens_per_sample"] * config.samples_per_step)


def _parameters(checkpoint: Path) -> int:
    """The checkpoint's parameter count (its safetensors shapes; tied weights counted once)."""
    from safetensors import safe_open

    total = 0
    for path in sorted(checkpoint.glob("*.safetensors")):
        with safe_open(str(path), framework="pt") as f:
            for name in f.keys():  # noqa: SIM118 (safe_open is no mapping)
                total += math.prod(f.get_slice(name).get_shape())
    return total


def matmul_peak_gflops(size: int = 2048, repeat: int = 5) -> float:
    """This process's fp32 matmul rate at the bench's threads: the best of `repeat` products of
    two [size, size] matrices (2 size^3 FLOP each), the ceiling a training pass is measured by."""
    import torch

    a, b = torch.randn(size, size), torch.randn(size, size)
    torch.mm(a, b)
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best / 1e9


def ours_side(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Our GRPO loop, one in-process rank (`mcore-grpo --in-process`)."""
    config, task = _setup(args, work)
    from mcore_grpo.grpo.driver.loop import GRPOLoop
    from mcore_grpo.grpo.ranks.messages import TaskTokens
    from mcore_grpo.grpo.ranks.runner import make_runner

    runner = make_runner(config, TaskTokens.of(task), 1, in_process=True)
    try:
        show = _progress("ours")
        loop = GRPOLoop(config, task, runner, work / "ours", on_step=show)
        if not args.accuracy_minutes:
            records = loop.run(progress=False).records
            steps = [
                {
                    "step_time_s": r["step_time_s"],
                    "generation_time_s": r["generation_time_s"],
                    "logprob_time_s": r["logprob_time_s"],
                    "training_time_s": r["training_time_s"],
                    "reward": r["reward_mean"],
                    "train_tokens": training_tokens(task, config, step, r),
                }
                for step, r in enumerate(records, start=1)
            ]
            return {
                "steps": steps,
                "peak_rss_gib": _peak_rss_gib(),
                "parameters": _parameters(Path(config.policy.model_name)),
                "matmul_peak_gflops": matmul_peak_gflops(),
            }
        export = work / "ours-hf"
        grade = _grader(task, config, args, export, "ours")

        def export_and_grade() -> float:
            loop.export(export)
            return grade()

        clock = WallClock(args.accuracy_minutes, args.checkpoints, export_and_grade)
        clock.start()
        step = 0
        done = False
        rewards: list[float] = []
        while not done:
            step += 1
            start = time.perf_counter()
            record = loop.step(step)
            rewards.append(float(record["reward_mean"]))
            done = clock.after_step(time.perf_counter() - start)
            show(record)
        return {
            "curve": clock.curve,
            "steps_run": step,
            "rewards": rewards,
            "training_draws": training_draws(task, config, step),
            "peak_rss_gib": _peak_rss_gib(),
        }
    finally:
        runner.shutdown()


def _time_trl_phases(trainer: Any) -> dict[str, float]:
    """Wraps TRL's generation, its no-grad logprob pass and its whole rollout (generation,
    logprobs, rewards, advantages) with timers; returns the seconds they add up."""
    import torch

    spent = {"generation": 0.0, "logprob": 0.0, "rollout": 0.0}

    def timed(name: str, fn: Callable[..., Any], only_no_grad: bool = False) -> Callable[..., Any]:
        def wrapper(*a: Any, **k: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                if not (only_no_grad and torch.is_grad_enabled()):
                    spent[name] += time.perf_counter() - start

        return wrapper

    setattr(trainer, "_generate", timed("generation", trainer._generate))  # noqa: B010
    setattr(  # noqa: B010
        trainer,
        "_get_per_token_logps_and_entropies",
        timed("logprob", trainer._get_per_token_logps_and_entropies, only_no_grad=True),
    )
    setattr(  # noqa: B010
        trainer,
        "_generate_and_score_completions",
        timed("rollout", trainer._generate_and_score_completions),
    )
    return spent


def _step_timer(
    per_step: int, spent: dict[str, float], steps: list[dict[str, float]], clock: WallClock | None
) -> Any:
    """A TrainerCallback appending one record to `steps` per GRPO step (`per_step` optimizer
    steps), and stopping the run when `clock` says so."""
    from transformers import TrainerCallback

    show = _progress("trl")

    class GRPOStepTimer(TrainerCallback):
        start = 0.0

        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if state.global_step % per_step == 0:
                self.start = time.perf_counter()
                spent.update(generation=0.0, logprob=0.0, rollout=0.0)

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if state.global_step % per_step:
                return
            total = time.perf_counter() - self.start
            steps.append(
                {
                    "step_time_s": total,
                    "generation_time_s": spent["generation"],
                    "logprob_time_s": spent["logprob"],
                    "training_time_s": total - spent["rollout"],
                }
            )
            show({"step": len(steps), "step_time_s": total})
            if clock is not None and clock.after_step(total):
                control.should_training_stop = True

        def on_log(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            logs = kwargs.get("logs")
            if logs and "reward" in logs and steps:
                steps[-1]["reward"] = float(logs["reward"])

    return GRPOStepTimer()


def trl_side(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """TRL's GRPOTrainer on the same model, prompts (same order), verifier and settings."""
    config, task = _setup(args, work)
    try:
        from trl import GRPOConfig, GRPOTrainer  # pyrefly: ignore[missing-import]  # optional group
    except ImportError as err:
        raise SystemExit(
            f"bench_trl: TRL is not installed ({err}); run `uv pip install --no-deps "
            "trl==1.16.0` (or `uv sync --group trl`), or pass --side ours"
        ) from err
    import datasets
    import torch
    from transformers import AutoModelForCausalLM

    n_steps = grpo_steps(args)
    prompts = config.grpo.num_prompts_per_step
    rows = [
        {"prompt": p.text, "answer": p.answer}
        for step in range(1, n_steps + 1)
        for p in task.sample_problems(prompts, config.grpo.seed, step)
    ]
    tokenizer = task.tokenizer
    same_ids = sum(
        tokenizer(text=p.text)["input_ids"] == list(p.prompt_ids) for p in task.train + task.eval
    )
    verifier = task.verifier

    def math_verify_reward(
        completions: list[str], answer: list[str], completion_ids: list[list[int]], **_: Any
    ) -> list[float | None]:
        """NeMo-RL's verifier, shaped as our loop shapes it (grpo.reward_shaping)."""
        scores = list(verifier.scores(completions, answer))
        return shaped_rewards(scores, completion_ids, (task.eos_id,), config)

    model = AutoModelForCausalLM.from_pretrained(config.policy.model_name, dtype=torch.float32)
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=math_verify_reward,
        args=GRPOConfig(output_dir=str(work / "trl"), **trl_settings(config, n_steps)),
        train_dataset=datasets.Dataset.from_list(rows),
        processing_class=tokenizer,
    )
    spent = _time_trl_phases(trainer)
    per_step = optimizer_steps_per_grpo_step(config)
    steps: list[dict[str, float]] = []
    clock: WallClock | None = None
    if args.accuracy_minutes:
        export = work / "trl-hf"

        def save_and_grade() -> float:
            model.save_pretrained(export)  # the trained object itself (one CPU process)
            tokenizer.save_pretrained(export)
            return grade()

        grade = _grader(task, config, args, export, "trl")
        clock = WallClock(args.accuracy_minutes, args.checkpoints, save_and_grade)

    trainer.add_callback(_step_timer(per_step, spent, steps, clock))
    if clock is not None:
        clock.start()
    trainer.train()
    found: dict[str, Any] = {
        "prompt_ids_same": f"{same_ids} of {len(task.train) + len(task.eval)}",
        "peak_rss_gib": _peak_rss_gib(),
    }
    if clock is not None:
        return {
            **found,
            "curve": clock.curve,
            "steps_run": len(steps),
            "rewards": [s.get("reward", float("nan")) for s in steps],
            "training_draws": training_draws(task, config, len(steps)),
        }
    return {**found, "steps": steps}


def _run_side(side: str, args: argparse.Namespace) -> dict[str, Any]:
    """One side in a fresh process; its result line, or a RuntimeError with its stderr tail."""
    argv = [
        "--child", side, "--steps", str(args.steps), "--threads", str(args.threads),
        "--accuracy-minutes", str(args.accuracy_minutes), "--eval-size", str(args.eval_size),
        "--checkpoints", str(args.checkpoints), "--samples", str(args.samples),
        *args.overrides,
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "PYTHONPATH": str(ROOT)}
    load = os.getloadavg()[0]
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, __file__, *argv], capture_output=True, text=True, env=env, check=False
    )
    lines = [x for x in proc.stdout.splitlines() if x.startswith(RESULT_MARK)]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(
            f"bench_trl: the {side} side failed (exit {proc.returncode}); its stderr ends:\n"
            f"{proc.stderr[-4000:]}"
        )
    result = json.loads(lines[-1].removeprefix(RESULT_MARK))
    result.update(load_before=load, load_after=os.getloadavg()[0])
    result["wall_s"] = time.perf_counter() - start
    return result


def _split(step: dict[str, float]) -> dict[str, float]:
    """A step's generation / logprobs / training / other seconds."""
    parts = {k: step[f"{k}_time_s"] for k in ("generation", "logprob", "training")}
    parts["other"] = step["step_time_s"] - sum(parts.values())
    return parts


def print_throughput(results: dict[str, dict[str, Any]], samples: int, steps: int) -> None:
    """The per-side table: median step after the warm-up, its split, samples/s, peak RSS."""
    print(
        f"| side | s / GRPO step (median of {steps}) | samples/s | generation | logprobs | "
        "training | other | peak RSS GiB | load before/after |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for side, r in results.items():
        timed = r["steps"][1:] or r["steps"]
        median = statistics.median(s["step_time_s"] for s in timed)
        split = {k: statistics.median(_split(s)[k] for s in timed) for k in _split(timed[0])}
        print(
            f"| {side} | {median:.1f} | {samples / median:.2f} | {split['generation']:.1f} | "
            f"{split['logprob']:.1f} | {split['training']:.1f} | {split['other']:.1f} | "
            f"{r['peak_rss_gib']:.2f} | {r['load_before']:.2f} / {r['load_after']:.2f} |"
        )
    for side, r in results.items():
        if "matmul_peak_gflops" not in r:
            continue
        timed = r["steps"][1:] or r["steps"]
        rates = [
            6 * r["parameters"] * s["train_tokens"] / s["training_time_s"] / 1e9 for s in timed
        ]
        rate = statistics.median(rates)
        print(
            f"{side}: training pass {rate:.1f} GFLOP/s (6 x {r['parameters']:,} parameters x "
            f"tokens forwarded, median {statistics.median(s['train_tokens'] for s in timed):.0f} "
            f"a step), {rate / r['matmul_peak_gflops']:.0%} of this process's fp32 matmul peak "
            f"({r['matmul_peak_gflops']:.0f} GFLOP/s, 2048^2)"
        )
    for side, r in results.items():
        rewards = ", ".join(f"{s.get('reward', float('nan')):.3f}" for s in r["steps"])
        all_steps = ", ".join(f"{s['step_time_s']:.1f}" for s in r["steps"])
        extra = (
            f"; prompt ids equal to ours: {r['prompt_ids_same']}" if "prompt_ids_same" in r else ""
        )
        print(f"{side}: step seconds (warm-up first) {all_steps}; reward {rewards}{extra}")


def accuracy_by_operation(samples: Path) -> list[dict[str, float]]:
    """Per grade (the samples' step), the held-out accuracy of each operation's problems
    ("What is 7 * 8?" is "*"): which arithmetic was learned, not only how much."""
    grades: dict[int, dict[str, list[float]]] = {}
    for line in samples.read_text().splitlines():
        row = json.loads(line)
        question = row.get("question", "")
        op = next((o for o in ("*", "+", "-") if f" {o} " in question), "?")
        grades.setdefault(row["step"], {}).setdefault(op, []).append(float(row["score"] == 1.0))
    return [
        {op: round(sum(v) / len(v), 3) for op, v in sorted(by_op.items())}
        for _, by_op in sorted(grades.items())
    ]


def write_accuracy(results: dict[str, dict[str, Any]], args: argparse.Namespace) -> None:
    """The (seconds, accuracy) curves as JSON and a plot."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    args.json.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "minutes": args.accuracy_minutes,
        "eval_size": args.eval_size,
        "threads": args.threads,
        "overrides": args.overrides,
        "sides": {
            side: {
                "curve": r["curve"],
                "steps_run": r["steps_run"],
                "rewards": r["rewards"],
                "training_draws": r["training_draws"],
                "accuracy_by_operation": accuracy_by_operation(
                    args.samples / side / "validation_samples.jsonl"
                ),
            }
            for side, r in results.items()
        },
    }
    args.json.write_text(json.dumps(doc, indent=2) + "\n")
    fig, ax = plt.subplots(figsize=(6, 4))
    labels = {"ours": "mcore-grpo (Megatron-Core)", "trl": "TRL GRPOTrainer"}
    for side, r in results.items():
        xs = [s / 60 for s, _ in r["curve"]]
        ax.plot(xs, [a for _, a in r["curve"]], marker="o", label=labels[side])
    ax.set_xlabel("training time (minutes of GRPO steps, evaluation excluded)")
    ax.set_ylabel(f"held-out greedy accuracy ({args.eval_size} problems)")
    ax.set_title(f"SmolLM2-135M-Instruct, {PRESET}, {args.threads} CPU threads")
    ax.grid(alpha=0.3)
    ax.legend()
    args.plot.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(args.plot, dpi=120)
    for side, r in results.items():
        points = ", ".join(f"{s:.0f} s: {a:.3f}" for s, a in r["curve"])
        print(f"{side}: {r['steps_run']} GRPO steps; held-out accuracy {points}")
        print(f"{side}: training draws {doc['sides'][side]['training_draws']}")
        print(f"{side}: mean reward per GRPO step {[round(x, 3) for x in r['rewards']]}")
        for n, by_op in enumerate(doc["sides"][side]["accuracy_by_operation"]):
            print(f"{side}: grade {n} accuracy by operation {by_op}")
    print(f"curves: {args.json}  plot: {args.plot}")


def main(argv: Sequence[str] | None = None) -> None:
    """Run the chosen sides back to back and print their figures."""
    args = parse_args(argv)
    if args.child:
        with tempfile.TemporaryDirectory(prefix=f"bench-trl-{args.child}-") as tmp:
            side = ours_side if args.child == "ours" else trl_side
            result = side(args, Path(tmp))
        print(RESULT_MARK + json.dumps(result), flush=True)
        return
    sides = ("ours", "trl") if args.side == "both" else (args.side,)
    load = os.getloadavg()
    results = {side: _run_side(side, args) for side in sides}
    from mcore_grpo.config.loader import load_config

    config = load_config(PRESET, None, bench_overrides(args))
    print(
        f"SmolLM2-135M-Instruct, {PRESET}, fp32, {args.threads} torch threads on "
        f"{os.cpu_count()} CPUs; {config.grpo.num_prompts_per_step} prompts x "
        f"{config.grpo.num_generations_per_prompt} samples, "
        f"{config.policy.generation.max_new_tokens} new tokens, "
        f"{optimizer_steps_per_grpo_step(config)} optimizer steps per GRPO step; "
        f"load average {load[0]:.2f} before, {os.getloadavg()[0]:.2f} after; "
        + ", ".join(f"{s} {r['wall_s']:.0f} s wall" for s, r in results.items())
    )
    if args.accuracy_minutes:
        write_accuracy(results, args)
    else:
        print_throughput(results, config.samples_per_step, args.steps)


if __name__ == "__main__":
    main()

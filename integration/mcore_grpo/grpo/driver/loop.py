"""The GRPO loop: prompts -> samples -> rewards -> advantages -> split train step -> next.

The driver (this module) owns the task and the reward; the workers own the model. Per step:

1. draw ``grpo.num_prompts_per_step`` problems (a pure function of seed and step, so a
   resumed run sees the same prompts), spread whole prompt groups over the workers;
2. each worker samples ``grpo.num_generations_per_prompt`` responses per group;
3. the driver scores them (`task.reward`) and computes group-normalised advantages;
4. the samples are cut into optimizer steps of ``policy.train_global_batch_size``, each cut
   evenly over the data-parallel workers, which compute policy and reference logprobs and
   run the split train step (clipped PG loss + KL penalty, one gradient reduction);
5. metrics.jsonl gets one record, the log one line; a checkpoint is written as configured.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from mcore_grpo.config.deadline import Deadline, must_save_by_seconds
from mcore_grpo.config.loader import dump_yaml
from mcore_grpo.config.schema import RunConfig, check_data_parallel
from mcore_grpo.grpo.algorithm.advantages import group_advantages
from mcore_grpo.grpo.algorithm.reward_shaping import loss_multipliers, shape_rewards, truncated
from mcore_grpo.grpo.driver import checkpoint
from mcore_grpo.grpo.driver.metrics import (
    MetricsWriter,
    read_metrics,
    rollout_metrics,
    step_line,
    train_metrics,
    truncation_metrics,
)
from mcore_grpo.grpo.driver.metrics_plot import plot_metrics
from mcore_grpo.grpo.ranks.messages import GenerateResult, GroupSpec, TrainResult, TrainShard
from mcore_grpo.grpo.ranks.runner import Runner
from mcore_grpo.grpo.ranks.worker_settings import stop_token_ids
from mcore_grpo.grpo.tasks.evaluation import Evaluator
from mcore_grpo.grpo.tasks.task import Task

log = logging.getLogger("mcore_grpo")

# Crash injection for the kill/resume tests (tests/integration/grpo/test_crash_resume.py):
# "step:N" SIGKILLs this process in the middle of step N (after sampling, before training),
# "save:N" in the middle of the save after step N (rank files written, not yet published).
# Not a user setting.
INJECT_KILL_ENV = "MCORE_GRPO_INJECT_KILL"

HF_DIR = "hf"  # a checkpoint's policy in Hugging Face format (checkpointing.save_consolidated)


def _injected_kill(point: str, step: int) -> None:
    if os.environ.get(INJECT_KILL_ENV) == f"{point}:{step}":
        os.kill(os.getpid(), signal.SIGKILL)


@dataclass
class RunResult:
    """What a finished run produced."""

    records: list[dict[str, Any]] = field(default_factory=list)
    metrics_path: Path | None = None
    plot_path: Path | None = None
    checkpoint_path: Path | None = None
    hf_path: Path | None = None  # the trained policy in Hugging Face format, when exported


def split_even(items: list[Any], parts: int) -> list[list[Any]]:
    """`items` cut into `parts` contiguous equal slices (the caller checked divisibility)."""
    size = len(items) // parts
    return [items[i * size : (i + 1) * size] for i in range(parts)]


@dataclass(frozen=True)
class ReplicaLayout:
    """Which data-parallel replica each rank belongs to: `world` ranks, `dp` replicas.

    Ranks are grouped contiguously (with TP > 1 the ranks of one replica share its data and
    return the same results): rank r is in replica ``r * dp // world``.
    """

    dp: int
    world: int

    def replica_of(self, rank: int) -> int:
        """The replica `rank` belongs to."""
        return rank * self.dp // self.world

    def first_rank(self, replica: int) -> int:
        """The lowest rank of `replica` (the one whose results speak for it)."""
        return replica * self.world // self.dp

    def per_rank(self, per_replica: list[Any]) -> list[Any]:
        """`per_replica[d]` handed to every rank of replica d, in rank order."""
        return [per_replica[self.replica_of(r)] for r in range(self.world)]

    def per_replica(self, per_rank: list[Any]) -> list[Any]:
        """One result per replica (its first rank's), in replica order."""
        return [per_rank[self.first_rank(d)] for d in range(self.dp)]


class GRPOLoop:
    """Drives the runner's ranks through `grpo.max_num_steps` GRPO steps."""

    def __init__(
        self,
        config: RunConfig,
        task: Task,
        runner: Runner,
        output_dir: Path,
        *,
        on_step: Callable[[dict[str, Any]], None] | None = None,
        export_hf: Path | None = None,
    ) -> None:
        """`export_hf`: where the policy goes in Hugging Face format after the last step."""
        self.config = config
        self.export_hf_dir = export_hf.resolve() if export_hf is not None else None
        self.task = task
        self.runner = runner
        # Absolute: Ray actors run in their own working directory.
        self.output_dir = output_dir.resolve()
        self.on_step = on_step
        self.dp = check_data_parallel(config, runner.world_size)
        self.layout = ReplicaLayout(self.dp, runner.world_size)
        if config.grpo.num_prompts_per_step % self.dp:
            raise ValueError(
                f"grpo.num_prompts_per_step={config.grpo.num_prompts_per_step} must be a "
                f"multiple of the data-parallel size {self.dp} (whole prompt groups per worker)"
            )
        prompt_len = task.max_prompt_tokens
        self.seq_len = prompt_len + config.policy.generation.max_new_tokens
        if self.seq_len > config.policy.max_total_sequence_length:
            raise ValueError(
                f"prompt ({prompt_len}) + policy.generation.max_new_tokens "
                f"({config.policy.generation.max_new_tokens}) = {self.seq_len} tokens exceed "
                f"policy.max_total_sequence_length={config.policy.max_total_sequence_length}"
            )
        self.signature = checkpoint.model_signature(config.to_dict(), task.vocab_size)
        self.stop_ids = stop_token_ids(config.policy.generation, task.eos_id)
        self.evaluator = Evaluator(task, config.grpo.max_val_samples, self.stop_ids)
        self.current_step: int | None = None  # the step being run (named when a run aborts)
        # The run's last step: grpo.max_num_steps, or earlier by checkpoint_must_save_by.
        self.last_step = config.grpo.max_num_steps

    # ---- one step -------------------------------------------------------------------
    def step(self, step: int) -> dict[str, Any]:
        """Run GRPO step `step` (1-based) and return its metrics record."""
        cfg = self.config
        n = cfg.grpo.num_generations_per_prompt
        t0 = time.perf_counter()
        problems = self.task.sample_problems(cfg.grpo.num_prompts_per_step, cfg.grpo.seed, step)
        gen_start = time.perf_counter()
        responses, gen_logprobs = self._generate(step, problems)
        generation_time = time.perf_counter() - gen_start
        _injected_kill("step", step)
        sample_problems: list[Any] = [p for p in problems for _ in range(n)]

        scores = torch.tensor(self.task.rewards(responses, sample_problems), dtype=torch.float32)
        lengths = [len(r) for r in responses]
        cut = truncated(responses, self.stop_ids)
        rewards = shape_rewards(scores, lengths, cut, cfg.grpo.reward_shaping)
        group_ids = torch.arange(len(problems)).repeat_interleave(n)
        advantages = group_advantages(
            rewards,
            group_ids,
            leave_one_out=cfg.grpo.advantage_leave_one_out,
            normalize=cfg.grpo.advantage_normalize_rewards,
        )

        weights = loss_multipliers(cut, cfg.grpo.overlong_filtering)
        rank_shards = self._train_shards(
            sample_problems, responses, advantages, gen_logprobs, weights
        )
        results: list[TrainResult] = self.runner.call(
            "train", [(step, shards, self.seq_len) for shards in rank_shards]
        )
        replica_results = self.layout.per_replica(results)
        exact = float((scores == 1.0).float().mean())
        training = train_metrics(replica_results)
        record: dict[str, Any] = {
            "step": step,
            "reward_mean": float(rewards.mean()),
            "reward_std": float(rewards.std()) if len(rewards) > 1 else 0.0,
            "accuracy": exact,
            "position_accuracy": self.task.position_accuracy(responses, sample_problems),
            **training,
            "response_tokens_mean": sum(lengths) / len(responses),
            **rollout_metrics(rewards.tolist(), n, lengths),
            **truncation_metrics(cut, scores),
            "generation_time_s": generation_time,
            "logprob_time_s": max(r.logprob_time_s for r in results),
            "training_time_s": max(r.training_time_s for r in results),
            "step_time_s": time.perf_counter() - t0,
            "workers": self.layout.world,
        }
        if not math.isfinite(training["loss"]):
            raise FloatingPointError(
                f"step {step}: loss is {training['loss']}; lower "
                "policy.megatron_cfg.optimizer.lr or check the config"
            )
        return record

    def _generate(
        self, step: int, problems: Sequence[Any]
    ) -> tuple[list[list[int]], list[list[float]]]:
        """Responses and their sampler logprobs, `num_generations_per_prompt` per problem."""
        groups = [GroupSpec(i, p.prompt_ids) for i, p in enumerate(problems)]
        # Prompt groups over replicas; with TP > 1 the ranks of one DP replica share groups.
        per_rank = [(step, g) for g in self.layout.per_rank(split_even(groups, self.dp))]
        outputs: list[GenerateResult] = self.runner.call("generate", per_rank)
        # One copy per DP replica, in group order.
        replica_outputs = self.layout.per_replica(outputs)
        responses = [r for out in replica_outputs for r in out.responses]
        gen_logprobs = [lp for out in replica_outputs for lp in out.generation_logprobs]
        return responses, gen_logprobs

    def _train_shards(
        self,
        sample_problems: list[Any],
        responses: list[list[int]],
        advantages: torch.Tensor,
        gen_logprobs: list[list[float]],
        weights: list[float],
    ) -> list[list[TrainShard]]:
        """`[r][k]`: rank r's slice of optimizer step k (global batches cut evenly over DP)."""
        gbs = self.config.policy.train_global_batch_size
        rank_shards: list[list[TrainShard]] = [[] for _ in range(self.layout.world)]
        for start in range(0, len(responses), gbs):
            idx = list(range(start, start + gbs))
            shards = [
                TrainShard(
                    prompts=[list(sample_problems[i].prompt_ids) for i in part],
                    responses=[responses[i] for i in part],
                    advantages=[float(advantages[i]) for i in part],
                    generation_logprobs=[gen_logprobs[i] for i in part],
                    sample_mask=[weights[i] for i in part],
                )
                for part in split_even(idx, self.dp)
            ]
            for r, shard in enumerate(self.layout.per_rank(shards)):
                rank_shards[r].append(shard)
        return rank_shards

    # ---- held-out evaluation --------------------------------------------------------
    def _evaluates_after(self, step: int) -> bool:
        g = self.config.grpo
        last = step == self.last_step and g.val_at_end
        return last or (g.val_period > 0 and step % g.val_period == 0)

    def _evaluate(self, step: int) -> dict[str, float]:
        """Greedy accuracy on the task's held-out split after `step` (0: before training),
        by the workers' own generation and the task's verifier; samples to
        validation_samples.jsonl."""
        problems = self.evaluator.problems
        if not problems:
            return {}
        start = time.perf_counter()
        size = -(-len(problems) // self.dp)
        chunks = [
            [p.prompt_ids for p in problems[i * size : (i + 1) * size]] for i in range(self.dp)
        ]
        batch = self.config.grpo.val_batch_size
        outputs = self.runner.call("evaluate", [(c, batch) for c in self.layout.per_rank(chunks)])
        responses = [r for out in self.layout.per_replica(outputs) for r in out]
        result = self.evaluator.score(step, problems, responses, self.output_dir)
        result["validation/time_s"] = time.perf_counter() - start
        log.info(
            "validation after step %d: accuracy %.3f on %d held-out problems (greedy, %.0f s)",
            step,
            result["validation/accuracy"],
            len(problems),
            result["validation/time_s"],
        )
        stated = result.get("validation/answer_stated")
        if stated is not None and result["validation/accuracy"] - stated > 0.2:
            log.warning(
                "mcore-grpo: warning: the verifier scores %.3f correct, but only %.3f of the "
                "responses write the answer: it accepts responses that never write it; read "
                "validation_samples.jsonl (docs/real-model.md)",
                result["validation/accuracy"],
                stated,
            )
        return result

    def _evaluate_export(self, hf_path: Path) -> dict[str, Any]:
        """The exported checkpoint's held-out accuracy under `transformers`' own generate."""
        from mcore_grpo.grpo.tasks.hf_eval import evaluate_checkpoint

        start = time.perf_counter()
        g = self.config.grpo
        # The run's device where this process has it (in-process, or a driver on a GPU node);
        # a driver without one grades on its CPU.
        wants_cuda = self.config.policy.device == "cuda"
        device = "cuda" if wants_cuda and torch.cuda.is_available() else "cpu"
        found = evaluate_checkpoint(
            hf_path,
            self.evaluator,
            self.config.policy.generation.max_new_tokens,
            g.val_batch_size,
            device,
        )
        log.info(
            "exported checkpoint under transformers.generate: held-out accuracy %.3f (greedy, "
            "%.0f s on %s)",
            found["validation/hf_accuracy"],
            time.perf_counter() - start,
            device,
        )
        return found

    # ---- checkpoints ----------------------------------------------------------------
    def save(self, step: int) -> Path:
        """Atomic checkpoint after `step` (see `mcore_grpo.grpo.driver.checkpoint`)."""
        tmp = checkpoint.begin_save(self.output_dir, step)
        written = self.runner.call("save", [(str(tmp),)] * self.runner.world_size)
        files = [entry for rank_files in written for entry in rank_files]
        if self.config.checkpointing.save_consolidated:
            self.export(tmp / HF_DIR)
        _injected_kill("save", step)
        cfg = self.config
        return checkpoint.finish_save(
            tmp,
            step,
            self.runner.world_size,
            self.signature,
            cfg.to_dict(),
            files,
            keep=cfg.checkpointing.keep_top_k,
        )

    def export(self, path: Path) -> Path:
        """The policy in Hugging Face format at `path` (every rank takes part; rank 0 writes)."""
        self.runner.call("export_hf", [(str(path),)] * self.runner.world_size)
        return path

    def resume(self) -> int:
        """Load the latest checkpoint of `output_dir`; returns the step it ended."""
        point = checkpoint.find_latest(self.output_dir, refused=log.warning)
        checkpoint.check_compatible(point, self.signature, self.runner.world_size)
        self.runner.call(
            "load",
            [
                (str(point.rank_file(r)), str(point.reference_file))
                for r in range(self.runner.world_size)
            ],
        )
        return point.step

    # ---- the run --------------------------------------------------------------------
    def run(self, *, resume: bool = False, progress: bool = True) -> RunResult:
        """All steps; metrics, plot and final checkpoint under `output_dir`."""
        self.output_dir.mkdir(parents=True, exist_ok=True)
        (self.output_dir / "config.yaml").write_text(dump_yaml(self.config))
        first = 1
        if resume:
            first = self.resume() + 1
            log.info("resumed from step %d", first - 1)
        metrics_path = self.output_dir / "metrics.jsonl"
        writer = MetricsWriter(metrics_path, truncate_after_step=first - 1 if resume else None)
        max_steps = self.config.grpo.max_num_steps
        bar = None
        if progress:
            from tqdm import tqdm

            bar = tqdm(total=max_steps, initial=first - 1, desc="GRPO", unit="step", leave=True)
        result = RunResult(metrics_path=metrics_path)
        period = self.config.checkpointing.save_period
        deadline = Deadline(must_save_by_seconds(self.config.checkpointing.checkpoint_must_save_by))
        at_start = self._evaluate(0) if first == 1 and self.config.grpo.val_at_start else {}
        try:
            for step in range(first, max_steps + 1):
                self.current_step = step
                record = self.step(step)
                if step < max_steps and deadline.reached():
                    self._end_early(step, deadline)
                if step == 1:
                    record.update({f"{k}_at_start": v for k, v in at_start.items()})
                if self._evaluates_after(step):
                    record.update(self._evaluate(step))
                writer.write(record)
                self._report(record, bar)
                if self.config.checkpointing.enabled and period > 0 and step % period == 0:
                    result.checkpoint_path = self.save(step)
                if step == self.last_step:
                    break
        finally:
            if bar is not None:
                bar.close()
        self._finish(result, writer, first)
        return result

    def _end_early(self, step: int, deadline: Deadline) -> None:
        """`step` becomes the last: one more would pass checkpointing.checkpoint_must_save_by."""
        self.last_step = step
        log.info(
            "mcore-grpo: checkpointing.checkpoint_must_save_by=%s is near after "
            "step %d (%.0f s in, %.0f s a step): the run ends here; --resume goes on",
            self.config.checkpointing.checkpoint_must_save_by,
            step,
            deadline.elapsed(),
            deadline.mean_step(),
        )

    def _report(self, record: dict[str, Any], bar: Any) -> None:
        """A step's line (on the progress bar, or in the log), then `on_step`."""
        line = step_line(record, self.config.grpo.max_num_steps)
        if bar is not None:
            bar.write(line)
            bar.set_postfix(reward=f"{record['reward_mean']:.2f}")
            bar.update(1)
        else:
            log.info(line)
        if self.on_step is not None:
            self.on_step(record)

    def _finish(self, result: RunResult, writer: MetricsWriter, first: int) -> None:
        """After the last step: its checkpoint (unless the loop saved it), the export and its
        held-out accuracy, the records read back and plotted, all into `result`."""
        cfg = self.config
        last = self.last_step
        period = cfg.checkpointing.save_period
        saved_last = period > 0 and last % period == 0  # the loop saved it already
        if cfg.checkpointing.enabled and first <= last and not saved_last:
            result.checkpoint_path = self.save(last)
        if self.export_hf_dir is not None:
            result.hf_path = self.export(self.export_hf_dir)
        elif cfg.checkpointing.save_consolidated and result.checkpoint_path is not None:
            result.hf_path = result.checkpoint_path / HF_DIR
        if result.hf_path is not None and cfg.grpo.val_at_end and self.evaluator.problems:
            writer.amend_last(self._evaluate_export(result.hf_path))
        result.records = read_metrics(writer.path)
        if result.records:
            result.plot_path = plot_metrics(
                result.records,
                self.output_dir / "reward_loss.png",
                f"GRPO {cfg.policy.model_name} on {self.task.name} "
                f"({self.runner.world_size} worker{'s' if self.runner.world_size > 1 else ''})",
            )

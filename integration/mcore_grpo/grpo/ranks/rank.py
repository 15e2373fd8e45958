"""The Ray actor (or in-process object) of one policy rank: a `MegatronPolicyWorker` driven by
the GRPO loop's messages (`mcore_grpo.grpo.ranks.messages`).

The same class runs in-process (one rank) and as a Ray actor (`mcore_grpo.grpo.ranks.runner`).
Sampling is seeded per prompt group from (seed, step, group index) and each group is
sampled in its own call, so the samples do not depend on how groups are spread over
workers: ``--workers 2`` reproduces ``--workers 1`` to float tolerance. What the rank builds
from the run config is `mcore_grpo.grpo.ranks.worker_settings`; its batches, `train_batch`; its
loss, `loss`.
"""

from __future__ import annotations

import dataclasses
import os
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from mcore_grpo.config.schema import RunConfig
from mcore_grpo.grpo.algorithm.loss import RecordingLossSum, metric_normalizers
from mcore_grpo.grpo.cluster.placement import WorkerPlace
from mcore_grpo.grpo.ranks.messages import (
    GenerateResult,
    GroupSpec,
    TaskTokens,
    TrainResult,
    TrainShard,
)
from mcore_grpo.grpo.ranks.train_batch import left_padded, logprob_sums, shard_batch, trained_length
from mcore_grpo.grpo.ranks.worker_settings import sampling_params, worker_config
from mcore_grpo.worker.parallel import backend_for
from mcore_grpo.worker.sampling import GroupGenerators


class InjectedFailure(RuntimeError):
    """Raised by a worker told to fail (tests of the runner's failure handling)."""


def group_seed(seed: int, step: int, group: int) -> int:
    """Sampling seed of one prompt group at one step (independent of the worker layout)."""
    return (seed * 1_000_003 + step * 10_007 + group) % (2**63 - 1)


def sampled(values: torch.Tensor, lengths: torch.Tensor, width: int) -> list[Any]:
    """Each row's generated columns of `values` (ids or logprobs) as a list: the
    `lengths[row]` columns after the `width` prompt columns."""
    return [values[row, width : width + int(n)].tolist() for row, n in enumerate(lengths)]


class PolicyRank:
    """One worker: generation for its prompt groups, logprobs, its share of each train step."""

    def __init__(
        self,
        config: RunConfig,
        tokens: TaskTokens,
        rank: int,
        world_size: int,
        master_addr: str,
        master_port: int,
        *,
        num_threads: int | None = None,
        fail_at_step: int | None = None,
    ) -> None:
        if num_threads is not None:
            torch.set_num_threads(num_threads)
        self.config = config
        self.tokens = tokens
        self.rank = rank
        self.fail_at_step = fail_at_step
        # What this rank creates it tears down at shutdown, and only that: a caller's process
        # group or parallel state (a test session's, a notebook's) outlives the run.
        self._created_group = not dist.is_initialized()
        self._created_parallel_state = False
        # The torchrun variables of the group it makes (read by upstream code that asks the
        # environment for its rank), as they were before: put back at shutdown.
        self._environ_before: dict[str, str | None] = {}
        if self._created_group:
            rendezvous = {
                "RANK": str(rank),
                "WORLD_SIZE": str(world_size),
                "MASTER_ADDR": master_addr,
                "MASTER_PORT": str(master_port),
            }
            self._environ_before = {name: os.environ.get(name) for name in rendezvous}
            os.environ.update(rendezvous)
            dist.init_process_group(
                backend=backend_for(config.policy.device),
                rank=rank,
                world_size=world_size,
                timeout=timedelta(seconds=config.cluster.collective_timeout_s),
            )
        try:
            from megatron.core import parallel_state

            from mcore_grpo.worker.policy_worker import MegatronPolicyWorker

            self._created_parallel_state = not parallel_state.model_parallel_is_initialized()
            self.loss = RecordingLossSum(config.loss_fn)
            self.worker = MegatronPolicyWorker(worker_config(config, tokens), loss_sum_fn=self.loss)
            self.sampling = sampling_params(config, tokens)
        except BaseException:
            self.shutdown()  # a rank that failed to start leaves the process as it found it
            raise

    def ready(self) -> WorkerPlace:
        """Where this rank's Ray actor runs; the runner's wait for construction."""
        import ray

        return WorkerPlace(
            rank=self.rank,
            node_id=ray.get_runtime_context().get_node_id(),
            node_ip=ray.util.get_node_ip_address(),
            pid=os.getpid(),
        )

    def _maybe_fail(self, step: int, where: str) -> None:
        if self.fail_at_step is not None and step == self.fail_at_step:
            raise InjectedFailure(f"injected failure in {where} at step {step} on rank {self.rank}")

    def generate(self, step: int, groups: list[GroupSpec]) -> GenerateResult:
        """Sample `num_generations_per_prompt` responses per group; returns token lists.

        All of this rank's groups go through one batched generate call (left-padded to the
        longest prompt), each group drawing from its own seeded generator
        (`GroupGenerators`), so its samples do not depend on the other groups in the batch."""
        self._maybe_fail(step, "generate")
        start = time.perf_counter()
        n = self.config.grpo.num_generations_per_prompt
        self.worker.prepare_for_generation()
        device = self.worker.device
        prompts = [group.prompt_ids for group in groups for _ in range(n)]
        ids, mask = left_padded(prompts, self.tokens.pad_id)
        # On the worker's device: CUDA sampling cannot draw from a CPU generator.
        generators = GroupGenerators(
            tuple(
                torch.Generator(device=device).manual_seed(
                    group_seed(self.config.grpo.seed, step, group.index)
                )
                for group in groups
            ),
            rows=n,
        )
        out = self.worker.generate(ids, mask, self.sampling, generators)
        responses = sampled(out.output_ids, out.generation_lengths, ids.shape[1])
        gen_logprobs = sampled(out.logprobs, out.generation_lengths, ids.shape[1])
        self.worker.finish_generation()
        return GenerateResult(
            responses=responses,
            generation_logprobs=gen_logprobs,
            time_s=time.perf_counter() - start,
        )

    def evaluate(self, prompts: list[tuple[int, ...]], batch_size: int) -> list[list[int]]:
        """Greedy responses to `prompts` (held-out evaluation), `batch_size` prompts per
        generate call, each batch left-padded to its longest prompt."""
        params = dataclasses.replace(self.sampling, greedy=True)
        self.worker.prepare_for_generation()
        responses: list[list[int]] = []
        for start in range(0, len(prompts), batch_size):
            chunk = prompts[start : start + batch_size]
            ids, mask = left_padded(chunk, self.tokens.pad_id)
            out = self.worker.generate(ids, mask, params)
            responses += sampled(out.output_ids, out.generation_lengths, ids.shape[1])
        self.worker.finish_generation()
        return responses

    def _logprobs(self, batch: dict[str, torch.Tensor], reference: bool) -> torch.Tensor:
        size = self.config.policy.logprob_batch_size
        fn = self.worker.get_reference_policy_logprobs if reference else self.worker.get_logprobs
        rows = batch["input_ids"].shape[0]
        parts = [fn({k: v[i : i + size] for k, v in batch.items()}) for i in range(0, rows, size)]
        return torch.cat(parts, dim=0)

    def train(self, step: int, shards: list[TrainShard], seq_len: int) -> TrainResult:
        """This rank's part of each optimizer step of GRPO step `step`.

        `shards[k]` is this rank's slice of optimizer step k. Returns loss/KL sums and counts
        for the driver to reduce, and the time split.
        """
        self._maybe_fail(step, "train")
        multiple = 8 * self.config.policy.megatron_cfg.tensor_model_parallel_size
        batches = [
            shard_batch(
                s, trained_length(s, seq_len, multiple), self.tokens.pad_id, self.worker.device
            )
            for s in shards
        ]
        start = time.perf_counter()
        self.worker.prepare_for_lp_inference()
        # As NeMo-RL, no reference forward at KL coefficient 0 (the `kl` metric reads 0),
        # unless grpo.skip_reference_policy_logprobs_calculation=false asks for that metric.
        with_reference = not self.config.skips_reference_logprobs
        sums = []
        for batch in batches:
            batch["prev_logprobs"] = self._logprobs(batch, reference=False)
            if with_reference:
                batch["reference_policy_logprobs"] = self._logprobs(batch, reference=True)
            sums.append(logprob_sums(batch, self.config.loss_fn))
        logprob_time = time.perf_counter() - start
        start = time.perf_counter()
        self.worker.prepare_for_training()
        lr = self.worker.set_schedule(step - 1)  # one tick per GRPO step, as NeMo-RL's
        step_metrics = []
        kl_penalty = []
        token_sums = []
        per_token = [k for k, v in metric_normalizers(self.config.loss_fn).items() if v == "tokens"]
        for batch in batches:
            self.loss.take()  # nothing from outside this optimizer step
            metrics = self.worker.train(batch)
            step_metrics.append(metrics)
            raw = self.loss.take()
            # kl_penalty is normalised like the gradient: by the step's global count.
            count = metrics["global_valid"]
            kl_penalty.append(raw.get("kl_penalty", 0.0) / count if count else 0.0)
            token_sums.append({k: raw[k] for k in per_token if k in raw})
        training_time = time.perf_counter() - start
        return TrainResult(
            kl_sum=[s.kl_sum for s in sums],
            prob_error_sum=[s.prob_error_sum for s in sums],
            tokens=[s.tokens for s in sums],
            kl_penalty=kl_penalty,
            loss=[m["global_loss"] for m in step_metrics],
            grad_norm=[m["grad_norm"] for m in step_metrics],
            logprob_time_s=logprob_time,
            training_time_s=training_time,
            moe=[{k: v for k, v in m.items() if k.startswith("moe/")} for m in step_metrics]
            if "moe/tokens_per_expert" in step_metrics[0]
            else [],
            token_metric_sums=token_sums,
            lr=lr,
        )

    # ---- checkpoints ----------------------------------------------------------------
    def _inner_optimizers(self) -> list[Any]:
        opt = self.worker.policy.optimizer
        return list(getattr(opt, "chained_optimizers", [opt]))

    def save(self, tmp_dir: str) -> list[dict[str, Any]]:
        """Write this rank's weights and optimizer shard (and, on rank 0, the reference);
        the manifest entries of the files written."""
        from mcore_grpo.grpo.driver import checkpoint

        self.worker.prepare_for_lp_inference()  # param sync: every rank's weights current
        state = {
            "model": self.worker.policy.gpt.state_dict(),
            "optimizer": [o.optimizer.state_dict() for o in self._inner_optimizers()],
        }
        files = [checkpoint.save_rank_state(Path(tmp_dir), self.rank, state)]
        if self.rank == 0:
            files.append(
                checkpoint.save_reference(Path(tmp_dir), self.worker.reference.state_dict())
            )
        return files

    def export_hf(self, path: str) -> str:
        """The policy as a Hugging Face checkpoint at `path` (collective; rank 0 writes)."""
        from mcore_grpo.worker.hf_export import export_hf

        self.worker.prepare_for_lp_inference()  # param sync: every rank's weights current
        export_hf(self.worker.config, self.worker.policy.gpt, Path(path))
        return path

    def restore(self, model: dict[str, Any], where: Path, optimizer: list[Any] | None) -> None:
        """Load `model` (checked against the live shapes; `where` names its file in errors)
        and, when given, the optimizer shards, as `save` and NeMo-RL's checkpoints hold them."""
        from mcore_grpo.grpo.driver import checkpoint

        live = self.worker.policy.gpt.state_dict()
        checkpoint.check_shapes(
            {k: v for k, v in model.items() if isinstance(v, torch.Tensor)},
            {k: v for k, v in live.items() if isinstance(v, torch.Tensor)},
            where,
        )
        self.worker.policy.gpt.load_state_dict(model)
        if optimizer is None:
            return
        for opt, opt_state in zip(
            self._inner_optimizers(), checkpoint.resizable(optimizer), strict=True
        ):
            opt.optimizer.load_state_dict(opt_state)

    def load(self, rank_file: str, reference_file: str) -> None:
        """Restore weights, optimizer shard and reference weights from a checkpoint."""
        from mcore_grpo.grpo.driver import checkpoint

        state = torch.load(rank_file, map_location="cpu", weights_only=False)
        self.restore(state["model"], Path(rank_file), state["optimizer"])
        reference = torch.load(reference_file, map_location="cpu", weights_only=True)
        held = self.worker.reference.state_dict()
        checkpoint.check_shapes(reference, held, Path(reference_file))
        self.worker.reference.load_state_dict(reference)

    def shutdown(self) -> None:
        """Tear down megatron's parallel state and the process group, where this rank made them."""
        if self._created_parallel_state:
            from megatron.core import parallel_state

            parallel_state.destroy_model_parallel()
        if self._created_group and dist.is_initialized():
            dist.destroy_process_group()
        for name, value in self._environ_before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value

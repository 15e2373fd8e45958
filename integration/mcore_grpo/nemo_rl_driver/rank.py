"""The Ray actor NeMo-RL's `grpo_train` drives: our `PolicyRank` taking NeMo-RL's batches.

One actor per data-parallel rank, each holding one `MegatronPolicyWorker` (built exactly as
our own loop builds it, `mcore_grpo.grpo.ranks.rank.PolicyRank`). The driver-side adapter
(`mcore_grpo.nemo_rl_driver.policy`) shards NeMo-RL's `BatchedDataDict`s over the actors;
here each shard becomes the worker's batch (`batches.worker_batch`) and NeMo-RL's loss
function becomes the worker's microbatch loss (`loss.NemoRLLossSum`), so the gradient is
NeMo-RL's loss differentiated by our split train step (one reduction per optimizer step).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from mcore_grpo.grpo.nemo_rl.source import require_nemo_rl
from mcore_grpo.grpo.ranks.rank import PolicyRank
from mcore_grpo.nemo_rl_driver.batches import generation_output, left_pad, worker_batch
from mcore_grpo.nemo_rl_driver.loss import NemoRLLossSum, loss_level

# Before any NeMo-RL object reaches this process: Ray unpickles the BatchedDataDicts and the
# loss function the driver sends only after importing this module.
require_nemo_rl()

from nemo_rl.distributed.batched_data_dict import BatchedDataDict  # noqa: E402


def _optimizer_lr_wd(optimizer: Any) -> dict[str, float]:
    """The first parameter group's lr and weight decay (NeMo-RL logs both per microbatch)."""
    groups = getattr(optimizer, "param_groups", None) or [{}]
    return {
        "lr": float(groups[0].get("lr", math.nan)),
        "wd": float(groups[0].get("weight_decay", 0.0)),
    }


class NemoRLRank(PolicyRank):
    """`PolicyRank` with NeMo-RL's worker methods (data in and out as `BatchedDataDict`)."""

    # NeMo-RL's scheduler ticks: one per train() call (its megatron worker's
    # ``scheduler.step(increment=gbs)``), kept beside the optimizer shard in a checkpoint.
    schedule_ticks: int = 0

    # ---- logprobs -------------------------------------------------------------------
    def _chunked(self, data: Any, reference: bool) -> torch.Tensor:
        batch = worker_batch(data)
        return self._logprobs(batch, reference=reference).float().cpu()

    def get_logprobs(self, data: Any) -> torch.Tensor:
        """[B, S] policy logprobs of this rank's shard (0 at position 0)."""
        return self._chunked(data, reference=False)

    def get_reference_policy_logprobs(self, data: Any) -> torch.Tensor:
        """[B, S] reference-policy logprobs of this rank's shard."""
        return self._chunked(data, reference=True)

    # ---- training -------------------------------------------------------------------
    def _global_counts(self, batch: dict[str, torch.Tensor]) -> tuple[float, float]:
        """Global valid (tokens, sequences) of one optimizer step, over data parallel."""
        from megatron.core import parallel_state

        seqs = batch["sample_mask"].float().sum()
        toks = (batch["token_mask"][:, 1:].float() * batch["sample_mask"].float()[:, None]).sum()
        counts = torch.stack([toks, seqs]).to(self.worker.device, torch.float64)
        dist.all_reduce(counts, group=parallel_state.get_data_parallel_group())
        return float(counts[0]), float(counts[1])

    def train_nemo_rl(self, data: Any, loss_fn: Any, gbs: int, mbs: int, dp: int) -> dict[str, Any]:
        """NeMo-RL's `train(data, loss_fn, gbs, mbs)` on this rank's shard.

        The shard holds this rank's slice of each global batch, one after another (NeMo-RL's
        `shard_by_batch_size(dp, batch_size=gbs)`); each slice is one optimizer step. Returns
        what NeMo-RL's Megatron worker returns: ``global_loss`` per step, the last
        ``grad_norm``, ``all_mb_metrics`` (lists over microbatches).
        """
        if mbs != self.worker.config.micro_batch_size:
            raise ValueError(
                f"train: mbs={mbs} but the worker was built with micro_batch_size="
                f"{self.worker.config.micro_batch_size} (policy.train_micro_batch_size)"
            )
        level = loss_level(loss_fn)
        if level != self.worker.config.loss.level:
            raise ValueError(
                f"train: the loss is {level}-level but the worker normalises by "
                f"{self.worker.config.loss.level}s (loss_fn.token_level_loss)"
            )
        local_gbs = gbs // dp
        batch = worker_batch(data)
        rows = batch["input_ids"].shape[0]
        if local_gbs <= 0 or rows % local_gbs:
            raise ValueError(
                f"train: {rows} rows on this rank is not a multiple of gbs/dp={local_gbs}"
            )
        steps = rows // local_gbs
        adapter = NemoRLLossSum(loss_fn, wrap=BatchedDataDict)
        self.worker.set_schedule(self.schedule_ticks)
        self.worker.loss_sum_fn = adapter
        try:
            losses, metrics, grad_norm, moe = [], [], math.nan, []
            for k in range(steps):
                part = {key: v[k * local_gbs : (k + 1) * local_gbs] for key, v in batch.items()}
                toks, seqs = self._global_counts(part)
                result = self.worker.train(part)
                losses.append(result["global_loss"])
                grad_norm = result["grad_norm"]
                moe.append({k: v for k, v in result.items() if k.startswith("moe/")})
                extra = _optimizer_lr_wd(self.worker.policy.optimizer)
                metrics.extend(adapter.take(toks, seqs, steps, extra))
        finally:
            self.worker.loss_sum_fn = self.loss
        self.schedule_ticks += 1
        all_mb: dict[str, list[Any]] = {}
        for row in metrics:
            for key, value in row.items():
                all_mb.setdefault(key, []).append(value)
        out: dict[str, Any] = {
            "global_loss": torch.tensor(losses),
            "grad_norm": torch.tensor([grad_norm]),
            "all_mb_metrics": all_mb,
        }
        if moe and moe[0]:
            out["moe_metrics"] = nemo_rl_moe_metrics(moe)
        return out

    # ---- generation -----------------------------------------------------------------
    def generate_nemo_rl(self, data: Any, greedy: bool, seed: int) -> Any:
        """Sample this rank's rows of a NeMo-RL generation batch (`GenerationOutputSpec`)."""
        if greedy:
            raise NotImplementedError(
                "greedy generation: the worker's sampler draws at the config's temperature "
                "(NeMo-RL asks for greedy only in validation; keep grpo.val_period=0)"
            )
        params = self.sampling
        prompts, mask = left_pad(data["input_ids"], data["input_lengths"], params.pad_token_id)
        device = self.worker.device
        generator = torch.Generator(device=device).manual_seed(seed)
        out = self.worker.generate(prompts.to(device), mask.to(device), params, generator)
        spec = generation_output(
            data["input_ids"],
            data["input_lengths"],
            out.output_ids,
            out.logprobs,
            out.generation_lengths,
            prompt_width=prompts.shape[1],
            max_new_tokens=params.max_new_tokens,
            stop_token_ids=params.stop_token_ids,
            pad_id=params.pad_token_id,
        )
        return BatchedDataDict(spec)

    # ---- phases and checkpoints (NeMo-RL's names) -----------------------------------
    def run_worker(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Call one `MegatronPolicyWorker` entry point by name (phase transitions, offload)."""
        return getattr(self.worker, method)(*args, **kwargs)

    def save_checkpoint(self, weights_path: str, optimizer_path: str | None) -> list[str]:
        """This rank's weights (and optimizer shard) under NeMo-RL's checkpoint layout."""
        name = f"rank_{self.rank:05d}.pt"
        written = [Path(weights_path) / name]
        written[0].parent.mkdir(parents=True, exist_ok=True)
        torch.save(self.worker.policy.gpt.state_dict(), written[0])
        if optimizer_path is not None:
            written.append(Path(optimizer_path) / name)
            written[1].parent.mkdir(parents=True, exist_ok=True)
            torch.save([o.optimizer.state_dict() for o in self._inner_optimizers()], written[1])
            written.append(Path(optimizer_path) / f"scheduler_{name}")
            torch.save({"num_steps": self.schedule_ticks}, written[2])
        return [str(p) for p in written]

    def load_checkpoint(self, weights_path: str, optimizer_path: str | None) -> None:
        """This rank's weights (and optimizer shard) back from what `save_checkpoint` wrote.
        The reference weights are not in NeMo-RL's checkpoint: as in NeMo-RL they are the
        initial model's, rebuilt from the same checkpoint or seed."""
        name = f"rank_{self.rank:05d}.pt"
        weights = Path(weights_path) / name
        model = torch.load(weights, map_location="cpu", weights_only=False)  # _extra_state
        optimizer = None
        if optimizer_path is not None:
            optimizer = torch.load(
                Path(optimizer_path) / name, map_location="cpu", weights_only=False
            )
            ticks = Path(optimizer_path) / f"scheduler_{name}"
            if ticks.exists():
                self.schedule_ticks = int(torch.load(ticks, weights_only=True)["num_steps"])
        self.restore(model, weights, optimizer)


def nemo_rl_moe_metrics(per_optimizer_step: list[dict[str, Any]]) -> dict[str, float]:
    """NeMo-RL's ``moe_metrics`` (scalars; `grpo_train` logs each as ``moe/<name>``) from the
    worker's router metrics of each optimizer step."""
    from mcore_grpo.grpo.driver.metrics import moe_metrics

    merged = moe_metrics(per_optimizer_step)
    return {
        key.removeprefix("moe/"): float(value)
        for key, value in merged.items()
        if not isinstance(value, list)
    }

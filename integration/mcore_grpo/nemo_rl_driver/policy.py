"""NeMo-RL's `ColocatablePolicyInterface` over our Ray actors (`rank.NemoRLRank`).

The driver-side half of the adapter, in the place of NeMo-RL's ``lm_policy.Policy``: the same
sharding (``shard_by_batch_size`` over data parallel; with TP > 1 every rank of a replica gets
its replica's shard), the same result aggregation, our actors underneath. Methods NeMo-RL's
colocated-Megatron `grpo_train` never calls, and that need what this CPU worker does not have
(CUDA IPC, NCCL collectives to a separate inference cluster, FP8, top-k distillation), raise
`NotImplementedError` naming why (`UNSUPPORTED`).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import torch

from mcore_grpo.grpo.driver.loop import ReplicaLayout
from mcore_grpo.grpo.nemo_rl.source import require_nemo_rl
from mcore_grpo.grpo.ranks.runner import RayRunner

require_nemo_rl()

from nemo_rl.distributed.batched_data_dict import BatchedDataDict  # noqa: E402
from nemo_rl.models.policy.interfaces import ColocatablePolicyInterface  # noqa: E402

# NeMo-RL interface methods this adapter does not implement, and why.
UNSUPPORTED: dict[str, str] = {
    "get_topk_logits": "top-k logits feed on-policy distillation only, not GRPO",
    "calibrate_qkv_fp8_scales": "FP8 KV-cache scales need Transformer Engine's FP8 on a GPU",
    "init_collective": "NCCL group to a separate inference cluster (non-colocated refit); "
    "generation here is colocated: it runs on the training ranks",
    "stream_weights_via_ipc_zmq": "CUDA-IPC weight streaming to a colocated vLLM/TRT-LLM engine",
    "broadcast_weights_for_collective": "NCCL weight broadcast to non-colocated vLLM engines",
    "stream_weights_via_http": "CUDA-IPC weight streaming to SGLang engines",
    "train(eval_mode=True)": "forward-only evaluation passes are used by SFT/DPO validation, "
    "not by GRPO",
}


def unsupported(name: str) -> NotImplementedError:
    """The error for one `UNSUPPORTED` method."""
    return NotImplementedError(
        f"{name} is not implemented by the mcore_grpo worker: {UNSUPPORTED[name]}"
    )


class NemoRLPolicy(ColocatablePolicyInterface):
    """The training policy `grpo_train` drives: `world_size` actors, `dp` replicas."""

    def __init__(self, runner: RayRunner, dp: int, tokenizer: Any, config: dict[str, Any]) -> None:
        """`config`: NeMo-RL's ``policy`` section (its batch sizes are `train`'s defaults)."""
        self.runner = runner
        self.cfg = config
        self.layout = ReplicaLayout(dp, runner.world_size)
        self.dp = dp
        self.tokenizer = tokenizer

    # ---- plumbing -------------------------------------------------------------------
    def run_all(self, method: str, *args: Any) -> list[Any]:
        """Call an actor method with the same arguments on every rank."""
        return self.runner.call(method, [args] * self.runner.world_size)

    def run_worker(self, method: str, *args: Any) -> list[Any]:
        """Call a `MegatronPolicyWorker` entry point on every rank."""
        return self.run_all("run_worker", method, *args)

    def run_sharded(self, method: str, shards: list[Any], *common: Any) -> list[Any]:
        """One shard per replica (replicated over its ranks); one result per replica."""
        per_rank = [(shard, *common) for shard in self.layout.per_rank(shards)]
        return self.layout.per_replica(self.runner.call(method, per_rank))

    def shards(self, data: BatchedDataDict, batch_size: int | None) -> list[Any]:
        """`data` in one shard per replica. NeMo-RL returns a (shards, sizes) tuple only for
        dynamic batching or sequence packing, which this policy's config never asks for."""
        shards = data.shard_by_batch_size(self.dp, batch_size=batch_size)
        if isinstance(shards, tuple):
            raise TypeError("shard_by_batch_size returned dynamic-batching shards; not supported")
        return shards

    # ---- logprobs -------------------------------------------------------------------
    def _logprobs(self, method: str, data: BatchedDataDict) -> torch.Tensor:
        return torch.cat(self.run_sharded(method, self.shards(data, None)), dim=0)

    def get_logprobs(self, data: BatchedDataDict, timer: Any = None) -> BatchedDataDict:
        """``{"logprobs": [B, S]}``: the current policy's logprobs of ``input_ids``."""
        return BatchedDataDict(logprobs=self._logprobs("get_logprobs", data))

    def get_reference_policy_logprobs(
        self, data: BatchedDataDict, micro_batch_size: int | None = None, timer: Any = None
    ) -> BatchedDataDict:
        """``{"reference_logprobs": [B, S]}`` from the reference weights the worker holds."""
        return BatchedDataDict(
            reference_logprobs=self._logprobs("get_reference_policy_logprobs", data)
        )

    def get_topk_logits(
        self, data: BatchedDataDict, k: int, micro_batch_size: int | None = None, timer: Any = None
    ) -> BatchedDataDict:
        """Not implemented (see `UNSUPPORTED`)."""
        raise unsupported("get_topk_logits")

    # ---- training -------------------------------------------------------------------
    def train(
        self,
        data: BatchedDataDict,
        loss_fn: Any,
        eval_mode: bool = False,
        *,
        gbs: int | None = None,
        mbs: int | None = None,
        timer: Any = None,
    ) -> dict[str, Any]:
        """Optimizer steps of ``gbs`` samples over `data`, NeMo-RL's loss differentiated by
        the worker's split step; aggregated as ``lm_policy.Policy.train`` aggregates."""
        if eval_mode:
            raise unsupported("train(eval_mode=True)")
        gbs = gbs or self.cfg["train_global_batch_size"]
        mbs = mbs or self.cfg["train_micro_batch_size"]
        shards = self.shards(data, gbs)
        results = self.run_sharded("train_nemo_rl", shards, loss_fn, gbs, mbs, self.dp)
        all_mb: dict[str, list[Any]] = defaultdict(list)
        for result in results:
            for key, values in result["all_mb_metrics"].items():
                all_mb[key].extend(values)
        out = {
            "loss": results[0]["global_loss"],
            "grad_norm": results[0]["grad_norm"],
            "all_mb_metrics": dict(all_mb),
        }
        if "moe_metrics" in results[0]:  # as lm_policy.Policy.train passes rank 0's on
            out["moe_metrics"] = results[0]["moe_metrics"]
        return out

    def calibrate_qkv_fp8_scales(
        self,
        data: BatchedDataDict,
        micro_batch_size: int | None = None,
        percentile: float = 99.9,
        margin: float = 1.05,
        include_q: bool = False,
    ) -> dict[str, Any]:
        """Not implemented (see `UNSUPPORTED`)."""
        raise unsupported("calibrate_qkv_fp8_scales")

    # ---- phases ---------------------------------------------------------------------
    def prepare_for_training(self, *args: Any, **kwargs: Any) -> None:
        """Weights, grads and optimizer state on the device; training phase."""
        self.run_worker("prepare_for_training")

    def prepare_for_lp_inference(self, keep_train_buffers: bool = False) -> None:
        """Weights on the device and current (param sync); logprob phase.

        ``keep_train_buffers`` (an open split step's gradients survive) holds by construction:
        the worker's `prepare_for_lp_inference` never frees grad buffers or optimizer state.
        """
        self.run_worker("prepare_for_lp_inference")

    def finish_training(self, *args: Any, **kwargs: Any) -> None:
        """Nothing to release: the next phase transition moves state as it needs."""

    def offload_before_refit(self) -> None:
        """Free grads and optimizer state before the colocated generation phase."""
        self.run_worker("offload_before_refit")

    def offload_after_refit(self) -> None:
        """Free everything, parameters included (the next ``prepare_for_*`` onloads)."""
        self.run_worker("offload_after_refit")

    # ---- refit (colocated Megatron: nothing to transfer) -----------------------------
    def prepare_refit_info(self) -> dict[str, Any] | None:
        """None: colocated generation samples from the training weights themselves."""
        return None

    def init_collective(
        self, ip: str, port: int, world_size: int, *, train_world_size: int, nccl_peer: str = "nemo"
    ) -> list[Any]:
        """Not implemented (see `UNSUPPORTED`)."""
        raise unsupported("init_collective")

    def stream_weights_via_ipc_zmq(
        self, buffer_size_bytes: int, kv_scales: dict[str, float] | None = None
    ) -> list[Any]:
        """Not implemented (see `UNSUPPORTED`)."""
        raise unsupported("stream_weights_via_ipc_zmq")

    def stream_weights_via_http(
        self, rollout_engine_urls: list[str], buffer_size_bytes: int
    ) -> list[Any]:
        """Not implemented (see `UNSUPPORTED`)."""
        raise unsupported("stream_weights_via_http")

    def broadcast_weights_for_collective(
        self,
        kv_scales: dict[str, float] | None = None,
        *,
        buffer_size_bytes: int | None = None,
        num_buffers: int | None = None,
    ) -> list[Any]:
        """Not implemented (see `UNSUPPORTED`)."""
        raise unsupported("broadcast_weights_for_collective")

    # ---- checkpoints ----------------------------------------------------------------
    def save_checkpoint(
        self,
        weights_path: str,
        optimizer_path: str | None = None,
        tokenizer_path: str | None = None,
        checkpointing_cfg: Any = None,
        **kwargs: Any,
    ) -> None:
        """Every rank's weights (and optimizer shard); the tokenizer from the driver; with
        NeMo-RL's `checkpointing.save_consolidated`, the policy in Hugging Face format beside
        them (`policy/hf`, tokenizer included)."""
        self.run_all("save_checkpoint", weights_path, optimizer_path)
        if tokenizer_path is not None:
            self.tokenizer.save_pretrained(tokenizer_path)
        if checkpointing_cfg is not None and checkpointing_cfg.get("save_consolidated", False):
            self.export_hf(str(Path(weights_path).parent / "hf"))

    def load_checkpoint(self, weights_path: Path, optimizer_path: Path | None) -> None:
        """Every rank's weights and optimizer shard from a NeMo-RL checkpoint (`--resume`), as
        NeMo-RL's ``Policy(weights_path=..., optimizer_path=...)`` loads them at start."""
        self.run_all("load_checkpoint", str(weights_path), optimizer_path and str(optimizer_path))

    def export_hf(self, path: str) -> str:
        """The policy as a Hugging Face checkpoint at `path` (every rank; rank 0 writes)."""
        self.run_all("export_hf", path)
        return path

    def finalize_async_save(self) -> None:
        """Nothing pending: `save_checkpoint` writes synchronously before it returns."""

    def shutdown(self) -> bool:
        """Stop the actors (and Ray, if the runner started it)."""
        self.runner.shutdown()
        return True

"""NeMo-RL's `GenerationInterface` for ``backend=megatron``, colocated: the policy's own ranks.

In the place of NeMo-RL's `MegatronGeneration(policy=...)`: generation runs on the training
actors (`NemoRLPolicy`), so there is no weight transfer; NeMo-RL's own
`MegatronWeightSynchronizer` (colocated) does the refit as ``offload_before_refit`` +
``prepare_for_generation`` (the worker's param sync). ``generate_async`` is how NeMo-RL's
megatron rollout asks (one prompt per call, all samples concurrently); `BatchCoalescer` turns
those calls back into one batch, spread over the data-parallel replicas by `generate`.
Sampling seeds are a pure function of (seed, call number, replica).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import Any

from mcore_grpo.grpo.nemo_rl.source import require_nemo_rl
from mcore_grpo.nemo_rl_driver.coalescer import BatchCoalescer
from mcore_grpo.nemo_rl_driver.policy import NemoRLPolicy, unsupported

require_nemo_rl()

from nemo_rl.distributed.batched_data_dict import BatchedDataDict  # noqa: E402
from nemo_rl.models.generation.interfaces import GenerationInterface  # noqa: E402


def split_rows(rows: int, parts: int) -> list[tuple[int, int]]:
    """Contiguous (start, end) row ranges, sizes differing by at most one."""
    base, extra = divmod(rows, parts)
    bounds, start = [], 0
    for part in range(parts):
        end = start + base + (1 if part < extra else 0)
        bounds.append((start, end))
        start = end
    return bounds


def call_seed(seed: int, call: int, replica: int) -> int:
    """Sampling seed of one replica's rows in one generate call."""
    return (seed * 1_000_003 + call * 10_007 + replica) % (2**63 - 1)


class NemoRLGeneration(GenerationInterface):
    """Colocated generation on the policy's actors; ``cfg`` is ``policy.generation``."""

    def __init__(self, policy: NemoRLPolicy, generation_config: dict[str, Any], seed: int) -> None:
        self.policy = policy
        self.cfg = generation_config
        self.seed = seed
        self.calls = 0
        self.weight_synchronizer: Any = None  # installed by the setup, as NeMo-RL's setup() does
        self.coalescer: BatchCoalescer[tuple[BatchedDataDict, bool], BatchedDataDict] = (
            BatchCoalescer(self._generate_batch)
        )
        self.pad_id = int(generation_config["_pad_token_id"])

    def generate(self, data: BatchedDataDict, greedy: bool = False) -> BatchedDataDict:
        """Sample every row once (`GenerationOutputSpec`, right-padded)."""
        if any(s is not None for s in data.get("stop_strings", [])):
            raise NotImplementedError(
                "stop_strings: the worker's sampler stops on token ids only "
                "(policy.generation.stop_token_ids)"
            )
        self.calls += 1
        rows = int(data["input_ids"].shape[0])
        bounds = split_rows(rows, self.policy.dp)
        shards = [
            BatchedDataDict(
                input_ids=data["input_ids"][a:b], input_lengths=data["input_lengths"][a:b]
            )
            for a, b in bounds
        ]
        per_rank = [
            (shard, greedy, call_seed(self.seed, self.calls, self.policy.layout.replica_of(r)))
            for r, shard in enumerate(self.policy.layout.per_rank(shards))
        ]
        outputs = self.policy.layout.per_replica(
            self.policy.runner.call("generate_nemo_rl", per_rank)
        )
        return BatchedDataDict.from_batches(
            [o for o, (a, b) in zip(outputs, bounds, strict=True) if b > a],
            pad_value_dict={"output_ids": self.pad_id},
        )

    async def _generate_batch(
        self, requests: list[tuple[BatchedDataDict, bool]]
    ) -> list[BatchedDataDict]:
        greedy = {g for _, g in requests}
        if len(greedy) != 1:
            raise ValueError("generate_async: greedy and sampled requests in one batch")
        merged = BatchedDataDict.from_batches(
            [data for data, _ in requests], pad_value_dict={"input_ids": self.pad_id}
        )
        result = await asyncio.to_thread(self.generate, merged, greedy.pop())
        out, start = [], 0
        for data, _ in requests:
            end = start + int(data["input_ids"].shape[0])
            out.append(result.slice(start, end))
            start = end
        return out

    async def generate_async(
        self, data: BatchedDataDict, greedy: bool = False
    ) -> AsyncGenerator[tuple[int, BatchedDataDict], None]:
        """Yield ``(row, one-row output)`` per row of `data`; concurrent calls share a batch."""
        result = await self.coalescer.submit((data, greedy))
        for row in range(int(data["input_ids"].shape[0])):
            yield row, result.slice(row, row + 1)

    def prepare_for_generation(self, *args: Any, **kwargs: Any) -> bool:
        """Every rank: onload, param sync, generation phase (the colocated refit; any
        ``tags`` NeMo-RL passes need no separate step here)."""
        self.policy.run_worker("prepare_for_generation")
        return True

    def finish_generation(self, *args: Any, **kwargs: Any) -> bool:
        """Every rank leaves the generation phase (``release_gpu`` needs nothing more)."""
        self.policy.run_worker("finish_generation")
        return True

    def init_collective(
        self, ip: str, port: int, world_size: int, *, train_world_size: int
    ) -> list[Any]:
        """Not implemented (see `policy.UNSUPPORTED`)."""
        raise unsupported("init_collective")

    def prepare_refit_info(self, state_dict_info: dict[str, Any] | None) -> None:
        """Nothing to prepare: colocated generation samples from the training weights."""

    def blocks_training(self) -> bool:
        """Colocated: the ranks generate or train, never both at once."""
        return True

    def wake_carries_weight_updates(self) -> bool:
        """`prepare_for_generation` serves the latest weights (it syncs them)."""
        return True

    def shutdown(self) -> bool:
        """The policy owns the actors; nothing to stop here."""
        return True

"""Concurrent single requests -> one batch: what megatron's dynamic engine does for NeMo-RL.

With ``policy.generation.backend=megatron`` NeMo-RL's rollout runs every sample as its own
coroutine and each calls ``generate_async`` with a batch of ONE prompt, counting on the
inference engine to batch concurrent requests. The worker's sampler batches explicitly, so
the generation adapter submits each request here: all requests submitted within one turn of
the event loop (NeMo-RL's ``asyncio.gather`` starts every sample before any is awaited) run
as one batch; requests arriving while a batch runs form the next one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class BatchCoalescer(Generic[T, R]):
    """`submit(item)` resolves to item's result from ``run(batch_of_items)``, in order."""

    def __init__(self, run: Callable[[list[T]], Awaitable[list[R]]]) -> None:
        self._run = run
        self._pending: list[tuple[T, asyncio.Future[R]]] = []
        self._flusher: asyncio.Task[None] | None = None
        self.batch_sizes: list[int] = []  # one entry per batch run (tests, logs)

    async def submit(self, item: T) -> R:
        """Queue `item` and wait for its result."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[R] = loop.create_future()
        self._pending.append((item, future))
        if self._flusher is None or self._flusher.done():
            self._flusher = loop.create_task(self._flush())
        return await future

    async def _flush(self) -> None:
        while self._pending:
            # Yield until a whole loop turn adds no request: every ready coroutine submitted.
            seen = -1
            while seen != len(self._pending):
                seen = len(self._pending)
                await asyncio.sleep(0)
            batch, self._pending = self._pending, []
            self.batch_sizes.append(len(batch))
            try:
                results = await self._run([item for item, _ in batch])
                if len(results) != len(batch):
                    raise RuntimeError(
                        f"batch run returned {len(results)} results for {len(batch)} requests"
                    )
            except asyncio.CancelledError:
                for _, future in batch:
                    future.cancel()
                raise
            except Exception as err:  # every waiting request sees the failure
                for _, future in batch:
                    if not future.done():
                        future.set_exception(err)
                continue
            for (_, future), result in zip(batch, results, strict=True):
                if not future.done():
                    future.set_result(result)

"""Concurrent single requests become one batch; results and failures reach every caller."""

from __future__ import annotations

import asyncio

import pytest
from mcore_grpo.nemo_rl_driver.coalescer import BatchCoalescer


def test_requests_started_together_run_as_one_batch_in_order() -> None:
    seen: list[list[int]] = []

    async def run(batch: list[int]) -> list[int]:
        seen.append(list(batch))
        await asyncio.sleep(0)
        return [10 * x for x in batch]

    async def main() -> list[int]:
        coalescer = BatchCoalescer(run)
        return await asyncio.gather(*(coalescer.submit(i) for i in range(7)))

    assert asyncio.run(main()) == [0, 10, 20, 30, 40, 50, 60]
    assert seen == [[0, 1, 2, 3, 4, 5, 6]]


def test_a_request_arriving_while_a_batch_runs_forms_the_next_batch() -> None:
    seen: list[list[str]] = []

    async def main() -> tuple[str, str, str]:
        gate = asyncio.Event()

        async def run(batch: list[str]) -> list[str]:
            seen.append(list(batch))
            if batch == ["a", "b"]:
                await gate.wait()
            return [x.upper() for x in batch]

        coalescer = BatchCoalescer(run)
        first = asyncio.gather(coalescer.submit("a"), coalescer.submit("b"))
        await asyncio.sleep(0.01)  # the first batch is running
        late = asyncio.ensure_future(coalescer.submit("c"))
        await asyncio.sleep(0.01)
        gate.set()
        a, b = await first
        return a, b, await late

    assert asyncio.run(main()) == ("A", "B", "C")
    assert seen == [["a", "b"], ["c"]]


def test_a_failing_batch_fails_every_request_in_it() -> None:
    async def run(batch: list[int]) -> list[int]:
        raise RuntimeError("sampler died")

    async def main() -> list[BaseException | int]:
        coalescer = BatchCoalescer(run)
        return await asyncio.gather(
            *(coalescer.submit(i) for i in range(3)), return_exceptions=True
        )

    results = asyncio.run(main())
    assert [str(r) for r in results] == ["sampler died"] * 3


def test_a_wrong_number_of_results_is_an_error_not_a_misrouting() -> None:
    async def run(batch: list[int]) -> list[int]:
        return batch[:-1]

    async def main() -> None:
        coalescer = BatchCoalescer(run)
        await asyncio.gather(coalescer.submit(1), coalescer.submit(2))

    with pytest.raises(RuntimeError, match="2 requests"):
        asyncio.run(main())

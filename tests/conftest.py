"""Device markers for the whole suite: `gpu` tests skip without CUDA, `cpu_only` tests skip
with CUDA (each says why it is CPU-only by nature), so `pytest` passes on both machines."""

from __future__ import annotations

import pytest
import torch


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip by device, with the marker's reason in the report."""
    cuda = torch.cuda.is_available()
    for item in items:
        if not cuda and item.get_closest_marker("gpu") is not None:
            item.add_marker(pytest.mark.skip(reason="needs a CUDA GPU (marked gpu)"))
        cpu_only = item.get_closest_marker("cpu_only")
        if cuda and cpu_only is not None:
            reason = cpu_only.kwargs.get("reason") or (cpu_only.args[0] if cpu_only.args else "")
            if not reason:
                raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.cpu_only needs a reason")
            item.add_marker(pytest.mark.skip(reason=f"CPU-only by nature: {reason}"))

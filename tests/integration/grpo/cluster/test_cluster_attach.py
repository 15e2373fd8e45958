"""Attaching to a cluster that refuses: one line naming the address and the fix.

The real refusal (a token-authenticated two-node cluster, a driver without its token) runs in
`test_multinode.py`; these check the wording for the two shapes Ray raises it in, cheaply."""

from __future__ import annotations

import os
from typing import Any

import pytest
from mcore_grpo.grpo.cluster.cluster_attach import TOKEN_HINT, ClusterUnreachable, attach
from mcore_grpo.grpo.cluster.placement import PlacementError

ADDRESS = "192.0.2.7:6379"


class RefusingRay:
    """`ray.init` raising `error` as Ray 2.60 does: a ``ConnectionError`` from the cause."""

    def __init__(self, cause: BaseException) -> None:
        self.cause = cause

    def init(self, **_: Any) -> None:
        raise ConnectionError(f"Failed to connect to Ray cluster at {ADDRESS}") from self.cause


def _refusal(shape: str) -> BaseException:
    """Ray's cause. Ray reads ``RAY_ENABLE_UV_RUN_RUNTIME_ENV`` at its first import; imported
    here without it (as at collection), later in-process Ray tests of this pytest run launch
    their workers through ``uv run``, where they find no ray (seen in CI)."""
    if shape == "authentication-error":
        os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")  # as mcore_grpo does
        from ray.exceptions import AuthenticationError

        return AuthenticationError("RPC error: InvalidAuthToken: Authentication token is missing")
    # Without a token file Ray wraps the same error's traceback text in a RuntimeError.
    return RuntimeError(
        "Failed to connect to GCS. Last connection error: Traceback ...\n"
        "ray.exceptions.AuthenticationError: RPC error: InvalidAuthToken: ..."
    )


@pytest.mark.parametrize("shape", ["authentication-error", "wrapped-in-runtime-error"])
def test_a_refused_token_names_the_address_and_what_to_set(shape: str) -> None:
    cause = _refusal(shape)
    with pytest.raises(ClusterUnreachable) as raised:
        attach(RefusingRay(cause), ADDRESS)
    assert str(raised.value) == (
        f"could not attach to the Ray cluster at {ADDRESS} (RAY_ADDRESS): {TOKEN_HINT}"
    )
    assert isinstance(raised.value, PlacementError)  # the CLI's one-line, exit-2 errors


def test_another_refusal_names_ray_s_own_error() -> None:
    with pytest.raises(ClusterUnreachable) as raised:
        attach(RefusingRay(TimeoutError("GCS did not answer")), ADDRESS)
    assert str(raised.value) == (
        f"could not attach to the Ray cluster at {ADDRESS} (RAY_ADDRESS): ConnectionError: "
        f"Failed to connect to Ray cluster at {ADDRESS}"
    )

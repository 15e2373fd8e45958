"""Attaching the driver to an existing Ray cluster (``RAY_ADDRESS``), refused in one line.

Ray 2.60 clusters may require token authentication (``RAY_AUTH_MODE=token``: every node and
every driver hold the same token). A driver without it is refused only after Ray's GCS client
has retried for about 20 s, with a traceback two exceptions deep; this says in one line which
address refused and what to set.
"""

from __future__ import annotations

from typing import Any

from mcore_grpo.grpo.cluster.placement import PlacementError
from mcore_grpo.grpo.cluster.ray_import import before_ray_import
from mcore_grpo.run_output import ray_runtime_env, route_ray_logger

TOKEN_HINT = (
    "the cluster requires Ray's token authentication: give this run the cluster's token "
    "(RAY_AUTH_MODE=token and RAY_AUTH_TOKEN=<token>, or RAY_AUTH_TOKEN_PATH=<file>; "
    "`ray get-auth-token` on a node prints it)"
)


class ClusterUnreachable(PlacementError):
    """`ray.init(address=...)` failed; the message names the address and the fix."""


def _auth_refused(err: BaseException) -> bool:
    """Whether Ray's GCS refused the token. Ray raises ``ConnectionError`` from either an
    `AuthenticationError` or a ``RuntimeError`` whose text holds that error's traceback."""
    before_ray_import()  # this may be ray's first import
    from ray.exceptions import AuthenticationError

    seen: BaseException | None = err
    while seen is not None:
        if isinstance(seen, AuthenticationError) or "InvalidAuthToken" in str(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def attach(ray: Any, address: str) -> None:
    """`ray.init` on the cluster at `address`; `ClusterUnreachable` where it refuses."""
    route_ray_logger()
    try:
        ray.init(address=address, log_to_driver=True, runtime_env=ray_runtime_env())
    except Exception as err:
        why = TOKEN_HINT if _auth_refused(err) else f"{type(err).__name__}: {err}"
        raise ClusterUnreachable(
            f"could not attach to the Ray cluster at {address} (RAY_ADDRESS): {why}"
        ) from None

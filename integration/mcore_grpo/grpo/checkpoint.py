"""Atomic GRPO checkpoints and resume.

Layout under ``<output_dir>/checkpoints/``::

    step_000040/            one finished checkpoint
        meta.json           step, model signature, world size, the resolved run config
        rank_00000.pt ...   each worker's model weights + its optimizer shard state
        reference.pt        the reference policy's weights (written by rank 0)
    latest                  the name of the newest finished checkpoint

A checkpoint is written into ``step_000040.tmp-<id>/`` and renamed into place only after
every rank's file and meta.json are complete and fsynced; ``latest`` is replaced atomically
after that. A run that dies while saving leaves a ``.tmp-*`` directory that resume ignores
(and the next save removes), never a half-written checkpoint.

Resume refuses a checkpoint whose model signature (model name, tiny-model dimensions,
vocabulary, tensor/pipeline parallel sizes, parameter shapes) or worker count differs from
the current run, naming each differing key.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

FORMAT_VERSION = 1
LATEST = "latest"


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be resumed from; the message says why and what to do."""


def model_signature(config: Mapping[str, Any], vocab_size: int) -> dict[str, Any]:
    """What must match for weights to load: taken from the run config dict."""
    policy = config["policy"]
    megatron = policy["megatron_cfg"]
    return {
        "policy.model_name": policy["model_name"],
        "policy.tiny_model": dict(policy["tiny_model"]),
        "policy.max_total_sequence_length": policy["max_total_sequence_length"],
        "policy.megatron_cfg.tensor_model_parallel_size": megatron["tensor_model_parallel_size"],
        "policy.megatron_cfg.pipeline_model_parallel_size": megatron[
            "pipeline_model_parallel_size"
        ],
        "task.vocab_size": vocab_size,
    }


def checkpoints_root(output_dir: Path) -> Path:
    """Where checkpoints of a run live."""
    return output_dir / "checkpoints"


def step_dir_name(step: int) -> str:
    """Directory name of the checkpoint after `step`."""
    return f"step_{step:06d}"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex[:8]}")
    with tmp.open("wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def begin_save(output_dir: Path, step: int) -> Path:
    """Create the temporary directory the ranks write into (stale temps are removed)."""
    root = checkpoints_root(output_dir)
    root.mkdir(parents=True, exist_ok=True)
    for stale in root.glob("*.tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)
    tmp = root / f"{step_dir_name(step)}.tmp-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    return tmp


def save_rank_state(tmp_dir: Path, rank: int, state: Mapping[str, Any]) -> Path:
    """One rank's file (called inside each worker), fsynced before returning."""
    return _save(tmp_dir / f"rank_{rank:05d}.pt", state)


def save_reference(tmp_dir: Path, weights: Mapping[str, torch.Tensor]) -> Path:
    """The reference policy weights (rank 0 only; identical on every DP rank)."""
    return _save(tmp_dir / "reference.pt", weights)


def _save(path: Path, obj: Mapping[str, Any]) -> Path:
    with path.open("wb") as f:
        torch.save(dict(obj), f)
        f.flush()
        os.fsync(f.fileno())
    return path


def finish_save(
    tmp_dir: Path,
    step: int,
    world_size: int,
    signature: Mapping[str, Any],
    config: Mapping[str, Any],
) -> Path:
    """Check every rank wrote its file, write meta.json, rename into place, point `latest`."""
    missing = [r for r in range(world_size) if not (tmp_dir / f"rank_{r:05d}.pt").is_file()]
    if missing or not (tmp_dir / "reference.pt").is_file():
        raise CheckpointError(
            f"{tmp_dir}: ranks {missing} (or reference.pt) did not write their state; the "
            "checkpoint is incomplete and was not published"
        )
    meta = {
        "format_version": FORMAT_VERSION,
        "step": step,
        "world_size": world_size,
        "model_signature": dict(signature),
        "config": dict(config),
    }
    _write_atomic(tmp_dir / "meta.json", json.dumps(meta, indent=1).encode())
    _fsync_dir(tmp_dir)
    final = tmp_dir.parent / step_dir_name(step)
    if final.exists():  # A re-run of the same step after resume: replace it.
        shutil.rmtree(final)
    os.rename(tmp_dir, final)
    _write_atomic(tmp_dir.parent / LATEST, final.name.encode())
    _fsync_dir(tmp_dir.parent)
    return final


@dataclass(frozen=True)
class ResumePoint:
    """A finished checkpoint to resume from."""

    path: Path
    step: int
    world_size: int
    meta: dict[str, Any]

    def rank_file(self, rank: int) -> Path:
        """Path of `rank`'s state file."""
        return self.path / f"rank_{rank:05d}.pt"

    @property
    def reference_file(self) -> Path:
        """Path of the reference weights."""
        return self.path / "reference.pt"


def find_latest(output_dir: Path) -> ResumePoint:
    """The checkpoint `latest` names; errors say what is missing."""
    root = checkpoints_root(output_dir)
    pointer = root / LATEST
    if not pointer.is_file():
        raise CheckpointError(
            f"--resume: no finished checkpoint under {root} (no '{LATEST}' file); run without "
            "--resume first, or pass the --output-dir of a run that saved one"
        )
    path = root / pointer.read_text().strip()
    meta_file = path / "meta.json"
    if not meta_file.is_file():
        raise CheckpointError(f"--resume: {meta_file} is missing; the checkpoint is damaged")
    meta = json.loads(meta_file.read_text())
    if meta.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(
            f"--resume: {meta_file} has format_version {meta.get('format_version')}, this "
            f"version of mcore-grpo reads {FORMAT_VERSION}"
        )
    return ResumePoint(
        path=path, step=int(meta["step"]), world_size=int(meta["world_size"]), meta=meta
    )


def check_compatible(point: ResumePoint, signature: Mapping[str, Any], world_size: int) -> None:
    """Raise `CheckpointError` naming every model-signature key that differs."""
    saved = point.meta["model_signature"]
    diffs = [
        f"{key}: checkpoint {saved.get(key)!r} != this run {signature.get(key)!r}"
        for key in sorted(set(saved) | set(signature))
        if saved.get(key) != signature.get(key)
    ]
    if diffs:
        raise CheckpointError(
            f"--resume: the checkpoint {point.path} was written for a different model "
            "config:\n  " + "\n  ".join(diffs) + "\nResume with the same preset/overrides as "
            "the run that wrote it, or start a new --output-dir."
        )
    if point.world_size != world_size:
        raise CheckpointError(
            f"--resume: the checkpoint {point.path} holds optimizer shards of "
            f"{point.world_size} workers; this run has {world_size}. Resume with "
            f"--workers {point.world_size}."
        )


def check_shapes(
    saved: Mapping[str, torch.Tensor], live: Mapping[str, torch.Tensor], where: Path
) -> None:
    """Parameter names and shapes of a rank file against the live model."""
    diffs = [
        f"{name}: checkpoint {tuple(saved[name].shape) if name in saved else 'missing'} != "
        f"model {tuple(live[name].shape) if name in live else 'missing'}"
        for name in sorted(set(saved) | set(live))
        if name not in saved or name not in live or saved[name].shape != live[name].shape
    ]
    if diffs:
        raise CheckpointError(
            f"--resume: {where} does not fit this model:\n  " + "\n  ".join(diffs[:8])
        )

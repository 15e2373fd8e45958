"""Atomic GRPO checkpoints and resume.

Layout under ``<output_dir>/checkpoints/``::

    step_000040/            one finished checkpoint
        meta.json           step, model signature, world size, the resolved run config and
                            the manifest: every file's size and sha256 (written last)
        rank_00000.pt ...   each worker's model weights + its optimizer shard state
        reference.pt        the reference policy's weights (written by rank 0)
    latest                  the name of the newest finished checkpoint

A checkpoint is written into ``step_000040.tmp-<id>/`` and renamed into place only after
every rank's file and meta.json are complete and fsynced; ``latest`` is replaced atomically
after that, then checkpoints beyond the newest `keep_top_k` are removed. A run that dies while
saving leaves a ``.tmp-*`` directory that resume ignores (and the next save removes), never a
half-written checkpoint.

Resume takes the newest checkpoint (at most the step ``latest`` names) whose files match the
manifest; one that does not (a truncated or corrupt file, a missing meta.json) is refused with
one line naming the file, and the one before it is tried.

Resume refuses a checkpoint whose model signature (model name, tiny-model dimensions,
vocabulary, tensor/pipeline parallel sizes, parameter shapes) or worker count differs from
the current run, naming each differing key.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

FORMAT_VERSION = 2  # 2: meta.json carries the manifest (file sizes and sha256)
LATEST = "latest"
_STEP_DIR = re.compile(r"step_(\d{6,})")


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
        "policy.megatron_cfg.expert_model_parallel_size": megatron["expert_model_parallel_size"],
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


def save_rank_state(tmp_dir: Path, rank: int, state: Mapping[str, Any]) -> dict[str, Any]:
    """One rank's file (called inside each worker), fsynced; its manifest entry."""
    return _save(tmp_dir / f"rank_{rank:05d}.pt", state)


def save_reference(tmp_dir: Path, weights: Mapping[str, torch.Tensor]) -> dict[str, Any]:
    """The reference policy weights (rank 0 only; identical on every DP rank)."""
    return _save(tmp_dir / "reference.pt", weights)


def resizable(state: Any) -> Any:
    """`state` with each tensor whose storage `torch.load` made fixed-size copied into ordinary
    memory: loaded optimizer state is kept as it is, and the worker's offload
    (`mcore_grpo.worker.memory.offload`) frees a storage by resizing it to 0."""
    from torch.utils._pytree import tree_map

    def own(value: Any) -> Any:
        if isinstance(value, torch.Tensor) and not value.untyped_storage().resizable():
            return value.clone()
        return value

    return tree_map(own, state)


def _save(path: Path, obj: Mapping[str, Any]) -> dict[str, Any]:
    """Serialise once, hash those bytes, write and fsync them: the manifest entry."""
    buffer = io.BytesIO()
    torch.save(dict(obj), buffer)
    data = buffer.getbuffer()
    with path.open("wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    return {"name": path.name, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def finish_save(
    tmp_dir: Path,
    step: int,
    world_size: int,
    signature: Mapping[str, Any],
    config: Mapping[str, Any],
    files: Sequence[Mapping[str, Any]],
    keep: int | None = None,
) -> Path:
    """Check every rank wrote its file, write meta.json (with the manifest `files`), rename
    into place, point `latest`, keep the newest `keep` checkpoints."""
    names = {f["name"] for f in files}
    wanted = [f"rank_{r:05d}.pt" for r in range(world_size)] + ["reference.pt"]
    missing = [n for n in wanted if n not in names or not (tmp_dir / n).is_file()]
    if missing:
        raise CheckpointError(
            f"{tmp_dir}: {', '.join(missing)} not written; the checkpoint is incomplete and "
            "was not published"
        )
    meta = {
        "format_version": FORMAT_VERSION,
        "step": step,
        "world_size": world_size,
        "model_signature": dict(signature),
        "config": dict(config),
        "files": sorted((dict(f) for f in files), key=lambda f: f["name"]),
    }
    _write_atomic(tmp_dir / "meta.json", json.dumps(meta, indent=1).encode())
    _fsync_dir(tmp_dir)
    final = tmp_dir.parent / step_dir_name(step)
    if final.exists():  # A re-run of the same step after resume: replace it.
        shutil.rmtree(final)
    os.rename(tmp_dir, final)
    _write_atomic(tmp_dir.parent / LATEST, final.name.encode())
    _fsync_dir(tmp_dir.parent)
    if keep is not None:
        prune(tmp_dir.parent, step, keep)
    return final


def finished_steps(root: Path) -> list[tuple[int, Path]]:
    """(step, directory) of every published checkpoint under `root`, newest first."""
    found = []
    for path in root.iterdir() if root.is_dir() else []:
        match = _STEP_DIR.fullmatch(path.name)
        if match and path.is_dir():
            found.append((int(match.group(1)), path))
    return sorted(found, reverse=True)


def prune(root: Path, newest: int, keep: int) -> list[Path]:
    """Remove checkpoints up to step `newest` beyond the newest `keep`; the removed paths."""
    older = [path for step, path in finished_steps(root) if step <= newest][keep:]
    for path in older:
        shutil.rmtree(path, ignore_errors=True)
    return older


def check_files(path: Path) -> dict[str, Any]:
    """meta.json of the checkpoint at `path` once every file matches its manifest entry;
    CheckpointError naming the first file that does not."""
    meta_file = path / "meta.json"
    try:
        meta = json.loads(meta_file.read_text())
    except (OSError, ValueError) as err:
        raise CheckpointError(f"{meta_file}: unreadable ({type(err).__name__}: {err})") from err
    if meta.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(
            f"{meta_file}: format_version {meta.get('format_version')}, this version of "
            f"mcore-grpo reads {FORMAT_VERSION} (checkpoints with a checksum manifest)"
        )
    for entry in meta["files"]:
        file = path / entry["name"]
        if not file.is_file():
            raise CheckpointError(f"{file}: missing")
        size = file.stat().st_size
        if size != entry["bytes"]:
            raise CheckpointError(
                f"{file}: truncated or overwritten ({size} of {entry['bytes']} bytes)"
            )
        digest = hashlib.sha256(file.read_bytes()).hexdigest()
        if digest != entry["sha256"]:
            raise CheckpointError(
                f"{file}: sha256 {digest[:12]} != manifest {entry['sha256'][:12]}"
            )
    return meta


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


def _named_by_latest(root: Path) -> int | None:
    """The step the `latest` pointer under `root` names, or None (absent or unreadable)."""
    pointer = root / LATEST
    named = _STEP_DIR.fullmatch(pointer.read_text().strip()) if pointer.is_file() else None
    return int(named.group(1)) if named else None


def latest_step(output_dir: Path) -> tuple[int, Path] | None:
    """(step, directory) of the newest finished checkpoint `latest` names, or None; what an
    aborted run tells the user to resume from (`find_latest` checks the files on resume)."""
    root = checkpoints_root(output_dir)
    step = _named_by_latest(root)
    if step is None or not (root / step_dir_name(step)).is_dir():
        return None
    return step, root / step_dir_name(step)


def find_latest(output_dir: Path, refused: Callable[[str], None] | None = None) -> ResumePoint:
    """The newest complete checkpoint (at most the step `latest` names): each one refused on
    the way is reported through `refused` (one line naming the file)."""
    root = checkpoints_root(output_dir)
    steps = finished_steps(root)
    if not steps:
        raise CheckpointError(
            f"--resume: no finished checkpoint under {root}; run without --resume first, or "
            "pass the --output-dir of a run that saved one"
        )
    named = _named_by_latest(root)
    newest = named if named is not None else steps[0][0]
    for step, path in steps:
        if step > newest:  # a longer earlier run's, not this run's
            continue
        try:
            meta = check_files(path)
        except CheckpointError as err:
            if refused is not None:
                refused(f"checkpoint refused: {err}")
            continue
        return ResumePoint(path=path, step=step, world_size=int(meta["world_size"]), meta=meta)
    raise CheckpointError(
        f"--resume: no complete checkpoint under {root} (every one was refused, see above); "
        "start a new run or a new --output-dir"
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

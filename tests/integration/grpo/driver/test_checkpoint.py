"""Checkpoint files on their own (no model): manifest, refusal of damaged ones, retention."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from mcore_grpo.grpo.driver import checkpoint
from mcore_grpo.grpo.driver.metrics import MetricsWriter, read_metrics


def _save(out: Path, step: int, keep: int | None = None, world: int = 2) -> Path:
    tmp = checkpoint.begin_save(out, step)
    files = [
        checkpoint.save_rank_state(tmp, r, {"model": {"w": torch.full((64,), float(step + r))}})
        for r in range(world)
    ]
    files.append(checkpoint.save_reference(tmp, {"w": torch.zeros(64)}))
    return checkpoint.finish_save(tmp, step, world, {"sig": 1}, {"step": step}, files, keep)


def test_finished_checkpoint_has_a_manifest_of_every_file(tmp_path: Path) -> None:
    path = _save(tmp_path, 4)
    meta = json.loads((path / "meta.json").read_text())
    names = [f["name"] for f in meta["files"]]
    assert names == ["rank_00000.pt", "rank_00001.pt", "reference.pt"]
    for entry in meta["files"]:
        assert (path / entry["name"]).stat().st_size == entry["bytes"]
    assert checkpoint.find_latest(tmp_path).step == 4


@pytest.mark.parametrize("damage", ["truncate", "flip", "delete", "meta"])
def test_damaged_checkpoint_is_refused_naming_the_file_and_the_previous_one_used(
    tmp_path: Path, damage: str
) -> None:
    _save(tmp_path, 2)
    newest = _save(tmp_path, 4)
    target = newest / ("meta.json" if damage == "meta" else "rank_00001.pt")
    data = target.read_bytes()
    if damage == "truncate":
        target.write_bytes(data[: len(data) // 2])
    elif damage == "flip":
        target.write_bytes(data[:-9] + bytes([data[-9] ^ 0xFF]) + data[-8:])
    elif damage == "delete":
        target.unlink()
    else:
        target.write_text(data.decode()[:40])
    refused: list[str] = []
    point = checkpoint.find_latest(tmp_path, refused=refused.append)
    assert point.step == 2
    assert len(refused) == 1 and "\n" not in refused[0]
    assert str(target) in refused[0]


def test_every_checkpoint_damaged_is_an_error(tmp_path: Path) -> None:
    path = _save(tmp_path, 2)
    (path / "reference.pt").write_bytes(b"")
    with pytest.raises(checkpoint.CheckpointError, match="no complete checkpoint"):
        checkpoint.find_latest(tmp_path, refused=lambda line: None)


def test_an_unpublished_save_is_ignored_and_removed_by_the_next(tmp_path: Path) -> None:
    _save(tmp_path, 2)
    tmp = checkpoint.begin_save(tmp_path, 4)  # killed mid-save: rank files, no meta.json
    checkpoint.save_rank_state(tmp, 0, {"model": {}})
    assert checkpoint.find_latest(tmp_path).step == 2
    _save(tmp_path, 4)
    assert not list(checkpoint.checkpoints_root(tmp_path).glob("*.tmp-*"))


def test_published_but_not_yet_latest_is_not_taken_beyond_latest(tmp_path: Path) -> None:
    """`latest` bounds resume: a longer earlier run's checkpoints in the same directory are
    not this run's."""
    _save(tmp_path, 6)
    _save(tmp_path, 2)  # a new run in the same --output-dir
    assert checkpoint.find_latest(tmp_path).step == 2


def test_keep_top_k_keeps_the_newest(tmp_path: Path) -> None:
    for step in (2, 4, 6, 8):
        _save(tmp_path, step, keep=2)
    root = checkpoint.checkpoints_root(tmp_path)
    assert [s for s, _ in checkpoint.finished_steps(root)] == [8, 6]


def test_resume_drops_a_metrics_line_torn_by_a_kill(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1}\n{"step": 2}\n{"step": 3, "rew')
    with pytest.raises(ValueError, match=r"metrics\.jsonl:3"):
        read_metrics(path)
    MetricsWriter(path, truncate_after_step=2)
    assert read_metrics(path) == [{"step": 1}, {"step": 2}]


def test_loaded_optimizer_state_is_made_resizable_for_the_offloader(tmp_path: Path) -> None:
    """`torch.load` gives fixed-size storages; the offloader frees a storage by resizing it to
    0 ("Trying to resize storage that is not resizable" after a nemo-rl --resume)."""
    from mcore_grpo.grpo.driver.checkpoint import resizable

    torch.save([{"state": {0: {"exp_avg": torch.ones(4), "step": 3}}}], tmp_path / "opt.pt")
    loaded = torch.load(tmp_path / "opt.pt", weights_only=False)
    assert not loaded[0]["state"][0]["exp_avg"].untyped_storage().resizable()
    owned = resizable(loaded)
    exp_avg = owned[0]["state"][0]["exp_avg"]
    exp_avg.untyped_storage().resize_(0)  # what the offloader does; raised before
    assert owned[0]["state"][0]["step"] == 3

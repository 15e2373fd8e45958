"""tools/check_doc_figures.py: the repository's stated patch counts are current, and a stale one
fails naming its file and line."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tools import check_doc_figures


def test_the_repository_states_current_counts() -> None:
    assert check_doc_figures.main([]) == 0


def _copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """README.md, docs/*.md and patches/*/series of the real repository, in tmp_path."""
    root = check_doc_figures.ROOT
    shutil.copy(root / "README.md", tmp_path / "README.md")
    (tmp_path / "docs").mkdir()
    for page in (root / "docs").glob("*.md"):
        shutil.copy(page, tmp_path / "docs" / page.name)
    for series in (root / "patches").glob("*/series"):
        (tmp_path / "patches" / series.parent.name).mkdir(parents=True)
        shutil.copy(series, tmp_path / "patches" / series.parent.name / "series")
    monkeypatch.setattr(check_doc_figures, "ROOT", tmp_path)
    return tmp_path


def test_a_patch_added_to_a_series_makes_the_stated_counts_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _copy(tmp_path, monkeypatch)
    counts = check_doc_figures.series_counts(root)
    with (root / "patches/NeMo-RL/series").open("a") as series:
        series.write("# a comment is not a patch\n\nnew-fix.patch\n")
    assert check_doc_figures.main([]) == 1
    err = capsys.readouterr().err
    total, nemo = sum(counts.values()), counts["NeMo-RL"]
    line = next(
        n
        for n, text in enumerate((root / "README.md").read_text().splitlines(), start=1)
        if f"{total} patches:" in text
    )
    assert (
        f"error: README.md:{line}: '{total} patches: Megatron-LM {counts['Megatron-LM']}, "
        f"Megatron-Bridge {counts['Megatron-Bridge']}, NeMo-RL {nemo}' states {total}, "
        f"patches/*/series has {total + 1}: write {total + 1}"
    ) in err
    assert f"'NeMo-RL {nemo}' states {nemo}, patches/NeMo-RL/series has {nemo + 1}" in err
    assert "docs/carried-patches.md:" in err


def test_each_phrasing_is_read_and_past_figures_are_left_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "patches/Up").mkdir(parents=True)
    (tmp_path / "patches/Up/series").write_text("a.patch\nb.patch\n")
    (tmp_path / "patches/Other").mkdir(parents=True)
    (tmp_path / "patches/Other/series").write_text("c.patch\n")
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text(
        "The series has 3 patches; it carries\n4 patches, 1 Up patches.\n\n"
        "Measured on the 9-patch series, 2026-01-02.\n\n"
        "Timed on the 8-patch series.\n\n"
        "```\napplied 7 patches: Up 7\n```\n"
    )
    (tmp_path / "docs/patches.md").write_text("99 patches: Up 98, Other 1\n")  # generated
    (tmp_path / "docs/notes.md").write_text("Now 3 patches: Up 2 and Other 2.\n")
    monkeypatch.setattr(check_doc_figures, "ROOT", tmp_path)
    assert [line.split(": write")[0] for line in check_doc_figures.stale(tmp_path)] == [
        "README.md:1: 'carries 4 patches' states 4, patches/*/series has 3",
        "README.md:2: '1 Up patches' states 1, patches/Up/series has 2",
        "README.md:6: 'the 8-patch series' states 8, patches/*/series has 3",
        "docs/notes.md:1: 'Other 2' states 2, patches/Other/series has 1",
    ]

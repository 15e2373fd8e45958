"""apply/reset on real git repos: strict, atomic, idempotent, never discarding work."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.tools.sandbox import Sandbox, lines, run
from tools.patchtool.apply.apply import apply_upstream, reset_upstream
from tools.patchtool.apply.export import export_upstream, write_export
from tools.patchtool.errors import PatchToolError
from tools.patchtool.git import git as git_module
from tools.patchtool.model.manifest import load_manifest
from tools.patchtool.source.checkout import BRANCH_REF


def _setup(sandbox: Sandbox) -> tuple[Path, str, dict[str, bytes]]:
    repo, pin = sandbox.upstream("Up", {"a.py": lines(40), "b.py": lines(10, "b")})
    p1 = sandbox.make_patch(
        repo, pin, {"a.py": lines(40).replace("line 5\n", "line five\n")}, "Fix a"
    )
    p2 = sandbox.make_patch(repo, "HEAD", {"b.py": lines(10, "b") + "b 11\n"}, "Extend b")
    sandbox.add("Up", str(repo), pin)
    return repo, pin, {"fix-a.patch": p1, "extend-b.patch": p2}


def _snapshot(repo: Path) -> dict[str, object]:
    """HEAD, every ref, the index entries and every worktree byte (outside .git)."""
    files = {}
    for dirpath, dirnames, filenames in os.walk(repo):
        dirnames[:] = [d for d in dirnames if d != ".git"]
        for name in filenames:
            path = Path(dirpath, name)
            files[path.relative_to(repo).as_posix()] = path.read_bytes()
    return {
        "head": run(repo, "rev-parse", "HEAD"),
        "symbolic": subprocess.run(
            ["git", "symbolic-ref", "-q", "HEAD"], cwd=repo, capture_output=True, text=True
        ).stdout,
        "refs": run(repo, "for-each-ref", "--format=%(refname) %(objectname)"),
        "index": run(repo, "ls-files", "-s"),
        "status": run(repo, "status", "--porcelain"),
        "files": files,
    }


def test_apply_makes_reproducible_patched_branch(sandbox: Sandbox) -> None:
    _, pin, patches = _setup(sandbox)
    sandbox.set_series("Up", patches)
    up = load_manifest(sandbox.root).upstreams["Up"]
    outcome = apply_upstream(sandbox.root, up)
    checkout = sandbox.root / "3rdparty/Up"
    assert outcome.state == "applied", outcome.message
    assert run(checkout, "symbolic-ref", "HEAD") == BRANCH_REF
    assert run(checkout, "log", "--format=%s", f"{pin}..HEAD").splitlines() == ["Extend b", "Fix a"]
    # committer = author, committer date = author date: same commits on every machine.
    for fmt in ("%an %ae %ad", "%cn %ce %cd"):
        assert run(checkout, "log", "-1", f"--format={fmt}") == run(
            checkout, "log", "-1", "--format=%an %ae %ad"
        )
    head = outcome.head
    reset_upstream(sandbox.root, up)
    assert run(checkout, "rev-parse", "HEAD") == pin
    assert apply_upstream(sandbox.root, up).head == head


def test_reapply_is_a_noop_that_only_reads(
    sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Re-applying an applied series changes nothing and runs only reading git commands (a
    handful): the work it skips is what makes `tools/apply_patches.sh` cheap to re-run. Counted,
    not timed: a wall-clock bound fails on a loaded machine (CI's 0.69 s against 0.5 s)."""
    _, _, patches = _setup(sandbox)
    sandbox.set_series("Up", patches)
    up = load_manifest(sandbox.root).upstreams["Up"]
    first = apply_upstream(sandbox.root, up)
    before = _snapshot(sandbox.root / "3rdparty/Up")
    calls: list[list[str]] = []
    real_command = git_module.command

    def recording(args: list[str]) -> list[str]:
        calls.append(list(args))
        return real_command(args)

    monkeypatch.setattr(git_module, "command", recording)
    again = apply_upstream(sandbox.root, up)
    assert again.state == "unchanged" and "nothing to do" in again.message
    assert again.head == first.head
    assert _snapshot(sandbox.root / "3rdparty/Up") == before
    writers = {"am", "apply", "checkout", "commit", "reset", "update-ref", "switch", "stash"}
    assert [c for c in calls if writers & set(c)] == []
    assert 0 < len(calls) <= 15, calls


def test_patch_needing_fuzz_is_refused(sandbox: Sandbox) -> None:
    repo, pin = sandbox.upstream("Up", {"a.py": lines(40)})
    # The patch is made where a context line (line 3) differs from the pin: applying it at the
    # pin needs fuzz 1, which strict apply must refuse.
    base_files = {"a.py": lines(40).replace("line 3\n", "line three\n")}
    work = sandbox.tmp / "dev" / "Up"
    run(sandbox.tmp, "clone", "-q", str(repo), str(work))
    sandbox.make_patch(repo, pin, base_files, "Drift")  # the drifted base, not in the series
    fixed = base_files["a.py"].replace("line 5\n", "line five\n")
    patch = sandbox.make_patch(repo, "HEAD", {"a.py": fixed}, "Fix a")
    sandbox.add("Up", str(repo), pin)
    sandbox.set_series("Up", {"fix-a.patch": patch})
    if shutil.which("patch"):
        # Proof that this patch needs fuzz: GNU patch applies it only with fuzz allowed.
        probe = sandbox.tmp / "probe"
        shutil.copytree(sandbox.root / "3rdparty/Up", probe, ignore=shutil.ignore_patterns(".git"))
        strict = subprocess.run(
            ["patch", "-p1", "--dry-run", "-F0"], cwd=probe, input=patch, capture_output=True
        )
        fuzzy = subprocess.run(
            ["patch", "-p1", "--dry-run", "-F2"], cwd=probe, input=patch, capture_output=True
        )
        assert strict.returncode != 0 and fuzzy.returncode == 0, fuzzy.stdout
    up = load_manifest(sandbox.root).upstreams["Up"]
    before = _snapshot(sandbox.root / "3rdparty/Up")
    with pytest.raises(
        PatchToolError, match=r"fix-a.patch .*series:1.*a.py: hunk @@ -2,7 \+2,7 @@"
    ):
        apply_upstream(sandbox.root, up)
    assert _snapshot(sandbox.root / "3rdparty/Up") == before


def test_conflict_is_refused_and_checkout_restored_exactly(sandbox: Sandbox) -> None:
    repo, pin, patches = _setup(sandbox)
    sandbox.set_series("Up", {"fix-a.patch": patches["fix-a.patch"]})
    up = load_manifest(sandbox.root).upstreams["Up"]
    apply_upstream(sandbox.root, up)  # a previous applied state that must survive the failure
    conflicting = sandbox.make_patch(
        repo, pin, {"a.py": lines(40).replace("line 5\n", "line 5!\n")}, "Clash"
    )
    sandbox.set_series("Up", {**patches, "clash.patch": conflicting})
    checkout = sandbox.root / "3rdparty/Up"
    before = _snapshot(checkout)
    with pytest.raises(PatchToolError) as info:
        apply_upstream(sandbox.root, up)
    message = str(info.value)
    assert "patch 3/3 clash.patch (patches/Up/series:3)" in message
    assert "a.py: hunk @@ -2,7 +2,7 @@ (clash.patch:" in message
    assert "tools/patches rebase Up --to <ref>" in message
    assert _snapshot(checkout) == before
    assert not (checkout / ".git" / "rebase-apply").exists()


def test_dirty_checkout_is_refused_and_nothing_lost(sandbox: Sandbox) -> None:
    _, _, patches = _setup(sandbox)
    sandbox.set_series("Up", patches)
    up = load_manifest(sandbox.root).upstreams["Up"]
    checkout = sandbox.root / "3rdparty/Up"
    (checkout / "a.py").write_text("my local edit\n")
    (checkout / "notes.txt").write_text("untracked work\n")
    before = _snapshot(checkout)
    with pytest.raises(PatchToolError, match=r"uncommitted changes \(a.py, notes.txt\).*--force"):
        apply_upstream(sandbox.root, up)
    assert _snapshot(checkout) == before
    with pytest.raises(PatchToolError, match="uncommitted changes"):
        reset_upstream(sandbox.root, up)
    assert _snapshot(checkout) == before


def test_force_stashes_uncommitted_changes(sandbox: Sandbox) -> None:
    _, _, patches = _setup(sandbox)
    sandbox.set_series("Up", patches)
    up = load_manifest(sandbox.root).upstreams["Up"]
    checkout = sandbox.root / "3rdparty/Up"
    (checkout / "a.py").write_text("my local edit\n")
    (checkout / "notes.txt").write_text("untracked work\n")
    outcome = apply_upstream(sandbox.root, up, force=True)
    assert outcome.state == "applied" and outcome.stash
    assert outcome.stash[:12] in outcome.message
    assert run(checkout, "show", f"{outcome.stash}:a.py") == "my local edit"
    assert run(checkout, "show", f"{outcome.stash}^3:notes.txt") == "untracked work"
    assert not (checkout / "notes.txt").exists()


def test_branch_with_foreign_commits_is_kept(sandbox: Sandbox) -> None:
    _, _, patches = _setup(sandbox)
    sandbox.set_series("Up", patches)
    up = load_manifest(sandbox.root).upstreams["Up"]
    checkout = sandbox.root / "3rdparty/Up"
    apply_upstream(sandbox.root, up)
    (checkout / "new.py").write_text("work in progress\n")
    run(checkout, "add", "new.py")
    run(checkout, "commit", "-q", "-m", "my work")
    mine = run(checkout, "rev-parse", "HEAD")
    with pytest.raises(PatchToolError, match="commits tools/patches did not make"):
        apply_upstream(sandbox.root, up)
    assert run(checkout, "rev-parse", "HEAD") == mine
    outcome = apply_upstream(sandbox.root, up, force=True)
    assert f"patched-before-{mine[:12]}" in outcome.message
    assert run(checkout, "rev-parse", f"patched-before-{mine[:12]}") == mine


def test_branch_edited_then_exported_is_moved_without_force(sandbox: Sandbox) -> None:
    """Edit a patch's message on the branch, export it: apply needs no --force (the series
    holds everything); an edit that was not exported is still kept and refused."""
    _, _, patches = _setup(sandbox)
    sandbox.set_series("Up", patches)
    up = load_manifest(sandbox.root).upstreams["Up"]
    checkout = sandbox.root / "3rdparty/Up"
    apply_upstream(sandbox.root, up)
    message = run(checkout, "log", "-1", "--format=%B") + "\nReworded.\n"
    run(checkout, "commit", "-q", "--amend", "-m", message)
    unexported = run(checkout, "rev-parse", "HEAD")
    with pytest.raises(PatchToolError, match="commits tools/patches did not make"):
        apply_upstream(sandbox.root, up)
    assert run(checkout, "rev-parse", "HEAD") == unexported
    write_export(sandbox.root, up, export_upstream(sandbox.root, up))
    outcome = apply_upstream(sandbox.root, up)
    assert outcome.state == "applied", outcome.message
    assert "Reworded." in run(checkout, "log", "-1", "--format=%B")
    assert run(checkout, "branch", "--list", "patched-before-*") == ""


def test_branch_rebased_off_the_pin_is_kept_even_if_it_exports_the_same(sandbox: Sandbox) -> None:
    """The series rebased onto the pin's parent (the patches do not touch what the pin
    changed) exports byte for byte like the series, but it is not the series on the pin:
    that branch is someone's work and is kept."""
    repo, older = sandbox.upstream("Up", {"a.py": lines(40), "b.py": lines(10, "b")})
    (repo / "c.py").write_text("new in the pin\n")
    run(repo, "add", "c.py")
    run(repo, "commit", "-q", "-m", "pin: add c.py")
    pin = run(repo, "rev-parse", "HEAD")
    fix = sandbox.make_patch(
        repo, pin, {"a.py": lines(40).replace("line 5\n", "line five\n")}, "Fix a"
    )
    sandbox.add("Up", str(repo), pin)
    sandbox.set_series("Up", {"fix-a.patch": fix})
    up = load_manifest(sandbox.root).upstreams["Up"]
    checkout = sandbox.root / "3rdparty/Up"
    apply_upstream(sandbox.root, up)
    write_export(sandbox.root, up, export_upstream(sandbox.root, up))  # series == branch
    run(checkout, "rebase", "-q", "--onto", older, pin, "patched")
    rebased = run(checkout, "rev-parse", "HEAD")
    with pytest.raises(PatchToolError, match="commits tools/patches did not make"):
        apply_upstream(sandbox.root, up)
    assert run(checkout, "rev-parse", "patched") == rebased


def test_am_in_progress_is_refused_and_left_alone(sandbox: Sandbox) -> None:
    _, _, patches = _setup(sandbox)
    sandbox.set_series("Up", patches)
    checkout = sandbox.root / "3rdparty/Up"
    state = Path(run(checkout, "rev-parse", "--absolute-git-dir")) / "rebase-apply"
    state.mkdir()
    (state / "next").write_text("1\n")
    up = load_manifest(sandbox.root).upstreams["Up"]
    with pytest.raises(PatchToolError, match="in progress"):
        apply_upstream(sandbox.root, up)
    assert (state / "next").read_text() == "1\n"

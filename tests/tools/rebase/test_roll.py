"""`roll` on generated repos named like ours: NeMo-RL nests Megatron-Bridge nests Megatron-LM.

Megatron-LM carries one patch. Its history: L1 (the pin), L2 (lines shifted: the patch moves
with an offset), L3 (the patch's own change merged upstream), L4 (the patched line rewritten:
a conflict; on a branch from L2). Each NeMo-RL commit T<n> nests Bridge B<n>, which nests L<n>; NeMo-RL's main ends
at the commit the test names.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.cpu_load import cpu_burners, load_average
from tests.tools import faulty_git
from tests.tools.repos import commit, init_repo, make_patch, nest, numbered, run, trailers
from tests.tools.repos import tree_state as patches_state
from tests.tools.sandbox import REPO_ROOT
from tools.patchtool.cli import main
from tools.patchtool.model.manifest import Upstream
from tools.patchtool.rebase.engine import TripwireHook
from tools.patchtool.rebase.roll import plan_roll, write_roll
from tools.patchtool.source.pin_check import check_pins

pytestmark = pytest.mark.usefixtures("isolated_git", "identity")


@pytest.fixture
def identity(monkeypatch: pytest.MonkeyPatch) -> None:
    """The roll commit's author (CI sets one; the isolated git config has none)."""
    for role in ("AUTHOR", "COMMITTER"):
        monkeypatch.setenv(f"GIT_{role}_NAME", "Roller")
        monkeypatch.setenv(f"GIT_{role}_EMAIL", "roller@example.invalid")


FIXED = [*numbered(30)[:20], "fixed 21", *numbered(30)[21:]]


def _lib_history(lib: Path) -> dict[str, str]:
    shas = {"L1": init_repo(lib, {"lib.py": numbered(30)}, tag="")}
    shas["L2"] = commit(lib, "L2", {"lib.py": ["# new", *numbered(30)]})
    shas["L3"] = commit(lib, "L3 merges the fix", {"lib.py": ["# new", *FIXED]})
    conflicting = [*numbered(30)[:20], "rewritten 21", *numbered(30)[21:]]
    run(["checkout", "-q", "-b", "other", shas["L2"]], lib)
    shas["L4"] = commit(lib, "L4", {"lib.py": ["# new", *conflicting]})
    return shas


@pytest.fixture
def stack(tmp_path: Path) -> dict[str, str | Path]:
    lib, mid, top = (tmp_path / n for n in ("Megatron-LM", "Megatron-Bridge", "NeMo-RL"))
    shas: dict[str, str | Path] = dict(_lib_history(lib))
    patch = make_patch(lib, str(shas["L1"]), {"lib.py": FIXED}, "fix lib", trailers())
    init_repo(mid, {"mid.py": ["m"]}, tag="")
    init_repo(top, {"top.py": ["t"]}, tag="")
    for n in range(1, 5):
        shas[f"B{n}"] = nest(mid, "3rdparty/Megatron-LM", lib, str(shas[f"L{n}"]), f"B{n}")
        shas[f"T{n}"] = nest(
            top,
            "3rdparty/Megatron-Bridge-workspace/Megatron-Bridge",
            mid,
            str(shas[f"B{n}"]),
            f"T{n}",
        )
    root = tmp_path / "super"
    root.mkdir()
    run(["init", "-q", "-b", "main"], root)
    pins = {"Megatron-LM": (lib, "L1"), "Megatron-Bridge": (mid, "B1"), "NeMo-RL": (top, "T1")}
    text = ""
    for name, (url, key) in pins.items():
        (root / "patches" / name).mkdir(parents=True)
        (root / "patches" / name / "series").write_text("")
        text += f'[{name}]\npath = "3rdparty/{name}"\nurl = "{url}"\ntag = ""\n'
        text += f'commit = "{shas[key]}"\n\n'
        run(["clone", "-q", str(url), str(root / "3rdparty" / name)], root)
    (root / "patches/Megatron-LM/fix.patch").write_bytes(patch)
    (root / "patches/Megatron-LM/series").write_text("fix.patch\n")
    (root / "patches/upstreams.toml").write_text(text)
    (root / ".gitmodules").write_text(
        "".join(
            f'[submodule "3rdparty/{n}"]\n\tpath = 3rdparty/{n}\n\turl = {u}\n'
            for n, (u, _k) in pins.items()
        )
    )
    run(["add", "patches", ".gitmodules"], root)
    for name, (_url, key) in pins.items():
        run(["update-index", "--add", "--cacheinfo", f"160000,{shas[key]},3rdparty/{name}"], root)
    run(["commit", "-q", "-m", "super"], root)
    shas["root"] = root
    shas["top"] = top
    return shas


def _main_at(stack: dict[str, str | Path], key: str) -> None:
    """NeMo-RL's main points at T<n> (what `roll` without a REF reads)."""
    run(["update-ref", "refs/heads/main", str(stack[key])], Path(stack["top"]))


def _gitlinks(root: Path) -> dict[str, str]:
    rows = run(["ls-files", "-s", "3rdparty"], root).splitlines()
    return {row.split()[3].split("/")[1]: row.split()[1] for row in rows}


def _roll(root: Path, *args: str) -> int:
    return main(["--root", str(root), "roll", "--no-tripwires", *args])


def test_up_to_date_changes_nothing(
    stack: dict[str, str | Path], capsys: pytest.CaptureFixture[str]
) -> None:
    root = Path(stack["root"])
    _main_at(stack, "T1")
    before, head = patches_state(root), run(["rev-parse", "HEAD"], root)
    assert _roll(root) == 0
    out = capsys.readouterr().out
    assert "up to date" in out and "fix.patch  clean" in out
    assert patches_state(root) == before and run(["rev-parse", "HEAD"], root) == head


def test_moves_the_three_pins_in_one_commit(
    stack: dict[str, str | Path], capsys: pytest.CaptureFixture[str]
) -> None:
    root = Path(stack["root"])
    _main_at(stack, "T2")
    head = run(["rev-parse", "HEAD"], root)
    assert _roll(root) == 0
    out = capsys.readouterr().out
    assert "fix.patch  offset" in out and "moved in one commit" in out
    assert run(["rev-parse", "HEAD~1"], root) == head
    assert _gitlinks(root) == {
        "Megatron-LM": stack["L2"],
        "Megatron-Bridge": stack["B2"],
        "NeMo-RL": stack["T2"],
    }
    assert run(["status", "--porcelain", "--", "patches", "docs"], root) == ""
    message = run(["log", "-1", "--format=%B"], root)
    assert message.startswith("Roll the pins to NeMo-RL main (")
    assert "Megatron-LM: " in message and "1 offset" in message
    assert [r.state for r in check_pins(root)] == ["same", "same"]
    assert b"@@ -19,7 +19,7 @@" in (root / "patches/Megatron-LM/fix.patch").read_bytes()


def test_retires_a_patch_upstream_merged(stack: dict[str, str | Path]) -> None:
    root = Path(stack["root"])
    assert _roll(root, "--to-nemo-rl", str(stack["T3"])) == 0
    retired = root / "patches/Megatron-LM/upstreamed/fix.patch"
    assert retired.is_file() and not (root / "patches/Megatron-LM/fix.patch").exists()
    text = retired.read_text()
    assert "Upstream-Status: accepted" in text and "Upstream-Evidence:" in text
    assert (root / "patches/Megatron-LM/series").read_text() == ""
    assert _gitlinks(root)["Megatron-LM"] == stack["L3"]
    assert "1 upstreamed" in run(["log", "-1", "--format=%B"], root)
    assert run(["status", "--porcelain", "--", "patches", "docs"], root) == ""


def test_a_conflict_stops_with_nothing_changed(
    stack: dict[str, str | Path], capsys: pytest.CaptureFixture[str]
) -> None:
    root = Path(stack["root"])
    before, head = patches_state(root), run(["rev-parse", "HEAD"], root)
    assert _roll(root, "--to-nemo-rl", str(stack["T4"]), "--json") == 2
    payload = json.loads(capsys.readouterr().out)
    assert payload["decision"] == "stop" and payload["commit"] == ""
    assert payload["blockers"] == ["Megatron-LM/fix.patch: conflict"]
    assert [t["upstream"] for t in payload["triple"]] == [
        "NeMo-RL",
        "Megatron-Bridge",
        "Megatron-LM",
    ]
    assert patches_state(root) == before and run(["rev-parse", "HEAD"], root) == head
    assert payload["next_steps"] == [
        ["tools/patches", "rebase", "Megatron-LM", "--to", stack["L4"]],
        ["tools/patches", "roll", "--to-nemo-rl", stack["T4"]],
    ]


def test_dry_run_reports_and_changes_nothing(
    stack: dict[str, str | Path], capsys: pytest.CaptureFixture[str]
) -> None:
    root = Path(stack["root"])
    _main_at(stack, "T2")
    before = patches_state(root)
    assert _roll(root, "--dry-run", "--json") == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["decision"] == "move" and payload["dry_run"] and payload["written"] == []
    lib = payload["triple"][2]
    assert (lib["from"], lib["to"]) == (stack["L1"], stack["L2"])
    assert [p["classification"] for p in lib["result"]["patches"]] == ["offset"]
    assert patches_state(root) == before


def test_refuses_with_staged_changes(
    stack: dict[str, str | Path], capsys: pytest.CaptureFixture[str]
) -> None:
    root = Path(stack["root"])
    _main_at(stack, "T2")
    (root / "notes.txt").write_text("mine\n")
    run(["add", "notes.txt"], root)
    before = patches_state(root)
    assert _roll(root) == 1
    assert "staged changes (notes.txt ...) would go into the roll commit" in capsys.readouterr().err
    assert patches_state(root) == before


def test_without_history_says_how_to_get_it(
    stack: dict[str, str | Path], capsys: pytest.CaptureFixture[str]
) -> None:
    root = Path(stack["root"])
    text = (root / "patches/upstreams.toml").read_text()
    (root / "patches/upstreams.toml").write_text(
        text.replace(str(stack["top"]), str(Path(stack["top"]).parent / "gone"))
    )
    run(["commit", "-q", "-am", "url gone"], root)
    assert _roll(root) == 1
    err = capsys.readouterr().err
    assert "NeMo-RL: cannot read main of" in err and "--mirror-dir" in err


def test_refuses_without_a_commit_identity(
    stack: dict[str, str | Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    root = Path(stack["root"])
    _main_at(stack, "T2")
    for var in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL"):
        monkeypatch.delenv(var)
    monkeypatch.setenv("EMAIL", "")
    before = patches_state(root)
    assert _roll(root) == 1
    assert "git config user.email" in capsys.readouterr().err
    assert patches_state(root) == before


def test_tripwires_run_only_where_the_pin_moves(stack: dict[str, str | Path]) -> None:
    """The hook is asked for every upstream that moves, and its verdict is the engine's."""
    root = Path(stack["root"])
    asked: list[str] = []

    def tripwire_for(up: Upstream) -> TripwireHook:
        asked.append(up.name)
        return lambda _name, _patch, _tree: True  # the bug is gone on the new base

    roll = plan_roll(root, str(stack["T2"]), tripwire_for=tripwire_for)
    write_roll(root, roll, ["tools/patches", "roll"], dry_run=True)
    assert sorted(asked) == ["Megatron-Bridge", "Megatron-LM", "NeMo-RL"]
    lib = roll.planned[2].result
    assert lib is not None and lib.patches[0].classification == "upstreamed"
    assert [e.kind for e in lib.patches[0].evidence] == ["tripwire"]
    asked.clear()
    _main_at(stack, "T1")
    plan_roll(root, tripwire_for=tripwire_for)
    assert asked == []


def _fake_gh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, script: str) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    gh = bin_dir / "gh"
    gh.write_text("#!/bin/sh\n" + script)
    gh.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return bin_dir / "gh.log"


def test_open_pr_pushes_the_roll_branch_and_asks_gh(
    stack: dict[str, str | Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """What the nightly workflow runs: roll --open-pr (argv-only gh, as open-pr does)."""
    root = Path(stack["root"])
    origin = tmp_path / "origin.git"
    run(["init", "-q", "--bare", str(origin)], tmp_path)
    run(["remote", "add", "origin", str(origin)], root)
    log = _fake_gh(
        tmp_path,
        monkeypatch,
        'for a in "$@"; do printf "%s\\n" "$a"; done > "$(dirname "$0")/gh.log"\n'
        'cp "$(sed -n 10p "$(dirname "$0")/gh.log")" "$(dirname "$0")/body.md"\n'
        "echo https://github.com/example/mcore-rl-stack/pull/9\n",
    )
    assert main(["--root", str(root), "report"]) == 0  # the page rides along in the commit
    run(["add", "docs"], root)
    run(["commit", "-q", "-m", "page"], root)
    capsys.readouterr()
    _main_at(stack, "T2")
    assert _roll(root, "--open-pr", "--json") == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["pull_request"] == "https://github.com/example/mcore-rl-stack/pull/9"
    branch = f"roll/nemo-rl-{str(stack['T2'])[:12]}"
    assert run(["rev-parse", branch], origin) == run(["rev-parse", "HEAD"], root)
    argv = log.read_text().splitlines()
    assert argv[:6] == ["pr", "create", "--base", "main", "--head", branch]
    assert argv[6:8] == ["--title", run(["log", "-1", "--format=%s"], root)]
    body = (log.parent / "body.md").read_text()
    assert "Megatron-LM: " in body and "1 offset" in body and "# Carried patches" in body
    assert "docs/patches.md" in payload["written"]
    assert run(["status", "--porcelain", "--", "docs"], root) == ""


def test_open_pr_failure_says_what_is_left(
    stack: dict[str, str | Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    root = Path(stack["root"])
    origin = tmp_path / "origin.git"
    run(["init", "-q", "--bare", str(origin)], tmp_path)
    run(["remote", "add", "origin", str(origin)], root)
    _fake_gh(tmp_path, monkeypatch, "echo 'HTTP 403: no token' >&2\nexit 1\n")
    _main_at(stack, "T2")
    assert _roll(root, "--open-pr") == 1
    err = capsys.readouterr().err
    assert "gh pr create failed (HTTP 403: no token)" in err and "left to do: gh pr create" in err
    assert run(["log", "-1", "--format=%s"], root).startswith("Roll the pins")


def test_an_interrupted_roll_ends_within_seconds_and_changes_nothing(
    stack: dict[str, str | Path], tmp_path: Path
) -> None:
    """SIGINT to a roll started as a background job (SIGINT inherited ignored), inside a slow
    `git am` of the replay, with every core busy twice over: exit 130 within the bound, the
    superproject as it was, no scratch directory left (issue 25)."""
    root = Path(stack["root"])
    _main_at(stack, "T2")
    before, head = patches_state(root), run(["rev-parse", "HEAD"], root)
    scratch_tmp = tmp_path / "scratch-tmp"
    scratch_tmp.mkdir()
    mark = tmp_path / "am-started"
    env = dict(os.environ, **faulty_git.install(tmp_path / "bin", "slow_am"))
    env.update(FAULTY_GIT_SLEEP="60", TMPDIR=str(scratch_tmp), FAULTY_GIT_MARK=str(mark))
    tool = [sys.executable, str(REPO_ROOT / "tools" / "patches"), "--root", str(root)]
    proc = subprocess.Popen(
        [*tool, "roll", "--no-tripwires"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    faulty_git.wait_for_mark(mark, proc)  # inside the slow `git am`
    with cpu_burners():
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=60)
        finally:
            proc.kill()
        latency = time.monotonic() - sent
    print(f"roll ended {latency:.2f} s after SIGINT (load average {load_average():.1f})")
    assert proc.returncode == 130, err
    # Half the planted hang (git am sleeps 60 s), not a machine-speed figure (see verify's).
    assert latency < 30, f"roll took {latency:.1f} s to end after SIGINT"
    assert patches_state(root) == before and run(["rev-parse", "HEAD"], root) == head
    assert [p.name for p in scratch_tmp.iterdir() if p.name.startswith("patches-")] == []

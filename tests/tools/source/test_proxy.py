"""Proxies: a release standing in for a non-release pin is labelled on every line, per patch.

One generated upstream, three patches on its (non-release) pin, and a proxy release archive
in which a.py is the pinned file, b.py differs outside the hunk and c.py differs inside it:
the three labelling cases. Also: the exact source always wins over the proxy.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.tools.sandbox import REPO_ROOT, UNREACHABLE, Sandbox, lines, run, sdist_downloader, write
from tools.patchtool.apply.apply import apply_upstream
from tools.patchtool.commands.verify import render_table
from tools.patchtool.errors import PatchToolError
from tools.patchtool.model.manifest import Standin, Upstream, load_manifest
from tools.patchtool.source.detect import STANDIN, detect_source
from tools.patchtool.source.proxy import DIFFERS, IDENTICAL, NOT_VERIFIED
from tools.patchtool.source.standin import Downloader
from tools.patchtool.source.state import upstream_status
from tools.patchtool.verify.session import verify_upstream
from tools.patchtool.verify.tripwire import PROVEN_ON_PROXY

SPEC = Standin("sdist", "pkg", "v{version}", "1.0", True, {"pkg/": "src/pkg/"})
TOOL = [sys.executable, str(REPO_ROOT / "tools" / "patches")]
TRIP = (
    "import os\nfrom pathlib import Path\n\n\n"
    "def _read(name: str) -> str:\n"
    "    tree = os.environ.get('PATCHTOOL_TREE_UP', Path(__file__).parents[1] / '3rdparty/Up')\n"
    "    return (Path(tree) / 'src/pkg' / name).read_text()\n\n\n"
    "def test_a() -> None:\n    assert 'a twenty' in _read('a.py')\n\n\n"
    "def test_b() -> None:\n    assert 'b twenty' in _read('b.py')\n\n\n"
    "def test_c() -> None:\n    assert 'c twenty' in _read('c.py')\n"
)
# The release archive: a.py as pinned; b.py differs at line 3 (outside the hunk's context,
# so the hunk still applies exactly); c.py differs at line 20 (inside the hunk).
ARCHIVE = {
    "pkg/a.py": lines(30),
    "pkg/b.py": lines(30).replace("line 3\n", "line 3 (release)\n"),
    "pkg/c.py": lines(30).replace("line 20\n", "line 20 (release)\n"),
    "PKG-INFO": "x\n",
}


def _trailers(test: str) -> str:
    return f"Upstream-Status: pending\nOrigin: tests\nTest: tests/test_trip.py::{test}\n"


def _proxy_sandbox(sandbox: Sandbox, url: str = UNREACHABLE, clone: bool = False) -> Path:
    """Upstream pinned at a non-release commit, series a/b/c, manifest stand-in `proxy = true`."""
    files = {f"src/pkg/{n}.py": lines(30) for n in "abc"}
    repo, pin = sandbox.upstream("Up", files)
    patches = {
        f"fix-{n}.patch": sandbox.make_patch(
            repo,
            pin,
            {f"src/pkg/{n}.py": lines(30).replace("line 20\n", f"{n} twenty\n")},
            f"Fix {n}",
            _trailers(f"test_{n}"),
        )
        for n in "abc"
    }
    sandbox.add("Up", url if url != "repo" else str(repo), pin, SPEC, clone=clone)
    manifest = sandbox.root / "patches/upstreams.toml"
    manifest.write_text(manifest.read_text().replace("proxy = false", "proxy = true"))
    sandbox.set_series("Up", patches)
    write(sandbox.root, {"tests/test_trip.py": TRIP})
    sandbox.commit()
    return repo


def _up(sandbox: Sandbox) -> Upstream:
    return load_manifest(sandbox.root).upstreams["Up"]


def _no_download(standin: Standin, cache: Path) -> Path:
    raise AssertionError(f"the proxy {standin.package}=={standin.version} must not be fetched")


DOWNLOAD: Downloader = sdist_downloader(ARCHIVE)


def test_apply_labels_each_case_and_leaves_out_what_does_not_fit(sandbox: Sandbox) -> None:
    _proxy_sandbox(sandbox)
    outcome = apply_upstream(sandbox.root, _up(sandbox), downloader=DOWNLOAD)
    assert [(c.patch, c.state, c.files) for c in outcome.checks] == [
        ("fix-a.patch", IDENTICAL, []),
        ("fix-b.patch", DIFFERS, ["src/pkg/b.py"]),
        ("fix-c.patch", NOT_VERIFIED, ["src/pkg/c.py"]),
    ]
    assert [c.label for c in outcome.checks[:2]] == [
        "verified on proxy, pre-image identical to pin",
        "proxy, pre-image differs from pin: src/pkg/b.py",
    ]
    assert outcome.checks[2].label.startswith("not verified here (proxy: ")
    # A patch that does not fit is not applied; the rest of the series is, in order.
    assert outcome.state == "not-verified"
    assert outcome.message.startswith("PROXY pkg 1.0 (proxy for ")
    assert "2 of 3 patches" in outcome.message and "NOT verified here" in outcome.message
    checkout = sandbox.root / "3rdparty/Up"
    assert run(checkout, "log", "--format=%s", "refs/patchtool/pin..HEAD") == "Fix b\nFix a"
    assert "c twenty" not in (checkout / "src/pkg/c.py").read_text()
    assert detect_source(sandbox.root, _up(sandbox)).proxy


def test_cli_says_proxy_on_every_line_and_exit_codes(sandbox: Sandbox) -> None:
    _proxy_sandbox(sandbox)
    apply_upstream(sandbox.root, _up(sandbox), downloader=DOWNLOAD)  # no PyPI in tests
    root = ["--root", str(sandbox.root)]
    proc = subprocess.run([*TOOL, *root, "apply"], capture_output=True, text=True)
    assert proc.returncode == 3, proc.stderr
    out = (proc.stdout + proc.stderr).splitlines()
    assert len(out) == 4 and all("proxy" in line.lower() for line in out), out
    assert "already applied" in out[0]
    proc = subprocess.run([*TOOL, *root, "apply", "--allow-missing", "--json"], capture_output=True)
    assert proc.returncode == 0
    row = json.loads(proc.stdout)["upstreams"][0]
    assert row["proxy"].startswith("pkg 1.0 (proxy for ")
    assert [p["state"] for p in row["patch_labels"]] == [IDENTICAL, DIFFERS, NOT_VERIFIED]
    proc = subprocess.run([*TOOL, *root, "status"], capture_output=True, text=True)
    status = proc.stdout.splitlines()
    assert "PROXY release stand-in pkg==1.0" in status[0]
    assert [ln.split(":")[0].strip() for ln in status[3:]] == [f"fix-{n}.patch" for n in "abc"]
    assert all("proxy" in ln for ln in status[3:]), status


def test_status_counts_only_what_applies_on_the_proxy(sandbox: Sandbox) -> None:
    _proxy_sandbox(sandbox)
    apply_upstream(sandbox.root, _up(sandbox), downloader=DOWNLOAD)
    row = upstream_status(sandbox.root, _up(sandbox))
    assert (row["source"], row["patches_applied"], row["patched_state"]) == (STANDIN, 2, True)
    assert [p["label"] for p in row["patch_labels"]][:2] == [  # type: ignore[index]
        "verified on proxy, pre-image identical to pin",
        "proxy, pre-image differs from pin: src/pkg/b.py",
    ]


def test_verify_never_claims_the_pin_on_a_proxy(sandbox: Sandbox) -> None:
    _proxy_sandbox(sandbox)
    apply_upstream(sandbox.root, _up(sandbox), downloader=DOWNLOAD)
    proofs = verify_upstream(sandbox.root, _up(sandbox), Path(sys.executable), progress=False)
    assert [(p.with_patch, p.without_patch, p.verdict) for p in proofs] == [
        ("passed", "failed", PROVEN_ON_PROXY),
        ("passed", "failed", PROVEN_ON_PROXY),
        ("not-run", "not-run", "not verified here"),
    ]
    assert all(p.source.startswith("PROXY pkg 1.0 (proxy for ") for p in proofs)
    assert proofs[0].source.endswith("verified on proxy, pre-image identical to pin")
    assert proofs[1].source.endswith("proxy, pre-image differs from pin: src/pkg/b.py")
    assert proofs[2].unavailable and not proofs[2].proven
    table = render_table(proofs)
    assert "exact pin" not in table and not re.search(r"\bproven\b(?! on proxy)", table)
    checkout = sandbox.root / "3rdparty/Up"
    assert run(checkout, "status", "--porcelain") == ""


def test_verify_cli_exit_code_on_proxy(sandbox: Sandbox) -> None:
    _proxy_sandbox(sandbox)
    apply_upstream(sandbox.root, _up(sandbox), downloader=DOWNLOAD)
    root = ["--root", str(sandbox.root), "verify", "--python", sys.executable, "--json"]
    proc = subprocess.run([*TOOL, *root], capture_output=True, text=True)
    assert proc.returncode == 1  # a patch is not verified here: not green by default
    verdicts = [p["verdict"] for p in json.loads(proc.stdout)["patches"]]
    assert verdicts == [PROVEN_ON_PROXY, PROVEN_ON_PROXY, "not verified here"]
    proc = subprocess.run([*TOOL, *root, "--allow-missing"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout


def test_exact_source_present_means_no_proxy(sandbox: Sandbox) -> None:
    _proxy_sandbox(sandbox, url="repo", clone=True)
    outcome = apply_upstream(sandbox.root, _up(sandbox), downloader=_no_download)
    assert outcome.state == "applied" and outcome.checks == [] and not outcome.proxy
    assert "PROXY" not in outcome.message and "applied 3 patches" in outcome.message
    row = upstream_status(sandbox.root, _up(sandbox))
    assert row["source"] != STANDIN and row["proxy"] == "" and row["patch_labels"] == []


def _use_mirror(sandbox: Sandbox, repo: Path) -> None:
    """The exact source becomes reachable: a mirror through url.<repo>.insteadOf."""
    config = Path(os.environ["GIT_CONFIG_GLOBAL"])  # the sandbox's isolated global config
    config.write_text(f'[url "{repo}"]\n\tinsteadOf = {UNREACHABLE}\n')


def test_proxy_standin_gives_way_to_the_exact_source(sandbox: Sandbox) -> None:
    repo = _proxy_sandbox(sandbox)
    assert apply_upstream(sandbox.root, _up(sandbox), downloader=DOWNLOAD).proxy
    _use_mirror(sandbox, repo)
    outcome = apply_upstream(sandbox.root, _up(sandbox), downloader=_no_download)
    assert outcome.state == "applied" and not outcome.proxy, outcome.message
    assert "removed the proxy stand-in pkg==1.0" in outcome.message
    source = detect_source(sandbox.root, _up(sandbox))
    assert source.kind != STANDIN and source.pin == _up(sandbox).commit
    assert "c twenty" in (sandbox.root / "3rdparty/Up/src/pkg/c.py").read_text()


def test_proxy_standin_holding_work_is_kept(sandbox: Sandbox) -> None:
    repo = _proxy_sandbox(sandbox)
    apply_upstream(sandbox.root, _up(sandbox), downloader=DOWNLOAD)
    scratch = sandbox.root / "3rdparty/Up/notes.txt"
    scratch.write_text("mine\n")
    _use_mirror(sandbox, repo)
    with pytest.raises(PatchToolError, match=r"proxy stand-in .* holds work of yours"):
        apply_upstream(sandbox.root, _up(sandbox), downloader=_no_download)
    assert scratch.read_text() == "mine\n"


def test_export_check_refuses_to_judge_a_proxy(sandbox: Sandbox) -> None:
    """An export from a proxy would rewrite patches for the wrong base: not checked, said so."""
    _proxy_sandbox(sandbox)
    apply_upstream(sandbox.root, _up(sandbox), downloader=DOWNLOAD)
    cmd = [*TOOL, "--root", str(sandbox.root), "export", "--check"]
    strict = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert strict.returncode == 3, strict.stdout + strict.stderr
    assert "NOT export-checked" in strict.stdout and "PROXY" in strict.stdout
    lenient = subprocess.run([*cmd, "--allow-missing"], capture_output=True, text=True, check=False)
    assert lenient.returncode == 0, lenient.stdout + lenient.stderr
    patches = sorted((sandbox.root / "patches/Up").glob("*.patch"))
    assert len(patches) == 3  # nothing rewritten


def test_proxy_noop_stays_a_noop_when_the_url_answers_but_the_clone_fails(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    """Issue 18 defect 8: a URL that answers but cannot give the pin (a mirror lacking it, or
    lacking large blobs) must not make every apply remove the stand-in, re-clone and fail."""
    _proxy_sandbox(sandbox)
    apply_upstream(sandbox.root, _up(sandbox), downloader=DOWNLOAD)
    answers = tmp_path / "answers-without-pin"
    run(tmp_path, "init", "-q", str(answers))
    write(answers, {"README": "another history\n"})
    run(answers, "add", "README")
    run(answers, "commit", "-q", "-m", "unrelated")
    _use_mirror(sandbox, answers)
    first = apply_upstream(sandbox.root, _up(sandbox), downloader=DOWNLOAD)
    assert first.proxy  # the clone failed: still the proxy, said so
    checkout = sandbox.root / "3rdparty/Up"
    marker = checkout / ".git" / "kept-by-the-noop"
    marker.write_text("x\n")
    second = apply_upstream(sandbox.root, _up(sandbox), downloader=_no_download)
    assert second.proxy and "already applied" in second.message, second.message
    assert "removed the proxy stand-in" not in second.message
    assert marker.exists()  # the stand-in was not removed and rebuilt

"""lint: series/patch mismatches, trailers, tripwire names, path escapes, gitlink pins."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests.tools.sandbox import Sandbox, lines, run
from tools.patchtool.apply.apply import apply_upstream
from tools.patchtool.errors import PatchToolError
from tools.patchtool.lint.lint import lint_all
from tools.patchtool.model.manifest import load_manifest


def _lint(sandbox: Sandbox) -> list[str]:
    return [str(e) for e in lint_all(sandbox.root, load_manifest(sandbox.root))]


def _good(sandbox: Sandbox) -> tuple[Path, str, bytes]:
    repo, pin = sandbox.upstream("Up", {"a.py": lines(10)})
    patch = sandbox.make_patch(
        repo, pin, {"a.py": lines(10).replace("line 2\n", "line two\n")}, "Fix a"
    )
    sandbox.add("Up", str(repo), pin)
    return repo, pin, patch


def test_clean_series_passes(sandbox: Sandbox) -> None:
    _, _, patch = _good(sandbox)
    sandbox.set_series("Up", {"fix-a.patch": patch})
    sandbox.commit()
    assert _lint(sandbox) == []


def test_series_and_files_mismatch(sandbox: Sandbox) -> None:
    _, _, patch = _good(sandbox)
    folder = sandbox.root / "patches/Up"
    (folder / "fix-a.patch").write_bytes(patch)
    (folder / "stray.patch").write_bytes(patch)
    (folder / "upstreamed").mkdir()
    (folder / "upstreamed/retired.patch").write_bytes(patch)
    (folder / "series").write_text("fix-a.patch\n# comment\nfix-a.patch\nghost.patch\n")
    errors = _lint(sandbox)
    assert "patches/Up/series:3: fix-a.patch listed twice (first on line 1)" in errors
    assert "patches/Up/series:4: ghost.patch listed but the file does not exist" in errors
    assert any(
        e.startswith("patches/Up/stray.patch:1: not listed in patches/Up/series") for e in errors
    )
    assert not any("retired" in e for e in errors)


def test_trailers_tests_and_whitespace(sandbox: Sandbox) -> None:
    repo, pin = sandbox.upstream("Up", {"a.py": lines(10)})
    bad = "Upstream-Status: merged somewhere\nTest: tests/test_trip.py::test_missing\nTest: tests/nope.py::test_x\nKind: enhancement\n"
    patch = sandbox.make_patch(
        repo, pin, {"a.py": lines(10).replace("line 2\n", "line two  \n")}, "Fix", bad
    )
    sandbox.add("Up", str(repo), pin)
    sandbox.set_series("Up", {"fix.patch": patch})
    errors = _lint(sandbox)
    text = patch.decode().splitlines()
    status_line = text.index("Upstream-Status: merged somewhere") + 1
    ws_line = text.index("+line two  ") + 1
    assert any(
        e.startswith(f"patches/Up/fix.patch:{status_line}: Upstream-Status 'merged somewhere'")
        for e in errors
    )
    assert any("missing trailer `Origin:`" in e for e in errors)
    assert any("Test: no `def test_missing` in tests/test_trip.py" in e for e in errors)
    assert any("Test: tests/nope.py does not exist" in e for e in errors)
    assert any("Kind: 'enhancement': want feature | fix" in e for e in errors)
    assert f"patches/Up/fix.patch:{ws_line}: trailing whitespace on an added line of a.py" in errors


def test_class_test_node_is_found(sandbox: Sandbox) -> None:
    repo, pin = sandbox.upstream("Up", {"a.py": lines(10)})
    sandbox.add("Up", str(repo), pin)
    (sandbox.root / "tests/test_cls.py").write_text(
        "class TestX:\n    def test_y(self):\n        pass\n"
    )
    trailers = "Upstream-Status: submitted https://github.com/o/r/pull/1\nOrigin: here\nTest: tests/test_cls.py::TestX::test_y[p1]\n"
    patch = sandbox.make_patch(repo, pin, {"a.py": lines(11)}, "Add", trailers)
    sandbox.set_series("Up", {"add.patch": patch})
    assert _lint(sandbox) == []


@pytest.mark.parametrize("evil", ["../outside.py", "/etc/evil.py"])
def test_path_outside_upstream_refused_by_lint_and_apply(sandbox: Sandbox, evil: str) -> None:
    _, _, patch = _good(sandbox)
    text = patch.decode()
    prefix = "b/" if not evil.startswith("/") else ""
    forged = text.replace("+++ b/a.py", f"+++ {prefix}{evil}").replace(
        " b/a.py\n", f" b/{evil.lstrip('/')}\n", 1
    )
    sandbox.set_series("Up", {"evil.patch": forged.encode()})
    errors = _lint(sandbox)
    line = forged.splitlines().index(f"+++ {prefix}{evil}") + 1
    assert any(e.startswith(f"patches/Up/evil.patch:{line}: ") and evil in e for e in errors), (
        errors
    )
    checkout = sandbox.root / "3rdparty/Up"
    head = run(checkout, "rev-parse", "HEAD")
    with pytest.raises(PatchToolError, match=f"evil.patch:{line}: .*refusing to apply"):
        apply_upstream(sandbox.root, load_manifest(sandbox.root).upstreams["Up"])
    assert run(checkout, "rev-parse", "HEAD") == head
    assert not (sandbox.root / "3rdparty/outside.py").exists()


def test_symlink_escape_refused(sandbox: Sandbox, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    repo, pin = sandbox.upstream("Up", {"a.py": lines(3)})
    os.symlink(outside, repo / "link")
    run(repo, "add", "link")
    run(repo, "commit", "-q", "-m", "symlink")
    pin = run(repo, "rev-parse", "HEAD")
    patch = sandbox.make_patch(repo, pin, {"a.py": lines(4)}, "Fix a")
    forged = patch.decode().replace("a/a.py", "a/link/x.py").replace("b/a.py", "b/link/x.py")
    sandbox.add("Up", str(repo), pin)
    sandbox.set_series("Up", {"evil.patch": forged.encode()})
    errors = _lint(sandbox)
    assert any("goes through symlink link" in e for e in errors), errors
    with pytest.raises(PatchToolError, match="symlink link"):
        apply_upstream(sandbox.root, load_manifest(sandbox.root).upstreams["Up"])
    assert list(outside.iterdir()) == []


def test_gitlink_differing_from_manifest(sandbox: Sandbox) -> None:
    _, pin, patch = _good(sandbox)
    sandbox.set_series("Up", {"fix-a.patch": patch})
    sandbox.commit()
    checkout = sandbox.root / "3rdparty/Up"
    apply_upstream(sandbox.root, load_manifest(sandbox.root).upstreams["Up"])
    assert _lint(sandbox) == []  # a moved checkout alone is fine: nothing staged
    run(sandbox.root, "add", "3rdparty/Up")  # the accident lint must catch
    errors = _lint(sandbox)
    commit_line = (sandbox.root / "patches/upstreams.toml").read_text().splitlines().index(
        f'commit = "{pin}"'
    ) + 1
    assert any(
        e.startswith(f"patches/upstreams.toml:{commit_line}: staged gitlink 3rdparty/Up is")
        for e in errors
    )
    run(sandbox.root, "commit", "-q", "-m", "oops")
    assert any("committed gitlink 3rdparty/Up in HEAD is" in e for e in _lint(sandbox))
    assert run(checkout, "rev-parse", "HEAD") != pin


STANDIN = (
    '\n[Up.standin]\nkind = "wheel"\npackage = "up"\ntag_format = "v{version}"\n'
    'version = "@V@"\nproxy = @P@\n\n[Up.standin.paths]\n"pkg/" = "pkg/"\n'
)


@pytest.mark.parametrize(
    ("tag", "version", "proxy", "why"),
    [
        ("v2", "2", "true", 'v2 is release 2: want version = "2", proxy = false'),
        ("v2", "1", "false", 'v2 is release 2: want version = "2", proxy = false'),
        ("", "1", "false", "proxy = false says release 1 (tag v1) is the pin"),
        ("", "", "true", "standin.version is empty"),
    ],
)
def test_standin_fields_contradicting_the_pin(
    sandbox: Sandbox, tag: str, version: str, proxy: str, why: str
) -> None:
    """Issue 18 defect 2: lint passed stand-in fields that contradict the pin."""
    _good(sandbox)
    path = sandbox.root / "patches/upstreams.toml"
    text = path.read_text()
    text = re.sub(r'tag = "[^"]*"', f'tag = "{tag}"', text, count=1)
    path.write_text(text + STANDIN.replace("@V@", version).replace("@P@", proxy))
    errors = _lint(sandbox)
    assert any(e.startswith("patches/upstreams.toml:1: ") and why in e for e in errors), errors


def test_standin_fields_agreeing_with_the_pin_pass(sandbox: Sandbox) -> None:
    _good(sandbox)
    path = sandbox.root / "patches/upstreams.toml"
    text = re.sub(r'tag = "[^"]*"', 'tag = "v2"', path.read_text(), count=1)
    path.write_text(text + STANDIN.replace("@V@", "2").replace("@P@", "false"))
    assert _lint(sandbox) == []


SUITE = '[Up]\ntests_root = "tests/unit"\npackage = "pkg"\n'
BASE = "Upstream-Status: pending\nOrigin: tests\nTest: tests/test_trip.py::test_trip\n"


def test_upstream_test_must_be_a_test_the_patch_carries(sandbox: Sandbox) -> None:
    """With a suite layout for the upstream, every patch names its upstream-native test, in a
    file under the upstream's tests that the patch itself adds or changes."""
    repo, pin = sandbox.upstream("Up", {"pkg/a.py": lines(4), "tests/unit/test_old.py": ""})
    test = "def test_new():\n    pass\n"
    carried = sandbox.make_patch(
        repo,
        pin,
        {"pkg/a.py": lines(4, "x"), "tests/unit/test_new.py": test},
        "Fix with test",
        BASE + "Upstream-Test: tests/unit/test_new.py::test_new\n",
    )
    untested = sandbox.make_patch(repo, pin, {"pkg/a.py": lines(4, "y")}, "Fix without", BASE)
    elsewhere = sandbox.make_patch(
        repo,
        pin,
        {"pkg/a.py": lines(4, "z")},
        "Fix naming a test it does not carry",
        BASE + "Upstream-Test: tests/unit/test_old.py::test_old\nUpstream-Test: pkg/a.py::f\n",
    )
    sandbox.add("Up", str(repo), pin)
    (sandbox.root / "patches").mkdir(exist_ok=True)
    (sandbox.root / "patches/upstream-tests.toml").write_text(SUITE)
    sandbox.set_series(
        "Up", {"carried.patch": carried, "untested.patch": untested, "elsewhere.patch": elsewhere}
    )
    sandbox.commit()
    errors = _lint(sandbox)
    assert not any("carried.patch" in e for e in errors)
    assert any(
        e.startswith("patches/Up/untested.patch:") and "missing trailer `Upstream-Test:`" in e
        for e in errors
    )
    assert any(
        "elsewhere.patch" in e and "test_old.py is not a file this patch adds or changes" in e
        for e in errors
    )
    assert any(
        "elsewhere.patch" in e and "pkg/a.py is not under the upstream's tests/" in e
        for e in errors
    )


def test_depends_on_names_an_earlier_active_patch(sandbox: Sandbox) -> None:
    repo, pin = sandbox.upstream("Up", {"a.py": lines(10), "b.py": lines(10)})
    first = sandbox.make_patch(repo, pin, {"a.py": lines(10, "a")}, "First")
    needs = (
        BASE + "Depends-On: Up/first.patch\nDepends-On: Up/last.patch\n"
        "Depends-On: Nowhere/x.patch\nDepends-On: Up/ghost.patch\n"
    )
    second = sandbox.make_patch(repo, pin, {"b.py": lines(10, "b")}, "Second", needs)
    last = sandbox.make_patch(repo, pin, {"b.py": lines(10, "c")}, "Last")
    sandbox.add("Up", str(repo), pin)
    sandbox.set_series("Up", {"first.patch": first, "second.patch": second, "last.patch": last})
    sandbox.commit()
    errors = [e for e in _lint(sandbox) if "Depends-On" in e]
    assert not any("first.patch is not" in e for e in errors)
    assert any("last.patch is not earlier in patches/Up/series" in e for e in errors)
    assert any("'Nowhere/x.patch': want <Upstream>/<patch file>" in e for e in errors)
    assert any("ghost.patch is not earlier" in e for e in errors)
    assert len(errors) == 3


def test_pending_upstream_tests_are_listed_with_their_reason(sandbox: Sandbox) -> None:
    """A patch listed under `pending` may lack its upstream test; once it has one, lint asks
    for it to leave the list."""
    repo, pin = sandbox.upstream("Up", {"pkg/a.py": lines(4)})
    test = "def test_new():\n    pass\n"
    untested = sandbox.make_patch(repo, pin, {"pkg/a.py": lines(4, "y")}, "Fix without", BASE)
    tested = sandbox.make_patch(
        repo,
        pin,
        {"pkg/a.py": lines(4, "x"), "tests/unit/test_new.py": test},
        "Fix with test",
        BASE + "Upstream-Test: tests/unit/test_new.py::test_new\n",
    )
    sandbox.add("Up", str(repo), pin)
    (sandbox.root / "patches").mkdir(exist_ok=True)
    pending = '[Up.pending]\n"untested.patch" = "written next"\n"tested.patch" = "stale entry"\n'
    (sandbox.root / "patches/upstream-tests.toml").write_text(SUITE + pending)
    sandbox.set_series("Up", {"untested.patch": untested, "tested.patch": tested})
    sandbox.commit()
    errors = _lint(sandbox)
    assert not any("untested.patch" in e for e in errors)
    assert any(
        "tested.patch has its `Upstream-Test:` now: remove it from `pending`" in e for e in errors
    )

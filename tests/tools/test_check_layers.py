"""tools/check_layers.py: the repository meets the bar, and each breach kind is caught."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools import check_layers


def test_the_repository_meets_the_bar_and_the_diagram_is_current() -> None:
    assert check_layers.main([]) == 0


def _fake(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    files: dict[str, str],
    patch_copies: dict[str, str] | None = None,
) -> list[str]:
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    monkeypatch.setattr(check_layers, "ROOT", tmp_path)
    monkeypatch.setattr(check_layers, "PATCHTOOL", tmp_path / "tools/patchtool")
    monkeypatch.setattr(check_layers, "INTEGRATION", tmp_path / "integration/mcore_grpo")
    monkeypatch.setattr(check_layers, "PATCH_COPIES", patch_copies or {})
    report = check_layers.Report()
    check_layers.check_patchtool(report)
    check_layers.check_integration(report)
    return report.breaches


def test_an_import_up_the_layers_is_a_breach(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    breaches = _fake(
        tmp_path,
        monkeypatch,
        {
            "tools/patchtool/git/git.py": "def f() -> None:\n    from ..commands.apply import X\n",
            "tools/patchtool/commands/apply.py": "X = 1\n",
            "tools/patchtool/verify/tripwire.py": "from ..rebase.engine import Y\n",
            "tools/patchtool/rebase/engine.py": "Y = 1\n",
            "tools/patchtool/pr/patch_status.py": "from ..apply.export import Z\n",
            "tools/patchtool/apply/export.py": "from .apply import W\nZ = 1\n",
            "tools/patchtool/apply/apply.py": "from ..source.checkout import V\nW = 1\n",
            "tools/patchtool/source/checkout.py": "from ..errors import E\nV = 1\n",
            "tools/patchtool/errors.py": "E = 1\n",
        },
    )
    assert any("git/git.py:2: git module imports commands.apply" in b for b in breaches)
    assert any("verify/tripwire.py:1: domain module imports rebase.engine" in b for b in breaches)
    assert any("pr/patch_status.py:1: domain module imports apply.export" in b for b in breaches)
    assert len(breaches) == 3  # within a folder, and down to source/ and errors.py: fine


def test_sizes_and_a_layer_importing_one_above_it_are_breaches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    long_function = "def f() -> None:\n" + "    x = 1\n" * 61
    breaches = _fake(
        tmp_path,
        monkeypatch,
        {
            "tools/patchtool/model/series.py": long_function + "\n" * 400,
            "integration/mcore_grpo/worker/train_step.py": "from mcore_grpo.grpo.loss import L\n",
            "integration/mcore_grpo/grpo/tasks/t.py": "from mcore_grpo.nemo_rl_driver import s\n",
            "integration/mcore_grpo/config/c.py": "from mcore_grpo.worker import w\n",
            "integration/mcore_grpo/stray.py": "X = 1\n",
        },
    )
    assert any("model/series.py: 462 lines (max 450)" in b for b in breaches)
    assert any("model/series.py:1: f is 62 lines (max 60)" in b for b in breaches)
    for where, what in [
        ("worker/train_step.py:1: worker module", "mcore_grpo.grpo.loss.L (engine"),
        ("grpo/tasks/t.py:1: engine module", "mcore_grpo.nemo_rl_driver.s (driver"),
        ("config/c.py:1: config module", "mcore_grpo.worker.w (worker"),
    ]:
        assert any(where in b and what in b for b in breaches), (where, breaches)
    assert any("mcore_grpo.stray is in no layer" in b for b in breaches)


def test_a_long_function_in_integration_is_a_breach_but_in_a_patch_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 79: no function over 60 lines in integration/ either; a module that is a carried
    patch's file byte for byte is split in the patch, so its long functions are only listed."""
    long_method = "class C:\n    def f(self) -> None:\n" + "        x = 1\n" * 60
    files = {
        "integration/mcore_grpo/grpo/loop.py": long_method,
        "integration/mcore_grpo/worker/copy.py": long_method,
        "patches/Up/add-copy.patch": "",
    }
    copies = {"worker/copy.py": "patches/Up/add-copy.patch"}
    assert _fake(tmp_path, monkeypatch, files, copies) == [
        "integration/mcore_grpo/grpo/loop.py:2: f is 61 lines (max 60); split it"
    ]
    stale = {**copies, "worker/gone.py": "patches/Up/add-copy.patch"}
    assert _fake(tmp_path, monkeypatch, files, stale)[0] == (
        "tools/check_layers.py: PATCH_COPIES names worker/gone.py -> patches/Up/add-copy.patch, "
        "which is not there any more; remove the entry"
    )


def test_a_module_without_a_layer_is_a_breach(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = {
        "tools/patchtool/newpkg/thing.py": "X = 1\n",
        "tools/patchtool/model/series.py": "from ..newpkg.thing import X\n",
    }
    breaches = _fake(tmp_path, monkeypatch, files)
    assert breaches == [
        "tools/patchtool/newpkg/thing.py: no layer; add its folder to LAYERS in "
        "tools/check_layers.py"
    ]


def test_an_import_cycle_in_integration_is_a_breach_also_through_a_lazy_import(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 46: grpo/deadline.py <-> grpo/schema.py and models/matrix.py <-> models/page.py,
    each closed by an import inside a function."""
    breaches = _fake(
        tmp_path,
        monkeypatch,
        {
            "integration/mcore_grpo/grpo/deadline.py": "from mcore_grpo.grpo.schema import E\n",
            "integration/mcore_grpo/grpo/schema.py": (
                "class E(Exception): ...\n\n\ndef validate() -> None:\n"
                "    from mcore_grpo.grpo.deadline import parse\n"
            ),
            "integration/mcore_grpo/grpo/loop.py": "from mcore_grpo.grpo import deadline, schema\n",
        },
    )
    assert breaches == [
        "integration/mcore_grpo: import cycle grpo.deadline:1 -> grpo.schema:5 -> grpo.deadline "
        "(module:line of each import); move what both need to the module it belongs to"
    ]


def test_the_product_importing_test_support_is_a_breach(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """integration/upstream_pytest (the upstream suites' plugins) imports mcore_grpo; the
    reverse, even lazily, would put test support inside the product again."""
    breaches = _fake(
        tmp_path,
        monkeypatch,
        {
            "integration/mcore_grpo/worker/cpu.py": "X = 1\n",
            "integration/mcore_grpo/cli.py": (
                "def main() -> None:\n    import upstream_pytest.cpu\n"
            ),
            "integration/upstream_pytest/cpu.py": "from mcore_grpo.worker.cpu import X\n",
        },
    )
    assert breaches == [
        "integration/mcore_grpo/cli.py:2: the product imports upstream_pytest.cpu (test or "
        "docs support, ('upstream_pytest', 'model_matrix')); move what both need into "
        "mcore_grpo"
    ]

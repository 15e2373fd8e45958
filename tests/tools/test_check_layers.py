"""tools/check_layers.py: the repository meets the bar, and each breach kind is caught."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools import check_layers


def test_the_repository_meets_the_bar_and_the_diagram_is_current() -> None:
    assert check_layers.main([]) == 0


def _fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, files: dict[str, str]) -> list[str]:
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    monkeypatch.setattr(check_layers, "ROOT", tmp_path)
    monkeypatch.setattr(check_layers, "PATCHTOOL", tmp_path / "tools/patchtool")
    monkeypatch.setattr(check_layers, "INTEGRATION", tmp_path / "integration/mcore_grpo")
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
            "tools/patchtool/core/git.py": "def f() -> None:\n    from ..commands.apply import X\n",
            "tools/patchtool/commands/apply.py": "X = 1\n",
            "tools/patchtool/verify/tripwire.py": "from ..rebase.engine import Y\n",
            "tools/patchtool/rebase/engine.py": "Y = 1\n",
        },
    )
    assert any("core/git.py:2: git module imports commands.apply" in b for b in breaches)
    assert any("verify/tripwire.py:1: domain module imports rebase.engine" in b for b in breaches)


def test_sizes_and_the_worker_importing_grpo_are_breaches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    long_function = "def f() -> None:\n" + "    x = 1\n" * 61
    breaches = _fake(
        tmp_path,
        monkeypatch,
        {
            "tools/patchtool/core/series.py": long_function + "\n" * 400,
            "integration/mcore_grpo/worker/train_step.py": "from mcore_grpo.grpo.loss import L\n",
        },
    )
    assert any("core/series.py: 462 lines (max 450)" in b for b in breaches)
    assert any("core/series.py:1: f is 62 lines (max 60)" in b for b in breaches)
    assert any(
        "worker/train_step.py:1: the worker imports mcore_grpo.grpo.loss" in b for b in breaches
    )


def test_a_module_without_a_layer_is_a_breach(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    breaches = _fake(tmp_path, monkeypatch, {"tools/patchtool/newpkg/thing.py": "X = 1\n"})
    assert breaches == [
        "tools/patchtool/newpkg/thing.py: no layer; add it to LAYERS in tools/check_layers.py"
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

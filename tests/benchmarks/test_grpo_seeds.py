"""benchmarks/grpo_seeds.py: a TRL result becomes an entry with the preset's setting, and the
mean over seeds is taken only at grades every seed took (no model is loaded)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks import bench_trl, grpo_seeds


def _ours(seed: int, steps: list[int], minutes: list[float], accuracy: list[float]) -> dict:
    setting = {"lr": 5e-6, "reference_policy_kl_penalty": 0.01}
    return {"side": "ours", "run": f"s{seed}", "setting": setting, "seed": seed,
            "steps": steps, "minutes": minutes, "accuracy": accuracy}  # fmt: skip


def test_seed_means_use_the_grades_every_seed_took() -> None:
    entries = [
        _ours(42, [0, 6, 12], [0.0, 7.0, 14.0], [0.06, 0.70, 0.80]),
        _ours(43, [0, 6], [0.0, 8.0], [0.06, 0.60]),
        {**_ours(44, [0, 6], [0.0, 9.0], [0.06, 0.10]), "setting": {"lr": 5e-5}},  # other setting
    ]
    [mean] = grpo_seeds.seed_means(entries)
    assert mean["seeds"] == [42, 43]
    assert [r["step"] for r in mean["rows"]] == [0, 6]  # seed 43 has no grade at step 12
    assert mean["rows"][1] == {
        "step": 6, "minutes": 7.5, "accuracy": 0.65, "worst": 0.60, "worst_seed": 43,
    }  # fmt: skip


def test_the_seeds_panel_holds_only_our_runs_at_the_shipped_setting() -> None:
    shipped = {"lr": 5e-6, "reference_policy_kl_penalty": 0.01}
    seed = _ours(42, [0], [0.0], [0.06])
    sweep = {**_ours(42, [0], [0.0], [0.06]), "run": "lr2e-5", "setting": {**shipped, "lr": 2e-5}}
    trl = {**_ours(42, [0], [0.0], [0.06]), "side": "trl", "run": "trl"}  # TRL at the same values
    assert grpo_seeds.split_by_setting([seed, sweep, trl], shipped) == ([seed], [sweep, trl])


def test_a_candidate_setting_with_several_seeds_gets_its_mean_in_the_other_panel() -> None:
    shipped = {"lr": 5e-6, "reference_policy_kl_penalty": 0.01}
    candidate = {**shipped, "lr": 1e-5}
    seed = _ours(42, [0, 5], [0.0, 6.0], [0.06, 0.70])
    c42 = {**_ours(42, [0, 5], [0.0, 6.0], [0.06, 0.75]), "run": "c42", "setting": candidate}
    c43 = {**_ours(43, [0, 5], [0.0, 7.0], [0.06, 0.65]), "run": "c43", "setting": candidate}
    trl = {**c43, "side": "trl", "run": "trl"}  # TRL's runs never enter a mean
    (left, left_means), (right, right_means) = grpo_seeds.panels([seed, c42, c43, trl], shipped)
    assert (left, left_means) == ([seed], [])  # one seed of the shipped setting: no mean
    assert right == [c42, c43, trl]
    [mean] = right_means
    assert (mean["setting"], mean["seeds"]) == (candidate, [42, 43])
    assert mean["rows"][1]["accuracy"] == pytest.approx(0.70)


def test_one_seed_has_no_mean() -> None:
    assert grpo_seeds.seed_means([_ours(42, [0], [0.0], [0.06])]) == []


def _bench_trl_result(path: Path, sides: dict[str, Any], overrides: list[str]) -> Path:
    path.write_text(json.dumps({"minutes": 5.0, "overrides": overrides, "sides": sides}))
    return path


def test_trl_entry_carries_the_preset_setting_with_the_overrides(tmp_path: Path) -> None:
    trl = {
        "curve": [[0.0, 0.06], [300.0, 0.2], [615.0, 0.31]],
        "steps_run": 9,
        "rewards": [0.031, 0.2],
        "training_draws": {},
        "accuracy_by_operation": [{"+": 0.1}, {"+": 0.3}, {"+": 0.4}],
    }
    result = _bench_trl_result(
        tmp_path / "accuracy.json",
        {"trl": trl},
        ["grpo.seed=7", "loss_fn.reference_policy_kl_penalty=0.02"],
    )
    e = grpo_seeds.trl_entry(result, "trl-kl02", "note")
    assert (e["side"], e["run"], e["seed"], e["steps_run"]) == ("trl", "trl-kl02", 7, 9)
    assert e["minutes"] == [0.0, 5.0, 10.25]
    assert e["accuracy"] == [0.06, 0.2, 0.31]
    assert e["setting"]["reference_policy_kl_penalty"] == 0.02  # the override
    assert e["setting"]["lr"] == 5e-6  # the preset's
    assert e["by_operation"][2] == {"+": 0.4}


def test_a_result_without_trl_is_refused(tmp_path: Path) -> None:
    result = _bench_trl_result(tmp_path / "ours-only.json", {"ours": {}}, [])
    with pytest.raises(SystemExit, match="no TRL side"):
        grpo_seeds.trl_entry(result, "x", "")


def test_the_trl_setting_is_read_from_bench_trls_preset() -> None:
    assert grpo_seeds.PRESET == bench_trl.PRESET

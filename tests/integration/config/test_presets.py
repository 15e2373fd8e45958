"""The shipped presets: each loads, and each holds only what differs from the defaults.

A preset's line that restates what it would get anyway (the schema's default, or what its
``defaults:`` parent preset gives) reads as a choice and goes stale when the default moves,
so every leaf key a preset's own YAML sets must change the loaded config.
"""

from __future__ import annotations

import dataclasses
from importlib import resources
from typing import Any

import pytest
import yaml
from mcore_grpo.config.loader import PRESET_PACKAGE, load_config, preset_names
from mcore_grpo.config.nemo_rl_keys import REFUSED_NEMO_RL_KEYS
from mcore_grpo.config.schema import RunConfig


def _own_yaml(name: str) -> dict[str, Any]:
    """The preset's own YAML, its ``defaults:`` not resolved."""
    text = resources.files(PRESET_PACKAGE).joinpath(f"{name}.yaml").read_text()
    return yaml.safe_load(text) or {}


def _yaml_scalar(value: Any) -> str:
    return yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("\n...")


def restated_lines(
    own: dict[str, Any], loaded: Any, anyway: Any, what_anyway: str, prefix: str = ""
) -> list[str]:
    """``key: value`` of every leaf of `own` (a preset's YAML) whose value in `loaded` (the
    preset's config) equals its value in `anyway` (the config it gets without its own lines),
    i.e. lines that change nothing. Mappings are walked where the schema has a section."""
    found = []
    for key, value in own.items():
        if not prefix and key == "defaults":
            continue
        dotted = f"{prefix}{key}"
        if dotted in REFUSED_NEMO_RL_KEYS:  # Accepted at NeMo-RL's default, then dropped.
            found.append(f"{dotted}: {_yaml_scalar(value)} is dropped by the loader")
            continue
        # A key the schema lacks: the loader refuses it (test_every_preset_loads).
        assert hasattr(loaded, key), f"{dotted} is not a schema key"
        got, base = getattr(loaded, key), getattr(anyway, key)
        if isinstance(value, dict) and dataclasses.is_dataclass(got):
            found += restated_lines(value, got, base, what_anyway, f"{dotted}.")
        elif got == base and type(got) is type(base):
            found.append(f"{dotted}: {_yaml_scalar(value)} is {what_anyway}")
    return found


@pytest.mark.parametrize("name", preset_names())
def test_every_preset_loads(name: str) -> None:
    assert isinstance(load_config(name), RunConfig)


@pytest.mark.parametrize("name", preset_names())
def test_preset_holds_only_what_differs_from_its_defaults(name: str) -> None:
    own = _own_yaml(name)
    parent = own.get("defaults")
    if parent is None:
        anyway, what_anyway = RunConfig(), "the default"
    else:
        anyway, what_anyway = load_config(parent), f"what {parent} gives"
    restated = restated_lines(own, load_config(name), anyway, what_anyway)
    assert not restated, "\n".join(f"{name}.yaml: {line}; drop the line" for line in restated)


def test_restated_lines_sees_spellings_of_the_same_value() -> None:
    """The check compares loaded values: ``1.0e-3`` is the default ``1e-3``, an int in a float
    key is that float, a list is compared as a list, and a changed value is not reported."""
    own = {
        "grpo": {"seed": 42, "max_num_steps": 7},
        "policy": {"megatron_cfg": {"optimizer": {"lr": 1.0e-3, "weight_decay": 0}}},
        "task": {"arithmetic": {"operations": ["+", "*"]}},
    }
    overrides = [
        "grpo.max_num_steps=7",
        "policy.megatron_cfg.optimizer.weight_decay=0",
    ]
    restated = restated_lines(own, load_config(None, overrides=overrides), RunConfig(), "x")
    assert restated == [
        "grpo.seed: 42 is x",
        "policy.megatron_cfg.optimizer.lr: 0.001 is x",
        "policy.megatron_cfg.optimizer.weight_decay: 0 is x",
        "task.arithmetic.operations: [+, '*'] is x",
    ]

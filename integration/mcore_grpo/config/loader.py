"""The GRPO run config: YAML presets/files plus NeMo-RL style ``key=value`` overrides.

The schema is the dataclass tree of `mcore_grpo.config.schema` (NeMo-RL's key names); a key
that is not in it is an error naming the key and the closest valid one. A YAML file may start
with ``defaults: <preset name or path>`` (as NeMo-RL's configs do) to inherit another file.
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from mcore_grpo.config.nemo_rl_keys import INTERPOLATED_DEFAULTS, check_refused_key
from mcore_grpo.config.schema import ConfigError, RunConfig
from mcore_grpo.config.validation import validate

PRESET_PACKAGE = "mcore_grpo.presets"
DEFAULT_PRESET = "cpu-tiny"


def _is_dataclass_type(tp: Any) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def valid_keys(cls: type = RunConfig, prefix: str = "") -> list[str]:
    """Every dotted leaf key of the schema (``grpo.max_num_steps``, ...)."""
    keys: list[str] = []
    for name, tp in _hints(cls).items():
        if _is_dataclass_type(tp):
            keys.extend(valid_keys(tp, f"{prefix}{name}."))
        else:
            keys.append(f"{prefix}{name}")
    return keys


def _words(key: str) -> set[str]:
    """The words of a key's last component: `max_num_steps` -> {max, num, steps}."""
    return set(key.rsplit(".", 1)[-1].lower().split("_")) - {""}


def _unknown_key_error(key: str, where: str) -> ConfigError:
    """The error for a key the schema lacks, with the closest valid key that shares a word
    with it (a spelling slip), or no suggestion: a similar-looking key about something else
    (`grpo.no_such_key` -> `grpo.val_batch_size`) misleads more than none."""
    words = _words(key)
    candidates = [c for c in valid_keys() if _words(c) & words]
    close = difflib.get_close_matches(key, candidates, n=1, cutoff=0.5)
    if not close:  # Try the last component alone: `grpo.max_steps` vs `max_num_steps`.
        leaf = key.rsplit(".", 1)[-1]
        by_leaf = {c.rsplit(".", 1)[-1]: c for c in candidates}
        leaf_match = difflib.get_close_matches(leaf, list(by_leaf), n=1, cutoff=0.6)
        close = [by_leaf[leaf_match[0]]] if leaf_match else []
    hint = f"; did you mean '{close[0]}'?" if close else ""
    return ConfigError(f"unknown config key '{key}' ({where}){hint}")


def _coerce(value: Any, tp: Any, key: str, where: str) -> Any:
    """Check/convert a YAML scalar to the schema type (ints widen to floats, "1e-3" parses)."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, key, where)
            except ConfigError as err:
                errors.append(str(err))
        raise ConfigError(errors[0] if errors else f"'{key}' ({where}) has an invalid value")
    if origin is list:
        if not isinstance(value, list):
            raise ConfigError(f"'{key}' ({where}) must be a list, got {value!r}")
        (item_tp,) = typing.get_args(tp)
        return [_coerce(v, item_tp, key, where) for v in value]
    if tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)  # PyYAML reads "1e-3" (no dot) as a string.
            except ValueError:
                pass
    elif tp is str:
        if isinstance(value, str):
            return value
    else:
        raise TypeError(f"config schema type {tp!r} of '{key}' is not supported")
    raise ConfigError(f"'{key}' ({where}) must be {tp.__name__}, got {value!r}")


def _merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def preset_names() -> list[str]:
    """Names of the YAML presets shipped in the package."""
    files = resources.files(PRESET_PACKAGE).iterdir()
    return sorted(f.name.removesuffix(".yaml") for f in files if f.name.endswith(".yaml"))


def _read_yaml(text: str, where: str) -> dict[str, Any]:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ConfigError(f"{where}: not valid YAML: {err}") from err
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: the top level must be a mapping of sections")
    return data


def load_preset_dict(name: str, _seen: tuple[str, ...] = ()) -> dict[str, Any]:
    """The raw nested dict of a preset (its ``defaults`` chain resolved)."""
    if name not in preset_names():
        close = difflib.get_close_matches(name, preset_names(), n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        raise ConfigError(f"unknown preset '{name}' (known: {', '.join(preset_names())}){hint}")
    text = resources.files(PRESET_PACKAGE).joinpath(f"{name}.yaml").read_text()
    return _resolve_defaults(_read_yaml(text, f"preset {name}"), None, (*_seen, name))


def load_yaml_dict(path: Path, _seen: tuple[str, ...] = ()) -> dict[str, Any]:
    """The raw nested dict of a YAML file (its ``defaults`` chain resolved)."""
    try:
        text = path.read_text()
    except OSError as err:
        raise ConfigError(f"--config {path}: cannot read it ({err.strerror})") from err
    return _resolve_defaults(_read_yaml(text, str(path)), path.parent, (*_seen, str(path)))


def _resolve_defaults(
    data: dict[str, Any], base_dir: Path | None, seen: tuple[str, ...]
) -> dict[str, Any]:
    parent = data.pop("defaults", None)
    if parent is None:
        return data
    if not isinstance(parent, str):
        raise ConfigError(f"{seen[-1]}: 'defaults' must name one preset or YAML file")
    if parent in seen:
        raise ConfigError(f"{seen[-1]}: 'defaults' cycle: {' -> '.join((*seen, parent))}")
    if parent.endswith((".yaml", ".yml")):
        parent_path = Path(parent) if base_dir is None else base_dir / parent
        base = load_yaml_dict(parent_path, seen)
    else:
        base = load_preset_dict(parent, seen)
    return _merge(base, data)


def parse_override(text: str) -> tuple[str, Any]:
    """``a.b.c=value`` -> (``a.b.c``, YAML-typed value), as NeMo-RL users type overrides."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"override {text!r} is not key=value (e.g. grpo.max_num_steps=20)")
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError as err:
        raise ConfigError(f"override {text!r}: the value is not valid YAML ({err})") from err
    return key, value


def _set_dotted(data: dict[str, Any], key: str, value: Any) -> None:
    node = data
    parts = key.split(".")
    for part in parts[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = {}
            node[part] = child
        node = child
    node[parts[-1]] = value


def _build(cls: type, data: dict[str, Any], prefix: str, where: str) -> Any:
    hints = _hints(cls)
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        if check_refused_key(dotted, value, where):
            continue
        if INTERPOLATED_DEFAULTS.get(dotted) == value:
            value = None  # NeMo-RL's `${grpo.<same key>}`: follow the grpo.* value.
        if key not in hints:
            raise _unknown_key_error(dotted, where)
        tp = hints[key]
        if _is_dataclass_type(tp):
            if not isinstance(value, dict):
                raise ConfigError(f"'{dotted}' ({where}) is a section; give it a mapping")
            kwargs[key] = _build(tp, value, f"{dotted}.", where)
        else:
            kwargs[key] = _coerce(value, tp, dotted, where)
    try:
        return cls(**kwargs)
    except ValueError as err:  # __post_init__ checks, e.g. loss_fn.*.
        raise ConfigError(f"{where}: {err}") from err


def load_config(
    preset: str | None = DEFAULT_PRESET,
    config_file: Path | None = None,
    overrides: list[str] | tuple[str, ...] = (),
) -> RunConfig:
    """Preset, then `config_file` over it, then each ``key=value`` override; validated."""
    data: dict[str, Any] = {}
    where = "defaults"
    if preset is not None:
        data = load_preset_dict(preset)
        where = f"preset {preset}"
    if config_file is not None:
        data = _merge(data, load_yaml_dict(config_file))
        where = f"{where} + {config_file}"
    _build(RunConfig, data, "", where)  # Report file errors before override errors.
    for text in overrides:
        key, value = parse_override(text)
        if check_refused_key(key, value, f"override {text!r}"):
            continue
        if key not in valid_keys():
            if any(k.startswith(f"{key}.") for k in valid_keys()):
                raise ConfigError(
                    f"override {text!r}: '{key}' is a section; set one of its keys "
                    f"(e.g. {next(k for k in valid_keys() if k.startswith(f'{key}.'))}=...)"
                )
            raise _unknown_key_error(key, f"override {text!r}")
        _set_dotted(data, key, value)
    config = _build(RunConfig, data, "", f"{where} + overrides" if overrides else where)
    validate(config)
    return config


def dump_yaml(config: RunConfig) -> str:
    """The resolved config as YAML (written next to the run's metrics)."""
    return yaml.safe_dump(config.to_dict(), sort_keys=False)

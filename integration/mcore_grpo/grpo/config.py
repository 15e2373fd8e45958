"""The GRPO run config: YAML presets/files plus NeMo-RL style ``key=value`` overrides.

Keys follow NeMo-RL's names where NeMo-RL has them (``grpo.num_prompts_per_step``,
``policy.train_global_batch_size``, ``policy.megatron_cfg.tensor_model_parallel_size``, ...),
so a NeMo-RL user types the same overrides. The schema is the dataclass tree below; a key
that is not in it is an error naming the key and the closest valid one. A YAML file may start
with ``defaults: <preset name or path>`` (as NeMo-RL's configs do) to inherit another file.
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from mcore_grpo.grpo.loss import ClippedPGLossConfig

PRESET_PACKAGE = "mcore_grpo.presets"
DEFAULT_PRESET = "cpu-tiny"


class ConfigError(ValueError):
    """A run config that cannot be used; the message names the key and the fix."""


@dataclass
class GRPOSection:
    """``grpo.*``: the algorithm's batch shape and advantage settings."""

    num_prompts_per_step: int = 8
    num_generations_per_prompt: int = 8
    max_num_steps: int = 40
    normalize_rewards: bool = True
    use_leave_one_out_baseline: bool = True
    seed: int = 42


@dataclass
class MCoreGenerationSection:
    """``policy.generation.mcore_generation_config.*``: megatron-core inference engine (GPU)."""

    unified_memory_level: int = 0
    kv_cache_management_mode: str = "persist"
    reset_cuda_graphs: bool = False
    cuda_graph_impl: str = "none"
    buffer_size_gb: float = 10.0


@dataclass
class GenerationSection:
    """``policy.generation.*``: sampling."""

    backend: str = "megatron"
    max_new_tokens: int = 2
    temperature: float = 1.0
    top_p: float = 1.0
    # None: the task's end-of-sequence token.
    stop_token_ids: list[int] | None = None
    mcore_generation_config: MCoreGenerationSection = field(default_factory=MCoreGenerationSection)


@dataclass
class OptimizerSection:
    """``policy.megatron_cfg.optimizer.*`` (megatron-core Adam)."""

    optimizer: str = "adam"
    lr: float = 1.0e-3
    weight_decay: float = 0.0
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_eps: float = 1.0e-8
    use_distributed_optimizer: bool = True


@dataclass
class DDPSection:
    """``policy.megatron_cfg.distributed_data_parallel_config.*``."""

    overlap_grad_reduce: bool = False
    overlap_param_gather: bool = False
    grad_reduce_in_fp32: bool = True


@dataclass
class MegatronSection:
    """``policy.megatron_cfg.*``: parallelism and the training-side megatron settings."""

    tensor_model_parallel_size: int = 1
    pipeline_model_parallel_size: int = 1
    context_parallel_size: int = 1
    expert_model_parallel_size: int = 1
    expert_tensor_parallel_size: int = 1
    sequence_parallel: bool = False
    optimizer: OptimizerSection = field(default_factory=OptimizerSection)
    distributed_data_parallel_config: DDPSection = field(default_factory=DDPSection)


@dataclass
class TinyModelSection:
    """``policy.tiny_model.*``: the GPT built from scratch when ``model_name: tiny-gpt``."""

    num_layers: int = 2
    hidden_size: int = 64
    num_attention_heads: int = 4
    ffn_hidden_size: int = 128


@dataclass
class PolicySection:
    """``policy.*``: the model, its batch sizes and where it runs."""

    model_name: str = "tiny-gpt"
    device: str = "cpu"
    precision: str = "float32"
    train_global_batch_size: int = 64
    train_micro_batch_size: int = 16
    logprob_batch_size: int = 16
    max_total_sequence_length: int = 16
    max_grad_norm: float = 1.0
    tiny_model: TinyModelSection = field(default_factory=TinyModelSection)
    generation: GenerationSection = field(default_factory=GenerationSection)
    megatron_cfg: MegatronSection = field(default_factory=MegatronSection)


@dataclass
class TaskSection:
    """``task.*``: the verifiable task (see `mcore_grpo.grpo.task`)."""

    name: str = "digit-add"
    max_addend: int = 1


@dataclass
class ClusterSection:
    """``cluster.*``: what a GPU preset needs (documentation and a check, not a scheduler)."""

    gpus_per_node: int = 0
    num_nodes: int = 1


@dataclass
class CheckpointingSection:
    """``checkpointing.*``: a checkpoint is written at the end of the run (and every N steps)."""

    enabled: bool = True
    save_period: int = 0


@dataclass
class RunConfig:
    """The whole run config."""

    grpo: GRPOSection = field(default_factory=GRPOSection)
    loss_fn: ClippedPGLossConfig = field(default_factory=ClippedPGLossConfig)
    policy: PolicySection = field(default_factory=PolicySection)
    task: TaskSection = field(default_factory=TaskSection)
    cluster: ClusterSection = field(default_factory=ClusterSection)
    checkpointing: CheckpointingSection = field(default_factory=CheckpointingSection)

    @property
    def samples_per_step(self) -> int:
        """Sequences generated (and trained on) per GRPO step."""
        return self.grpo.num_prompts_per_step * self.grpo.num_generations_per_prompt

    def to_dict(self) -> dict[str, Any]:
        """Plain nested dict (for YAML dumps, checkpoints and logs)."""
        return dataclasses.asdict(self)


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


def _unknown_key_error(key: str, where: str) -> ConfigError:
    candidates = valid_keys()
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


def validate(config: RunConfig) -> None:
    """Cross-field checks, each naming the keys to change."""
    g, p = config.grpo, config.policy
    for key, value in (
        ("grpo.num_prompts_per_step", g.num_prompts_per_step),
        ("grpo.num_generations_per_prompt", g.num_generations_per_prompt),
        ("grpo.max_num_steps", g.max_num_steps),
        ("policy.train_global_batch_size", p.train_global_batch_size),
        ("policy.train_micro_batch_size", p.train_micro_batch_size),
        ("policy.logprob_batch_size", p.logprob_batch_size),
        ("policy.generation.max_new_tokens", p.generation.max_new_tokens),
    ):
        if value < 1:
            raise ConfigError(f"{key}={value}: must be >= 1")
    if g.num_generations_per_prompt < 2:
        raise ConfigError(
            "grpo.num_generations_per_prompt must be >= 2: GRPO's advantage compares the "
            "samples of one prompt"
        )
    if config.samples_per_step % p.train_global_batch_size:
        raise ConfigError(
            f"grpo.num_prompts_per_step * grpo.num_generations_per_prompt = "
            f"{config.samples_per_step} samples per step is not a multiple of "
            f"policy.train_global_batch_size={p.train_global_batch_size}"
        )
    if p.device not in ("cpu", "cuda"):
        raise ConfigError(f"policy.device={p.device!r}: use 'cpu' or 'cuda'")
    if not 0 < p.generation.top_p <= 1:
        raise ConfigError(f"policy.generation.top_p={p.generation.top_p}: must be in (0, 1]")
    if p.generation.temperature <= 0:
        raise ConfigError(f"policy.generation.temperature={p.generation.temperature}: must be > 0")


def check_data_parallel(config: RunConfig, world_size: int) -> int:
    """Data-parallel size for `world_size` workers; errors name the keys to change."""
    mc = config.policy.megatron_cfg
    model_parallel = mc.tensor_model_parallel_size * mc.pipeline_model_parallel_size
    if world_size % model_parallel:
        raise ConfigError(
            f"--workers {world_size} is not a multiple of policy.megatron_cfg."
            f"tensor_model_parallel_size * pipeline_model_parallel_size = {model_parallel}"
        )
    dp = world_size // model_parallel
    per_rank = config.policy.train_global_batch_size / dp
    if per_rank != int(per_rank) or int(per_rank) % config.policy.train_micro_batch_size:
        raise ConfigError(
            f"policy.train_global_batch_size={config.policy.train_global_batch_size} must "
            f"split into data-parallel size {dp} x whole microbatches of "
            f"policy.train_micro_batch_size={config.policy.train_micro_batch_size}"
        )
    if config.samples_per_step % dp:
        raise ConfigError(
            f"{config.samples_per_step} samples per step do not split evenly over "
            f"data-parallel size {dp}"
        )
    return dp


def dump_yaml(config: RunConfig) -> str:
    """The resolved config as YAML (written next to the run's metrics)."""
    return yaml.safe_dump(config.to_dict(), sort_keys=False)

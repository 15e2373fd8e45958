"""`mcore-grpo --dry-run`: is a preset's parallel layout valid, and what does each GPU hold?

Answered on a CPU machine before any GPU is rented: no weights are downloaded, no process
group beyond a world of one starts, nothing trains. The model's shape comes from its Hugging
Face config (a local checkpoint, the local HF cache, or the copy shipped here for the GPU
presets' models: `presets/hf_configs/`); its parameters are counted by megatron-core itself on
the meta device (`worker.model_shape`); the layout is checked against the cluster the preset
names; the per-GPU memory is that count split as megatron-core shards it.

The estimate covers what is resident through training (weights, gradient buffer, optimizer
state), not activations, the KV cache, CUDA graphs or communication buffers.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from mcore_grpo.config.schema import ConfigError, RunConfig, check_data_parallel
from mcore_grpo.config.task import MATH_TASKS
from mcore_grpo.grpo.policy_model.hf_model import TINY_HF_PREFIX, is_hf_model
from mcore_grpo.grpo.ranks.messages import TaskTokens
from mcore_grpo.grpo.ranks.worker_settings import worker_config
from mcore_grpo.grpo.tasks.task import build_task
from mcore_grpo.worker.model_shape import ParameterCount

SHIPPED_CONFIGS = "hf_configs"  # under the presets package: `<org>--<name>.json`
GIB = 1024**3


@dataclass(frozen=True)
class Layout:
    """The process grid: dense weights over TP x PP x CP (DP the rest), experts over EP x ETP."""

    world: int
    tp: int
    pp: int
    cp: int
    ep: int
    etp: int
    dp: int
    expert_dp: int
    sequence_parallel: bool


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes one GPU holds through training, by kind."""

    params: int
    weights: int
    grads: int
    optimizer: int

    @property
    def total(self) -> int:
        """Weights + gradients + optimizer state."""
        return self.weights + self.grads + self.optimizer


@dataclass(frozen=True)
class DryRun:
    """What `--dry-run` found; `render` prints it, `as_json` serialises it."""

    preset: str
    model: str
    config_source: str
    count: ParameterCount
    layout: Layout
    memory: MemoryEstimate
    precision: str


def resolve_world(config: RunConfig, workers: int | None) -> int:
    """GPUs (ranks) of the run: `--workers`, else the preset's cluster for a GPU preset."""
    if workers is not None:
        return workers
    c = config.cluster
    return c.num_nodes * c.gpus_per_node if config.policy.device == "cuda" else 1


def num_experts(hf: dict[str, Any] | None) -> int:
    """Routed experts per MoE layer of an HF config (0 for a dense model)."""
    if not hf:
        return 0
    for key in ("num_experts", "num_local_experts", "n_routed_experts"):
        if isinstance(hf.get(key), int):
            return hf[key]
    return 0


def check_layout(config: RunConfig, world: int, hf: dict[str, Any] | None = None) -> Layout:
    """The run's layout on `world` ranks, or a one-line `ConfigError` naming the key to change.
    `hf` (the model's config.json) adds the checks that need the model: heads, experts."""
    mc = config.policy.megatron_cfg
    tp, pp, cp = (
        mc.tensor_model_parallel_size,
        mc.pipeline_model_parallel_size,
        mc.context_parallel_size,
    )
    ep, etp = mc.expert_model_parallel_size, mc.expert_tensor_parallel_size
    key = "policy.megatron_cfg"
    if world % (tp * pp * cp):
        raise ConfigError(
            f"{key}.tensor_model_parallel_size x pipeline_model_parallel_size x "
            f"context_parallel_size = {tp} x {pp} x {cp} = {tp * pp * cp} does not divide the "
            f"{world} GPUs of the run (--workers, or cluster.num_nodes x cluster.gpus_per_node)"
        )
    if world % (ep * etp * pp):
        raise ConfigError(
            f"{key}.expert_model_parallel_size x expert_tensor_parallel_size x "
            f"pipeline_model_parallel_size = {ep} x {etp} x {pp} = {ep * etp * pp} does not "
            f"divide the {world} GPUs of the run; lower expert_model_parallel_size"
        )
    tiny = not is_hf_model(config.policy.model_name)
    experts = config.policy.tiny_model.num_moe_experts if tiny else num_experts(hf)
    if (tiny or hf is not None) and ep > 1 and not experts:
        raise ConfigError(
            f"{key}.expert_model_parallel_size={ep} needs a mixture-of-experts model; "
            f"{config.policy.model_name} is dense: set it to 1"
        )
    if experts % ep:
        fits = [
            d for d in range(1, experts + 1) if experts % d == 0 and world % (d * etp * pp) == 0
        ]
        raise ConfigError(
            f"{key}.expert_model_parallel_size={ep} does not divide the model's {experts} "
            f"experts; set it to one of {fits}"
        )
    if hf is not None:
        _check_model_fits(config.policy.model_name, hf, tp, pp)
    dp = check_data_parallel(config, world)
    return Layout(world, tp, pp, cp, ep, etp, dp, world // (ep * etp * pp), mc.sequence_parallel)


def _check_model_fits(model_name: str, hf: dict[str, Any], tp: int, pp: int) -> None:
    from mcore_grpo.worker.config import ParallelConfig
    from mcore_grpo.worker.hf_checkpoint import check_parallel_layout

    try:
        check_parallel_layout(model_name, hf, ParallelConfig(tensor_model_parallel_size=tp))
    except ValueError as err:
        raise ConfigError(str(err)) from err
    layers = hf.get("num_hidden_layers")
    if isinstance(layers, int) and layers % pp:
        raise ConfigError(
            f"policy.megatron_cfg.pipeline_model_parallel_size={pp} does not divide the "
            f"model's {layers} layers"
        )


def hf_config(model_name: str) -> tuple[Any, str]:
    """The `transformers` config of `model_name` and where it came from; never downloads."""
    from transformers import AutoConfig

    if model_name.startswith(TINY_HF_PREFIX):
        from mcore_grpo.worker.tiny_hf_checkpoint import tiny_config

        arch = model_name.removeprefix(TINY_HF_PREFIX)
        return tiny_config(arch), "built in (mcore_grpo.worker.tiny_hf_checkpoint)"  # type: ignore[arg-type]
    if Path(model_name).exists():
        return AutoConfig.from_pretrained(model_name), f"{model_name}/config.json"
    try:
        return AutoConfig.from_pretrained(model_name, local_files_only=True), "the local HF cache"
    except (OSError, ValueError):
        pass
    shipped = (
        resources.files("mcore_grpo.presets")
        / SHIPPED_CONFIGS
        / f"{model_name.replace('/', '--')}.json"
    )
    if not shipped.is_file():
        raise ConfigError(
            f"policy.model_name={model_name}: its config.json is neither a local path nor in "
            "the local Hugging Face cache, and mcore-grpo ships no copy of it; fetch it first "
            f"(`hf download {model_name} config.json`) or point model_name at a local checkpoint"
        )
    data = json.loads(shipped.read_text())
    config = AutoConfig.for_model(data.pop("model_type"), **data)
    return config, f"shipped with mcore-grpo (presets/{SHIPPED_CONFIGS}/{shipped.name})"


def estimate_memory(count: ParameterCount, layout: Layout, config: RunConfig) -> MemoryEstimate:
    """Weights, gradient buffer and Adam state per GPU, as megatron-core's DDP and (distributed)
    optimizer hold them: bf16 keeps fp32 main params beside Adam's two moments (12 B/param),
    fp32 only the moments (8 B); the distributed optimizer shards them over the DP group."""
    dense, expert = count.per_rank(layout.tp, layout.ep, layout.etp, layout.pp)
    mc = config.policy.megatron_cfg
    bf16 = config.policy.precision == "bfloat16"
    fp32_grads = mc.distributed_data_parallel_config.grad_reduce_in_fp32 or not bf16
    state = 12 if bf16 else 8
    dense_state, expert_state = dense * state, expert * state
    if mc.optimizer.use_distributed_optimizer:
        dense_state //= layout.dp
        expert_state //= layout.expert_dp
    params = dense + expert
    return MemoryEstimate(
        params=params,
        weights=params * (2 if bf16 else 4),
        grads=params * (4 if fp32_grads else 2),
        optimizer=dense_state + expert_state,
    )


def dry_run(config: RunConfig, preset: str, workers: int | None) -> DryRun:
    """Check `config`'s layout and count its model, without weights or training."""
    from mcore_grpo.worker.model_shape import hf_parameter_count, tiny_parameter_count

    world = resolve_world(config, workers)
    name = config.policy.model_name
    hf, source = hf_config(name) if is_hf_model(name) else (None, "policy.tiny_model")
    if config.task.name in MATH_TASKS and hf is not None:
        # A math task speaks the checkpoint's own vocabulary; pad/eos ids count nothing here.
        tokens = TaskTokens(vocab_size=hf.vocab_size, pad_id=0, eos_id=0)
    else:
        tokens = TaskTokens.of(
            build_task(config.task.name, config.task.max_addend, config.task.num_terms)
        )
    worker = worker_config(config, tokens)
    if hf is not None:
        layout = check_layout(config, world, hf.to_dict())
        count = hf_parameter_count(hf)
    else:
        layout = check_layout(config, world)
        count = tiny_parameter_count(worker)
    try:
        worker.validate()
    except (ValueError, NotImplementedError) as err:
        raise ConfigError(str(err)) from err
    memory = estimate_memory(count, layout, config)
    return DryRun(preset, name, source, count, layout, memory, config.policy.precision)


def render(run: DryRun) -> str:
    """The dry run's findings, for a person."""
    c, lay, m = run.count, run.layout, run.memory
    dense_total = c.tp_sharded + c.replicated
    dense, expert = c.per_rank(lay.tp, lay.ep, lay.etp, lay.pp)
    gib = lambda n: f"{n / GIB:.1f} GiB"  # noqa: E731
    lines = [
        f"mcore-grpo --dry-run: preset {run.preset} (no weights loaded, nothing trained)",
        f"  model       {run.model} (config: {run.config_source})",
        f"  parameters  {c.total:,} counted by megatron-core (meta build): dense "
        f"{dense_total:,}, routed experts {c.expert:,}",
        f"  layout      {lay.world} GPU(s): TP {lay.tp} x PP {lay.pp} x CP {lay.cp} -> DP "
        f"{lay.dp}; "
        + (f"EP {lay.ep} x ETP {lay.etp} -> expert DP {lay.expert_dp}; " if c.expert else "")
        + f"sequence parallel {'on' if lay.sequence_parallel else 'off'}",
        f"  per GPU     {m.params:,} parameters (dense {dense:,}, experts {expert:,})",
        f"              weights {gib(m.weights)} ({run.precision}) + grads {gib(m.grads)} + "
        f"optimizer {gib(m.optimizer)} = {gib(m.total)}",
        "              not counted: activations, the KV cache, CUDA graphs, NCCL buffers",
        "  layout valid",
    ]
    return "\n".join(lines)


def as_json(run: DryRun) -> str:
    """The dry run's findings, for a program."""
    data = dataclasses.asdict(run)
    data["count"]["total"] = run.count.total
    data["memory"]["total"] = run.memory.total
    return json.dumps(data, indent=2, sort_keys=True)

"""Build the policy: megatron-core GPTModel [-> Float16Module] -> DDP -> megatron optimizer.

One path on every device: bf16 is megatron-core's own mixed precision (`Float16Module` casts
inputs to bf16 and the logits back to fp32; `get_megatron_optimizer(bf16=True)` keeps fp32
main params), the Transformer Engine layer spec where TE is installed and the local spec
otherwise (logged). On a CUDA-less machine `mcore_grpo.worker.cpu` redirects megatron-core's
CUDA calls; nothing here branches on the device beyond where the weights are initialised.
"""

from __future__ import annotations

import importlib.util
import logging
from dataclasses import dataclass
from typing import Any

import torch

from mcore_grpo.worker.config import WorkerConfig
from mcore_grpo.worker.lr_schedule import build_scheduler

log = logging.getLogger(__name__)


def mcore_version() -> tuple[int, int]:
    """(major, minor) of the installed megatron-core, for explicit version guards."""
    from megatron.core import package_info

    return int(package_info.MAJOR), int(package_info.MINOR)


@dataclass
class PolicyModel:
    """The three objects every piece works on. `ddp.module` is the GPTModel, or in bf16 the
    `Float16Module` around it."""

    transformer_config: Any
    ddp: Any
    optimizer: Any
    layer_spec: str = "local"
    # megatron-core's OptimizerParamScheduler, or None (`mcore_grpo.worker.lr_schedule`).
    scheduler: Any = None
    # Whether the logprob and training forwards use shared-prefix rows (`shared_prefix.resolve`).
    shared_prefix: bool = False

    @property
    def gpt(self) -> torch.nn.Module:
        """The unwrapped GPTModel (state_dict keys without the DDP/Float16Module prefixes)."""
        return unwrap_float16(self.ddp.module)


def unwrap_float16(module: torch.nn.Module) -> torch.nn.Module:
    """`module` without megatron-core's `Float16Module` wrapper (if it has one)."""
    from megatron.core.transformer.module import Float16Module

    inner = module.module if isinstance(module, Float16Module) else module
    if not isinstance(inner, torch.nn.Module):
        raise TypeError(f"Float16Module wraps {type(inner).__name__}, not an nn.Module")
    return inner


def transformer_config(config: WorkerConfig) -> Any:
    from megatron.core.transformer import TransformerConfig

    m = config.model
    swiglu: dict[str, Any] = (
        {"gated_linear_unit": True, "activation_func": torch.nn.functional.silu} if m.swiglu else {}
    )
    return TransformerConfig(
        num_layers=m.num_layers,
        hidden_size=m.hidden_size,
        num_attention_heads=m.num_attention_heads,
        num_query_groups=m.num_query_groups,
        ffn_hidden_size=m.ffn_hidden_size,
        normalization=m.normalization,
        add_bias_linear=m.add_bias_linear,
        add_qkv_bias=m.add_qkv_bias,
        **swiglu,
        **_moe_settings(config),
        tensor_model_parallel_size=config.parallel.tensor_model_parallel_size,
        pipeline_model_parallel_size=config.parallel.pipeline_model_parallel_size,
        sequence_parallel=config.parallel.sequence_parallel,
        # Deterministic forward: parity between split and one-shot steps needs no dropout.
        hidden_dropout=0.0,
        attention_dropout=0.0,
        bf16=config.precision == "bfloat16",
        params_dtype=_dtype(config),
        use_cpu_initialization=config.device == "cpu",
        # DDP then SUMS across DP (no 1/dp scaling); the train step divides once by the
        # global valid-token/sequence count instead.
        calculate_per_token_loss=True,
        # Need apex/TE kernels; the CPU path has neither.
        gradient_accumulation_fusion=False,
        apply_rope_fusion=False,
        bias_dropout_fusion=False,
        masked_softmax_fusion=False,
        bias_activation_fusion=False,
    )


def _moe_settings(config: WorkerConfig) -> dict[str, Any]:
    """TransformerConfig fields of the MoE layer (none for a dense model)."""
    moe = config.model.moe
    if moe is None:
        return {}
    p = config.parallel
    return {
        "num_moe_experts": moe.num_experts,
        "moe_router_topk": moe.router_topk,
        "moe_ffn_hidden_size": moe.ffn_hidden_size or config.model.ffn_hidden_size,
        "moe_shared_expert_intermediate_size": moe.shared_expert_intermediate_size,
        "moe_router_load_balancing_type": "aux_loss" if moe.aux_loss_coeff > 0 else "none",
        "moe_aux_loss_coeff": moe.aux_loss_coeff,
        "moe_z_loss_coeff": moe.z_loss_coeff,
        "moe_expert_capacity_factor": moe.capacity_factor,
        "moe_token_dispatcher_type": moe.token_dispatcher_type,
        "moe_grouped_gemm": False,  # grouped GEMM needs TE or nv-grouped-gemm kernels
        "expert_model_parallel_size": p.expert_model_parallel_size,
        "expert_tensor_parallel_size": p.expert_tensor_parallel_size,
    }


def _dtype(config: WorkerConfig) -> torch.dtype:
    return torch.bfloat16 if config.precision == "bfloat16" else torch.float32


def layer_spec_name(config: WorkerConfig) -> str:
    """ "te" where Transformer Engine is installed and the device is CUDA, else "local".

    TE's modules are CUDA kernels, so a CPU run uses the local spec even with TE present."""
    # An optional GPU dependency: look for it without importing it.
    has_te = importlib.util.find_spec("transformer_engine") is not None
    return "te" if config.device == "cuda" and has_te else "local"


def _layer_spec(config: WorkerConfig) -> Any:
    from megatron.core.models.gpt.gpt_layer_specs import (
        get_gpt_layer_local_spec,
        get_gpt_layer_with_transformer_engine_spec,
    )

    experts = config.model.num_experts or None
    if layer_spec_name(config) == "te":
        return get_gpt_layer_with_transformer_engine_spec(num_experts=experts)
    return get_gpt_layer_local_spec(
        num_experts=experts, moe_grouped_gemm=False, normalization=config.model.normalization
    )


def build_gpt(config: WorkerConfig) -> tuple[Any, torch.nn.Module]:
    """GPTModel from the config (layer spec per `layer_spec_name`; HF via Bridge), on the
    worker's device, in `config.precision`'s parameter dtype (not yet wrapped); the local
    spec's attention computed by torch's SDPA (`sdpa_attention`)."""
    from mcore_grpo.worker.sdpa_attention import use_sdpa

    tcfg, gpt = _build(config)
    use_sdpa(gpt)
    return tcfg, gpt


def _build(config: WorkerConfig) -> tuple[Any, torch.nn.Module]:
    if config.model.hf_checkpoint is not None:
        return _build_from_hf(config)
    from mcore_grpo.worker.shared_prefix import refuse_before_build

    tcfg = transformer_config(config)
    spec = layer_spec_name(config)
    refuse_before_build(config.shared_prefix, tcfg, config.model.position_embedding_type)
    log.info(
        "mcore_grpo.worker: GPTModel with the %s layer spec on %s, %s",
        spec,
        config.device,
        config.precision,
    )
    gpt = construct_gpt(config, tcfg)
    # use_cpu_initialization=False already allocated on torch.cuda.current_device(); this
    # is a no-op there and the one explicit placement.
    return tcfg, gpt.to(config.torch_device)


def construct_gpt(config: WorkerConfig, tcfg: Any) -> torch.nn.Module:
    """The built-in GPTModel of `config`'s shape (where its tensors go is the caller's)."""
    from megatron.core.models.gpt import GPTModel

    m = config.model
    return GPTModel(
        config=tcfg,
        transformer_layer_spec=_layer_spec(config),
        vocab_size=m.padded_vocab_size,
        max_sequence_length=m.max_sequence_length,
        position_embedding_type=m.position_embedding_type,
        rotary_base=m.rotary_base,
        share_embeddings_and_output_weights=m.tie_embeddings,
    )


def wrap_precision(config: WorkerConfig, tcfg: Any, gpt: torch.nn.Module) -> torch.nn.Module:
    """megatron-core's `Float16Module` around `gpt` for bf16 (casts inputs in, logits out to
    fp32), as megatron-core's own training loop wraps it; `gpt` itself for float32."""
    from megatron.core.transformer.module import Float16Module

    # Megatron-Bridge's provide_distributed_model already wraps a bf16 model.
    if config.precision != "bfloat16" or isinstance(gpt, Float16Module):
        return gpt
    return Float16Module(tcfg, gpt)


def _build_from_hf(config: WorkerConfig) -> tuple[Any, torch.nn.Module]:
    """A Hugging Face checkpoint through Megatron-Bridge, CPU and CUDA alike: the layer spec
    is Bridge's default (TE where installed, else local, per the patched series)."""
    from mcore_grpo.worker import hf_checkpoint
    from mcore_grpo.worker.bridge_source import import_auto_bridge
    from mcore_grpo.worker.shared_prefix import refuse_before_build

    source = str(config.model.hf_checkpoint)
    hf = hf_checkpoint.read_hf_config(source)
    auto_bridge = import_auto_bridge()
    if hf is not None:
        hf_checkpoint.check_architecture(source, hf, auto_bridge.list_supported_models())
        hf_checkpoint.check_parallel_layout(source, hf, config.parallel)
    bridge = auto_bridge.from_hf_pretrained(config.model.hf_checkpoint, torch_dtype=_dtype(config))
    provider = bridge.to_megatron_provider(load_weights=True)
    p = config.parallel
    provider.tensor_model_parallel_size = p.tensor_model_parallel_size
    provider.pipeline_model_parallel_size = p.pipeline_model_parallel_size
    provider.expert_model_parallel_size = p.expert_model_parallel_size
    provider.expert_tensor_parallel_size = p.expert_tensor_parallel_size
    provider.sequence_parallel = p.sequence_parallel
    provider.bf16 = config.precision == "bfloat16"
    provider.params_dtype = _dtype(config)
    provider.calculate_per_token_loss = True
    # Deterministic forward, as for the built-in model (split/one-shot step parity).
    provider.hidden_dropout = 0.0
    provider.attention_dropout = 0.0
    cpu = config.device == "cpu"
    provider.use_cpu_initialization = cpu
    te = layer_spec_name(config) == "te"
    without_missing_kernels(provider, cpu=cpu, te=te)
    provider.finalize()
    # An explicit shared_prefix=True the checkpoint's config rules out: refused before the
    # model is built (its layers are checked again once built).
    refuse_before_build(config.shared_prefix, provider, provider.position_embedding_type)
    models = provider.provide_distributed_model(wrap_with_ddp=False, use_cpu_initialization=cpu)
    gpt = models[0]
    return gpt.config, gpt.to(config.torch_device)


def has_masked_softmax_kernel() -> bool:
    """Whether apex's compiled fused masked softmax (megatron-core's fp16/bf16 fast path) is
    importable here."""
    return importlib.util.find_spec("scaled_masked_softmax_cuda") is not None


def without_missing_kernels(provider: Any, *, cpu: bool, te: bool) -> None:
    """Turn off the fusions a Bridge provider asks for whose kernels this machine lacks.

    Bridge's providers ask for Transformer Engine's fused rope, MoE permutation and router
    (Llama, Qwen3-MoE, ...); megatron-core refuses them at config time without TE ("Please
    install TE >= 1.4"), on a GPU as on the CPU: seen on an H200 without TE. The CPU also lacks
    apex's and the CUDA-only fused kernels, and megatron-core's alltoall MoE dispatcher makes a
    CUDA stream when it is built (so the shared-expert overlap that needs it goes too).
    A GPU without apex lacks the fused masked softmax: megatron-core's FusedScaleMaskSoftmax
    imports apex's compiled `scaled_masked_softmax_cuda` for fp16/bf16 inputs
    (fusions/fused_softmax.py get_batch_per_block), which raised ModuleNotFoundError on an H200
    in bf16 (SmolLM2 through Bridge, whose Llama provider asks for the fusion).
    """
    if cpu or not has_masked_softmax_kernel():
        provider.masked_softmax_fusion = False
    if not te:
        # megatron-core's own name for the implementation: the specs that choose by it
        # (hybrid GDN/attention and sparse-attention decoders, MLA's norm resolution) take
        # the local modules instead of asking for Transformer Engine.
        provider.transformer_impl = "local"
        provider.apply_rope_fusion = False
        provider.moe_permute_fusion = False
        provider.moe_router_fusion = False
        provider.moe_grouped_gemm = False  # grouped GEMM experts are TE's (or nv-grouped-gemm)
    if cpu:
        provider.gradient_accumulation_fusion = False
        provider.bias_dropout_fusion = False
        provider.bias_activation_fusion = False
        if getattr(provider, "num_moe_experts", None):
            provider.moe_token_dispatcher_type = "allgather"
            # Overlapping the shared experts with dispatch is alltoall's (DeepSeek, EXAONE-MoE
            # ask for it); megatron-core refuses it with allgather. The math is the same.
            provider.moe_shared_expert_overlap = False


def build_policy(config: WorkerConfig) -> PolicyModel:
    """GPTModel wrapped in DDP (as configured) plus `get_megatron_optimizer`."""
    from megatron.core.distributed import (
        DistributedDataParallel,
        DistributedDataParallelConfig,
        finalize_model_grads,
    )
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer

    from mcore_grpo.worker.shared_prefix import resolve

    tcfg, gpt = build_gpt(config)
    shared_prefix = resolve(config.shared_prefix, gpt)
    model = wrap_precision(config, tcfg, gpt)
    d, o, schedule = config.ddp, config.optimizer, config.schedule
    ddp_kwargs: dict[str, Any] = {
        "use_distributed_optimizer": o.use_distributed_optimizer,
        "overlap_grad_reduce": d.overlap_grad_reduce,
        "overlap_param_gather": d.overlap_param_gather,
        "grad_reduce_in_fp32": d.grad_reduce_in_fp32,
    }
    if d.bucket_size is not None:
        ddp_kwargs["bucket_size"] = d.bucket_size
    ddp = DistributedDataParallel(tcfg, DistributedDataParallelConfig(**ddp_kwargs), model)
    optimizer = get_megatron_optimizer(
        OptimizerConfig(
            optimizer=o.optimizer,
            sgd_momentum=0.0,
            lr=o.lr,
            weight_decay=o.weight_decay,
            adam_beta1=o.adam_beta1,
            adam_beta2=o.adam_beta2,
            adam_eps=o.adam_eps,
            clip_grad=config.max_grad_norm,
            # The schedule's floor in each parameter group (its `min_lr`, which get_lr reads).
            min_lr=schedule.min_lr if schedule is not None else 0.0,
            use_distributed_optimizer=o.use_distributed_optimizer,
            bf16=config.precision == "bfloat16",
            fp16=False,
            params_dtype=_dtype(config),
        ),
        [ddp],
    )
    # The hooks megatron's schedules call; the split train step nulls and restores them.
    tcfg.no_sync_func = ddp.no_sync
    tcfg.grad_sync_func = ddp.start_grad_sync if d.overlap_grad_reduce else None
    tcfg.param_sync_func = ddp.start_param_sync if d.overlap_param_gather else None
    tcfg.finalize_model_grads_func = finalize_model_grads
    spec = "hf-bridge" if config.model.hf_checkpoint is not None else layer_spec_name(config)
    return PolicyModel(
        transformer_config=tcfg,
        ddp=ddp,
        optimizer=optimizer,
        scheduler=build_scheduler(schedule, optimizer, o.lr) if schedule is not None else None,
        layer_spec=spec,
        shared_prefix=shared_prefix,
    )


def sync_params(policy: PolicyModel) -> None:
    """Make every rank's full params current after an optimizer step (dist-opt gather)."""
    if policy.ddp.ddp_config.use_distributed_optimizer:
        policy.ddp.start_param_sync(force_sync=True)

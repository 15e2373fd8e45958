"""Shared-prefix rows (`mcore_grpo.worker.shared_prefix`) against the unshared forward (the
oracle: the rows as laid out over a dense causal + key-padding mask, `tests/support/
dense_reference.py`): logprobs,
gradients of every parameter, no leak between completions, and how groups are found.

The batch is two GRPO groups of three rows whose prompts have different lengths (left padding)
and whose completions end at different columns (right padding), on a rope / RMSNorm / SwiGLU /
GQA GPT; fp32."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from mcore_grpo.worker.config import ModelConfig, MoEConfig, ParallelConfig, WorkerConfig
from mcore_grpo.worker.forward import next_token_logprobs
from mcore_grpo.worker.model import build_gpt
from mcore_grpo.worker.packed_rows import Group, PackedRows, RealTokens
from mcore_grpo.worker.shared_prefix import (
    FlopCost,
    config_reason,
    enable,
    plan_groups,
    resolve,
    shared_prefix_logprobs,
    unsupported_reason,
)

from tests.integration.worker.harness import spawn2
from tests.support.dense_reference import reference_logits
from tests.support.device import MULTI_RANK_CPU
from tests.support.model_checks import shared_prefix_figures
from tests.support.ports import free_port

VOCAB = 64
PROMPTS = (5, 7)  # real prompt tokens per group
COMPLETIONS = ((6, 3, 4), (2, 6, 5))  # real completion tokens per row
WIDTH = max(PROMPTS) + 7  # even: sequence parallelism splits whole rows over 2 ranks


def _config(
    device: str,
    position_embedding_type: str = "rope",
    moe: MoEConfig | None = None,
    parallel: ParallelConfig | None = None,
) -> WorkerConfig:
    return WorkerConfig(
        device=device,  # type: ignore[arg-type]
        parallel=parallel or ParallelConfig(),
        model=ModelConfig(
            num_layers=2,
            hidden_size=32,
            num_attention_heads=4,
            num_query_groups=2,
            vocab_size=VOCAB,
            max_sequence_length=64,
            position_embedding_type=position_embedding_type,  # type: ignore[arg-type]
            normalization="RMSNorm",
            swiglu=True,
            add_bias_linear=False,
            moe=moe,
        ),
    )


@pytest.fixture
def model(tp1: None, device: str) -> Iterator[torch.nn.Module]:
    torch.manual_seed(0)
    _, gpt = build_gpt(_config(device))
    enable(gpt)
    gpt.eval()  # no dropout either way; eval keeps the comparison deterministic
    yield gpt


def _batch(device: str, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """[6, WIDTH] ids and valid: per group a left-padded prompt, then each row's completion,
    right-padded."""
    from model_matrix.checks import shared_prefix_batch

    ids, valid = shared_prefix_batch(VOCAB, PROMPTS, COMPLETIONS, WIDTH, seed)
    return ids.to(device), valid.to(device)


def _unshared(model: torch.nn.Module, ids: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    return next_token_logprobs(reference_logits(model, ids, valid), ids, VOCAB)


def _grads(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    return grads


def test_the_two_groups_are_found_and_share_their_prompts(model: torch.nn.Module, device: str):
    ids, valid = _batch(device)
    groups, ends = plan_groups(ids, valid, FlopCost.of(model))
    start = max(PROMPTS)
    # A group shares its prompt and padding, plus any completion tokens that happen to agree.
    assert [(g.first, g.size) for g in groups] == [(0, 3), (3, 3)]
    assert all(g.prefix >= start for g in groups)
    real = RealTokens(valid)
    packed = [real.packed_length(g, ends) for g in groups]
    assert packed == [p + sum(c) for p, c in zip(PROMPTS, COMPLETIONS, strict=True)]


def test_logprobs_equal_the_unshared_rows(model: torch.nn.Module, device: str) -> None:
    ids, valid = _batch(device)
    with torch.no_grad():
        shared, _ = shared_prefix_logprobs(model, ids, valid, VOCAB)
        unshared = _unshared(model, ids, valid)
    scored = valid[:, :-1] & valid[:, 1:]  # a prediction from a left pad attends nothing
    diff = (shared - unshared)[scored].abs().max()
    assert float(diff) <= 1e-5, f"max |shared - unshared| logprob over real targets = {diff}"
    assert float(shared[~scored].abs().max()) == 0.0


def _gradient_difference(model: torch.nn.Module, device: str, reduce: Any = None) -> float:
    """Worst relative difference over parameters between the gradients of one weighted sum of
    the shared and of the unshared logprobs; `reduce(grads)` first (sequence-parallel grads)."""
    ids, valid = _batch(device)
    weights = torch.randn(
        ids.shape[0], ids.shape[1] - 1, generator=torch.Generator().manual_seed(1)
    )
    weights = weights.to(device) * (valid[:, :-1] & valid[:, 1:])
    shared, _ = shared_prefix_logprobs(model, ids, valid, VOCAB)
    (shared * weights).sum().backward()
    got = _grads(model)
    (_unshared(model, ids, valid) * weights).sum().backward()
    expected = _grads(model)
    if reduce is not None:
        reduce(model, got)
        reduce(model, expected)
    assert got.keys() == expected.keys() and len(got) > 5
    return max(
        float((got[n] - expected[n]).norm() / expected[n].norm().clamp(min=1e-12)) for n in got
    )


def test_gradients_equal_the_unshared_rows(model: torch.nn.Module, device: str) -> None:
    worst = _gradient_difference(model, device)
    assert worst <= 1e-5, f"worst relative gradient difference over parameters = {worst}"


def test_moe_without_auxiliary_losses_is_exact(tp1: None, device: str) -> None:
    """Routing is per token: an MoE layer's logprobs and gradients (router included) are the
    unshared ones when no batch-wide auxiliary loss or capacity is configured."""
    torch.manual_seed(0)
    _, gpt = build_gpt(_config(device, moe=MoEConfig(num_experts=4, aux_loss_coeff=0.0)))
    assert resolve(None, gpt)
    gpt.eval()
    ids, valid = _batch(device)
    with torch.no_grad():
        shared, _ = shared_prefix_logprobs(gpt, ids, valid, VOCAB)
        unshared = _unshared(gpt, ids, valid)
    scored = valid[:, :-1] & valid[:, 1:]
    assert float((shared - unshared)[scored].abs().max()) <= 1e-5
    worst = _gradient_difference(gpt, device)
    assert worst <= 1e-5, f"worst relative gradient difference over parameters = {worst}"


def test_changing_one_completion_changes_no_other_row(model: torch.nn.Module, device: str):
    ids, valid = _batch(device)
    changed = ids.clone()
    start = max(PROMPTS)
    changed[1, start + 1 : start + 3] = (changed[1, start + 1 : start + 3] + 7) % VOCAB
    with torch.no_grad():
        before, _ = shared_prefix_logprobs(model, ids, valid, VOCAB)
        after, _ = shared_prefix_logprobs(model, changed, valid, VOCAB)
    others = [0, 2, 3, 4, 5]
    assert torch.equal(before[others], after[others])
    assert float((before[1] - after[1]).abs().max()) > 1e-3  # the changed row itself moved


def test_a_row_that_would_shrink_the_prefix_starts_its_own_group() -> None:
    """Rows 0 and 1 share 30 tokens, row 2 only the first: joining would forward 29 prompt
    tokens twice more than leaving it apart. With segments, sharing a whole prefix never costs
    more than the rows apart, however long the completions."""
    ids = torch.zeros(3, 70, dtype=torch.long)
    ids[:, 1:30] = 5
    ids[2, 1:30] = 6
    ids[:, 30:] = torch.arange(3)[:, None] + 1
    valid = torch.ones(3, 70, dtype=torch.bool)
    cost = FlopCost(per_token=1.0, per_score=1.0)
    groups, _ = plan_groups(ids, valid, cost)
    assert [(g.first, g.size, g.prefix) for g in groups] == [(0, 2, 30), (2, 1, 70)]
    assert cost.packed(2, [40, 40, 40]) < 3 * cost.packed(42, [])


def test_layout_maps_each_prediction_to_its_packed_column() -> None:
    ids = torch.tensor([[0, 5, 6, 7, 8], [0, 5, 6, 9, 0]])
    valid = torch.tensor([[0, 1, 1, 1, 1], [0, 1, 1, 1, 0]], dtype=torch.bool)
    layout = PackedRows.build(ids, valid, [Group(0, 2, 3)], [5, 4])
    # [5 6 | 7 8 | 9]: real tokens only, each at its own row's position
    assert layout.input_ids.tolist() == [[5, 6, 7, 8, 9]]
    assert layout.positions.tolist() == [[0, 1, 2, 3, 2]]
    assert layout.source.tolist() == [[0, 0, 1, 2], [0, 0, 1, 0]]
    assert layout.scored.tolist() == [[False, True, True, True], [False, True, True, False]]
    # the prompt a root; each completion continues it (9 sees 5 6, never 7 8)
    assert [(s.row, s.start, s.length, s.parent) for s in layout.params.segments] == [
        (0, 0, 2, -1),
        (0, 2, 2, 0),
        (0, 4, 1, 0),
    ]


def test_no_dense_mask_reaches_the_model(model: torch.nn.Module, device: str) -> None:
    """The forward gets segments (`packed_seq_params`) and no attention mask."""
    seen: list[tuple[Any, Any]] = []

    def record(module: Any, args: Any, kwargs: dict[str, Any]) -> None:
        seen.append((args[3] if len(args) > 3 else kwargs.get("attention_mask"), kwargs))

    hooks = [
        m.register_forward_pre_hook(record, with_kwargs=True)
        for m in model.modules()
        if type(m).__name__.endswith("DotProductAttention")
    ]
    try:
        with torch.no_grad():
            shared_prefix_logprobs(model, *_batch(device), VOCAB)
    finally:
        for hook in hooks:
            hook.remove()
    assert seen and all(mask is None for mask, _ in seen)
    assert all(type(k["packed_seq_params"]).__name__ == "SharedPrefixParams" for _, k in seen)


def _router_figures(
    gpt: torch.nn.Module, ids: torch.Tensor, valid: torch.Tensor, config: WorkerConfig, shared: bool
) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """One training forward and backward through the worker's logprob entry: the router
    metrics the step would report (`RouterStats`) and every parameter's gradient."""
    from mcore_grpo.worker.logprobs import policy_token_logprobs
    from mcore_grpo.worker.moe_metrics import RouterStats
    from model_matrix.checks import aux_loss_scale_kept

    weights = torch.randn(
        ids.shape[0], ids.shape[1] - 1, generator=torch.Generator().manual_seed(1)
    )
    weights = weights.to(ids.device) * (valid[:, :-1] & valid[:, 1:])
    stats = RouterStats(gpt, num_experts=4, topk=2)
    try:
        with aux_loss_scale_kept():
            stats.reset()
            logprobs, _ = policy_token_logprobs(gpt, ids, valid, config, shared)
            (logprobs * weights).sum().backward()
            metrics = stats.collect(None, ids.device)
    finally:
        stats.close()
    return metrics, _grads(gpt)


def test_moe_auxiliary_losses_count_a_shared_prompt_once_per_sample(tp1: None, device: str) -> None:
    """Shared rows route each prompt token once; with megatron-core's token counts
    (shared-prefix-moe-token-counts.patch) the load-balancing loss, the z-loss, the tokens per
    expert and every gradient (the losses' included) are those of the whole rows, whose padding
    counts for nothing: the assignments are top-k per real token of the unpacked rows."""
    torch.manual_seed(0)
    config = _config(device, moe=MoEConfig(num_experts=4, aux_loss_coeff=1e-2, z_loss_coeff=1e-3))
    _, gpt = build_gpt(config)
    assert resolve(None, gpt)
    gpt.train()  # the router's losses exist in training forwards only (no dropout configured)
    ids, valid = _batch(device)
    shared, shared_grads = _router_figures(gpt, ids, valid, config, True)
    whole, whole_grads = _router_figures(gpt, ids, valid, config, False)

    real_assignments = int(valid.sum()) * 2 * config.model.num_layers  # top-2, every layer
    assert sum(whole["moe/tokens_per_expert"]) == real_assignments
    assert shared["moe/tokens_per_expert"] == pytest.approx(
        whole["moe/tokens_per_expert"], abs=1e-9
    )
    for name in ("moe/load_balancing_loss", "moe/z_loss"):
        assert whole[name] > 0, name
        assert shared[name] == pytest.approx(whole[name], rel=1e-5), name
    assert shared_grads.keys() == whole_grads.keys()
    worst = max(
        float((g - whole_grads[n]).norm() / whole_grads[n].norm().clamp(min=1e-12))
        for n, g in shared_grads.items()
    )
    assert worst <= 1e-5, f"worst relative gradient difference over parameters = {worst}"


def test_moe_with_a_capacity_falls_back_and_says_why(
    tp1: None, device: str, caplog: pytest.LogCaptureFixture
) -> None:
    moe = MoEConfig(num_experts=4, aux_loss_coeff=0.0, capacity_factor=1.0)
    _, gpt = build_gpt(_config(device, moe=moe))
    with caplog.at_level("WARNING"):
        assert resolve(None, gpt) is False
    assert "capacity drops tokens" in caplog.text
    with pytest.raises(ValueError, match=r"shared_prefix=True, but .*capacity"):
        resolve(True, gpt)
    assert resolve(False, gpt) is False


def test_an_explicit_request_the_config_rules_out_is_refused_before_any_build() -> None:
    config = _config("cpu", moe=MoEConfig(num_experts=4, capacity_factor=1.0))
    explicit = dataclasses.replace(config, shared_prefix=True)
    with pytest.raises(ValueError, match=r"shared_prefix=True with model.moe.capacity_factor"):
        explicit.validate()
    config.validate()  # unset: the build decides, and falls back


def test_the_config_alone_names_what_rules_it_out() -> None:
    """Before any build: a Bridge provider's or TransformerConfig's fields, as `getattr` sees
    them (a provider is a TransformerConfig subclass with its hybrid layer pattern)."""

    def reason(kind: str = "rope", **fields: Any) -> str:
        return str(config_reason(SimpleNamespace(**fields), kind))

    assert config_reason(SimpleNamespace(), "rope") is None
    assert config_reason(SimpleNamespace(), "learned_absolute") is None
    # Mamba: each segment from its prefix's state (mamba-shared-prefix-state.patch)
    assert config_reason(SimpleNamespace(hybrid_layer_pattern="M*M-"), "none") is None
    # gated delta net: likewise (gdn-shared-prefix-state.patch); gated delta net 2 not yet
    assert config_reason(SimpleNamespace(hybrid_override_pattern="G*-"), "rope") is None
    assert config_reason(SimpleNamespace(hybrid_layer_pattern="*-*E"), "rope") is None
    gdn = SimpleNamespace(experimental_attention_variant="gated_delta_net")
    assert config_reason(gdn, "rope") is None
    assert "gated delta net gdn2" in reason(experimental_attention_variant="gdn2")
    assert "sparse attention (DSA)" in reason(experimental_attention_variant="dsa")
    assert config_reason(SimpleNamespace(multi_latent_attention=True), "rope") is None
    assert "fused rope" in reason(multi_latent_attention=True, apply_rope_fusion=True)
    assert config_reason(SimpleNamespace(window_size=(4, 0)), "rope") is None
    assert "context parallelism" in reason(context_parallel_size=2)
    assert "'mrope' is not taken" in reason("mrope")
    assert config_reason(SimpleNamespace(), "yarn") is None  # yarn-from-position-ids.patch
    assert config_reason(SimpleNamespace(softmax_type="learnable"), "yarn") is None  # sinks
    assert (
        config_reason(SimpleNamespace(num_moe_experts=4, moe_aux_loss_coeff=0.01), "rope") is None
    )
    assert "capacity" in reason(num_moe_experts=4, moe_expert_capacity_factor=1.0)
    seq_aux = SimpleNamespace(num_moe_experts=4, moe_router_load_balancing_type="seq_aux_loss")
    assert config_reason(seq_aux, "rope") is None
    # Under sequence parallelism (MoE at TP > 1): the sequence-level loss's gradient is not
    # exact in megatron-core; the z-loss is (moe-z-loss-over-ranks.patch), as are the others.
    sp = {"num_moe_experts": 4, "sequence_parallel": True}
    assert "seq_aux_loss" in reason(
        **sp, moe_router_load_balancing_type="seq_aux_loss", moe_aux_loss_coeff=1e-3
    )
    assert "seq_aux_loss" in reason(
        **sp,
        moe_router_load_balancing_type=["aux_loss", "seq_aux_loss"],
        moe_aux_loss_coeff=[0.0, 1e-3],
    )
    assert (
        config_reason(
            SimpleNamespace(
                **sp,
                moe_router_load_balancing_type=["aux_loss", "seq_aux_loss"],
                moe_aux_loss_coeff=[1e-3, 0.0],
            ),
            "rope",
        )
        is None
    )
    assert (
        config_reason(SimpleNamespace(**sp, moe_aux_loss_coeff=1e-2, moe_z_loss_coeff=1e-3), "rope")
        is None
    )


def test_an_hf_checkpoint_the_config_rules_out_is_refused_before_the_model_is_built(
    tp1: None, tmp_path: Path
) -> None:
    """GLM-5 (DSA sparse attention) through Bridge with `shared_prefix=True`: refused from the
    provider's config, before `provide_distributed_model` builds anything."""
    from model_matrix import families

    checkpoint = tmp_path / "glm5"
    families.write_checkpoint(checkpoint, "GlmMoeDsaForCausalLM")
    config = WorkerConfig(
        device="cpu", model=ModelConfig(hf_checkpoint=str(checkpoint)), shared_prefix=True
    )
    with pytest.raises(ValueError, match=r"shared_prefix=True, but .*sparse attention") as caught:
        build_gpt(config)
    frames = [entry.name for entry in caught.traceback]
    assert "refuse_before_build" in frames and "provide_distributed_model" not in frames


def test_models_it_applies_to(tp1: None, device: str) -> None:
    _, learned = build_gpt(_config(device, "learned_absolute"))
    assert unsupported_reason(learned) is None
    _, rope = build_gpt(_config(device))
    assert unsupported_reason(rope) is None
    config: Any = rope.config
    config.window_size = (4, 0)
    assert unsupported_reason(rope) is None  # the local attention counts the window in positions


def test_a_model_subclass_is_judged_by_what_it_overrides(tp1: None, device: str) -> None:
    """A rotary class that overrides `forward` (another table) but inherits
    `get_emb_at_positions` would be read at its base's table; a core attention that overrides
    `forward` takes no segments. Subclasses that keep megatron-core's methods share (Gemma 3's
    attention: only a per-layer window)."""
    _, model = build_gpt(_config(device))
    gpt: Any = model
    rotary, attention = gpt.rotary_pos_emb, gpt.decoder.layers[0].self_attention.core_attention
    base_rotary, base_attention = type(rotary), type(attention)
    try:
        rotary.__class__ = type("OwnTables", (base_rotary,), {"forward": base_rotary.forward})
        assert "(OwnTables) rotates by sequence index only" in str(unsupported_reason(model))
        rotary.__class__ = type(
            "OwnTablesAtPositions",
            (base_rotary,),
            {"forward": base_rotary.forward, "get_emb_at_positions": lambda self, p: p},
        )
        assert unsupported_reason(model) is None
        attention.__class__ = type("PerLayerWindow", (base_attention,), {})
        assert unsupported_reason(model) is None
        attention.__class__ = type("OwnSoftmax", (base_attention,), {"forward": lambda self: 0})
        assert "its attention (OwnSoftmax) takes no shared-prefix segments" in str(
            unsupported_reason(model)
        )
    finally:
        rotary.__class__, attention.__class__ = base_rotary, base_attention


@pytest.mark.parametrize("arch", ["MistralForCausalLM", "Exaone4ForCausalLM"])
def test_sliding_window_models_share_exactly(world1: None, tmp_path: Path, arch: str) -> None:
    """Bridge's sliding-window families (every layer windowed; windowed and global layers
    mixed): on by default, logprobs and every gradient those of whole rows (the model
    matrix's shared-prefix check; the tiny window of 8 cuts into the prompts)."""
    figures = shared_prefix_figures(tmp_path, arch)
    assert figures["logprobs"] <= 1e-5 and figures["gradients"] <= 1e-5, figures


def _two_rank_figures(
    parallel: ParallelConfig, moe: MoEConfig | None = None, own_rows: bool = False
) -> dict[str, float]:
    """One of two ranks (TP=2 or EP=2): the shared rows against the unshared ones on the same
    model, the same batch on both ranks, or (`own_rows`, as EP ranks are data-parallel ranks)
    rank 1 a batch that packs to more and shorter rows: a last row that starts its own group
    and a shorter completion."""
    from mcore_grpo.worker.cpu import cpu_device, model_parallel_seed
    from megatron.core import parallel_state

    parallel_state.initialize_model_parallel(
        tensor_model_parallel_size=parallel.tensor_model_parallel_size,
        expert_model_parallel_size=parallel.expert_model_parallel_size,
        expert_tensor_parallel_size=1,
    )
    multiple = parallel.tensor_model_parallel_size if parallel.sequence_parallel else 1
    try:
        with cpu_device("cpu"):
            model_parallel_seed(0, "cpu")
            _, gpt = build_gpt(_config("cpu", moe=moe, parallel=parallel))
            assert resolve(True, gpt)
            gpt.eval()
            ids, valid = _batch("cpu")
            if own_rows and parallel_state.get_expert_model_parallel_rank() == 1:
                ids[5, max(PROMPTS) - PROMPTS[1]] += 1  # its prompt differs: its own group
                valid[4, max(PROMPTS) + COMPLETIONS[1][1] - 1] = False
            with torch.no_grad():
                shared, _ = shared_prefix_logprobs(gpt, ids, valid, VOCAB, multiple=multiple)
                unshared = _unshared(gpt, ids, valid)
            scored = valid[:, :-1] & valid[:, 1:]
            logprob = float((shared - unshared)[scored].abs().max())
            # The LM head at the completions' predictions only (picked under TP; all columns
            # projected, then read, under sequence parallelism).
            completions = scored.clone()
            completions[:, : max(PROMPTS) - 1] = False
            with torch.no_grad():
                picked, _ = shared_prefix_logprobs(
                    gpt, ids, valid, VOCAB, multiple=multiple, scored=completions
                )
            picked_logprob = float((picked - unshared)[completions].abs().max())
            gradient = _gradient_difference(gpt, "cpu", _sum_sequence_parallel_grads)
        return {"logprob": logprob, "picked_logprob": picked_logprob, "gradient": gradient}
    finally:
        parallel_state.destroy_model_parallel()


def _sum_sequence_parallel_grads(model: torch.nn.Module, grads: dict[str, torch.Tensor]) -> None:
    """Under sequence parallelism each rank's norm weights get the gradient of its own tokens:
    the rows are split differently in the two layouts, only the sum over the ranks compares
    (megatron-core's `finalize_model_grads` sums them the same way)."""
    import torch.distributed as dist
    from megatron.core import parallel_state

    for name, param in model.named_parameters():
        if getattr(param, "sequence_parallel", False) and name in grads:
            dist.all_reduce(grads[name], group=parallel_state.get_tensor_model_parallel_group())


def _tp2_plain() -> dict[str, float]:
    return _two_rank_figures(ParallelConfig(tensor_model_parallel_size=2))


def _tp2_sequence_parallel() -> dict[str, float]:
    parallel = ParallelConfig(tensor_model_parallel_size=2, sequence_parallel=True)
    return _two_rank_figures(parallel)


def _ep2_moe() -> dict[str, float]:
    """Experts spread over two ranks (the allgather dispatcher), no auxiliary loss."""
    parallel = ParallelConfig(expert_model_parallel_size=2, expert_tensor_parallel_size=1)
    return _two_rank_figures(parallel, MoEConfig(num_experts=4, aux_loss_coeff=0.0))


def _ep2_moe_own_rows() -> dict[str, float]:
    """EP=2 with other rows on each rank: the packed shapes differ until agreed."""
    parallel = ParallelConfig(expert_model_parallel_size=2, expert_tensor_parallel_size=1)
    return _two_rank_figures(parallel, MoEConfig(num_experts=4, aux_loss_coeff=0.0), True)


@pytest.mark.cpu_only(reason=MULTI_RANK_CPU)
@pytest.mark.parametrize(
    "rank_fn",
    [_tp2_plain, _tp2_sequence_parallel, _ep2_moe, _ep2_moe_own_rows],
    ids=["tp2", "tp2-sp", "ep2-moe", "ep2-moe-own-rows"],
)
def test_model_parallel_ranks_are_exact(world1: None, rank_fn: Any) -> None:
    results = spawn2(rank_fn, free_port())
    for rank, figures in results.items():
        assert figures["logprob"] <= 1e-5, (rank, figures)
        assert figures["picked_logprob"] <= 1e-5, (rank, figures)
        assert figures["gradient"] <= 1e-5, (rank, figures)


@pytest.mark.parametrize("shared", [True, False], ids=["shared-rows", "whole-rows"])
def test_the_lm_head_projects_only_the_scored_predictions(
    model: torch.nn.Module, device: str, shared: bool
) -> None:
    """With a loss mask (completions only), logprobs and every gradient equal the full pass's
    on the masked predictions, 0 elsewhere, and the output layer sees only their positions."""
    from mcore_grpo.worker.logprobs import policy_token_logprobs

    config = _config(device)
    ids, valid = _batch(device)
    scored = torch.zeros(ids.shape[0], ids.shape[1] - 1, dtype=torch.bool, device=device)
    scored[:, max(PROMPTS) - 1 :] = True  # the prompt's last token predicts the first completion
    scored &= valid[:, 1:]
    seen: list[int] = []
    layer: Any = model.output_layer
    hook = layer.register_forward_pre_hook(lambda _m, args: seen.append(args[0].shape[0]))
    try:
        got, _ = policy_token_logprobs(model, ids, valid, config, shared, scored)
    finally:
        hook.remove()
    # One position per scored prediction at most (the shared prompt's last token serves all
    # three rows of its group): not every column of the rows.
    assert seen and seen[0] <= int(scored.sum())
    full = _unshared(model, ids, valid)
    assert float((got - full)[scored].abs().max()) <= 1e-5
    assert float(got[~scored].abs().max()) == 0.0
    weights = torch.randn(scored.shape, generator=torch.Generator().manual_seed(2)).to(device)
    weights = weights * scored
    (got * weights).sum().backward()
    picked = _grads(model)
    (full * weights).sum().backward()
    expected = _grads(model)
    worst = max(
        float((picked[n] - expected[n]).norm() / expected[n].norm().clamp(min=1e-12))
        for n in expected
    )
    assert worst <= 1e-5, f"worst relative gradient difference over parameters = {worst}"

"""Our GRPO maths against NeMo-RL's own code at the pin, float64, tolerance 1e-6.

The oracle is NeMo-RL's real code from 3rdparty/NeMo-RL, run once per module in a
subprocess (`nemo_rl_oracle.py`, which lists the modules it stubs and why):

- `ClippedPGLossFn` over a grid of 72 loss configurations (token/sequence level x 2 clip
  settings x dual clip off/3 x k1/k2/k3 x beta in {0, 0.01, 0.1}), each on 4 inputs (with
  and without masked-out samples x with and without tokens that hit the KL input/output
  clamps): loss value, gradient (the KL term included), metrics; once with the global counts
  and once as the split train step runs it (microbatches with counts 1, one division by
  the global count at the end, metrics rescaled with NeMo-RL's `metric_normalizations`);
- `calculate_kl` (k1/k2/k3 x clamp settings) and `masked_mean`;
- `calculate_baseline_and_std_per_prompt` and `GRPOAdvantageEstimator` (leave-one-out
  on/off x std normalisation on/off, binary/continuous rewards, groups of 1..6, shuffled);
- `apply_reward_shaping` (`grpo.reward_shaping`: off, the stop-properly penalty at 0 and
  0.5, DAPO's overlong penalty, which the penalty coefficient overrides).

When the NeMo-RL pin moves, these tests say whether our maths drifted from it.
"""

from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from mcore_grpo.config.grpo import RewardShapingConfig
from mcore_grpo.config.loss import ClippedPGLossConfig
from mcore_grpo.grpo.algorithm.advantages import baseline_and_std, group_advantages
from mcore_grpo.grpo.algorithm.loss import (
    RecordingLossSum,
    calculate_kl,
    clipped_pg_loss,
    loss_sum,
    masked_mean,
    metric_normalizers,
)
from mcore_grpo.grpo.algorithm.reward_shaping import shape_rewards
from mcore_grpo.grpo.driver.metrics import rollout_metrics
from mcore_grpo.worker.batch import loss_mask, valid_count

from tests.support.upstream_tree import upstream_tree

NEMO_RL_ROOT = upstream_tree("NeMo-RL")
NEMO_RL_MISSING = not (NEMO_RL_ROOT / "nemo_rl" / "__init__.py").is_file()

pytestmark = [
    pytest.mark.nemo_rl,
    pytest.mark.skipif(
        NEMO_RL_MISSING,
        reason=f"NeMo-RL source not present at {NEMO_RL_ROOT} (run `git submodule update "
        "--init 3rdparty/NeMo-RL`): GRPO maths not checked against NeMo-RL here",
    ),
]

TOL = 1e-6
ORACLE = Path(__file__).with_name("nemo_rl_oracle.py")

LEVELS = {"token": True, "sequence": False}
CLIPS = {"sym0.2": (0.2, 0.2), "dapo0.1-0.28": (0.1, 0.28)}
DUAL = {"nodual": None, "dual3": 3.0}
KL_TYPES = ("k1", "k2", "k3")
BETAS = (0.0, 0.01, 0.1)
LOSS_GRID = list(itertools.product(LEVELS, CLIPS, DUAL, KL_TYPES, BETAS))
# Inputs of each loss configuration: (masked-out samples, tokens hitting the KL clamps).
INPUTS = list(itertools.product((False, True), (False, True)))
MICROBATCHES = ((0, 2), (2, 6))  # uneven, as the split step may see them
# Metrics with a NeMo-RL name; `actor_loss` and `clip_fraction` are ours only.
SHARED_METRICS = (
    "loss",
    "kl_penalty",
    "probs_ratio",
    "probs_ratio_clamped",
    "num_valid_samples",
    "approx_entropy",
    "gen_kl_error",
)


def loss_name(level: str, clip: str, dual: str, kl_type: str, beta: float) -> str:
    """Case name of one loss configuration."""
    return f"loss-{level}-{clip}-{dual}-{kl_type}-beta{beta}"


def loss_config(level: str, clip: str, dual: str, kl_type: str, beta: float) -> dict[str, Any]:
    """The `loss_fn.*` keys of one configuration (NeMo-RL's names, so both sides take it)."""
    return {
        "token_level_loss": LEVELS[level],
        "ratio_clip_min": CLIPS[clip][0],
        "ratio_clip_max": CLIPS[clip][1],
        "ratio_clip_c": DUAL[dual],
        "reference_policy_kl_type": kl_type,
        "reference_policy_kl_penalty": beta,
    }


def loss_inputs(masked_samples: bool, clamps: bool, seed: int = 0) -> dict[str, torch.Tensor]:
    """A float64 [B=6, S=9] batch in NeMo-RL's layout (per-token tensors aligned with
    input_ids, position 0 unused; `curr_logprobs` [B, S-1] next-token)."""
    g = torch.Generator().manual_seed(seed)
    rows, seq = 6, 9
    prompt = torch.tensor([1, 2, 3, 1, 2, 1])
    length = torch.tensor([9, 7, 9, 4, 8, 3])  # row 5: one response token
    pos = torch.arange(seq)[None, :]
    token_mask = ((pos >= prompt[:, None]) & (pos < length[:, None])).double()
    sample_mask = torch.ones(rows, dtype=torch.float64)
    if masked_samples:
        sample_mask[[1, 4]] = 0.0
    prev = -2.0 + 0.5 * torch.randn(rows, seq, generator=g, dtype=torch.float64)
    curr = prev[:, 1:] + 0.7 * torch.randn(rows, seq - 1, generator=g, dtype=torch.float64)
    curr[2, 3] = prev[2, 4] + 1.5  # ratio e^1.5 = 4.5 > dual clip 3 (row 2 has A < 0)
    reference = prev.clone()
    reference[:, 1:] = curr + 0.3 * torch.randn(rows, seq - 1, generator=g, dtype=torch.float64)
    if clamps:
        # Row 0, positions 2..5 of the next-token layout are response tokens of a kept sample.
        for t, gap in zip(range(2, 6), (25.0, -25.0, 3.0, -12.0), strict=True):
            reference[0, t + 1] = curr[0, t] + gap  # |logr| > 20: input clamp; else output
    advantages = torch.tensor([0.8, -1.1, -0.6, 1.4, 0.3, -0.9], dtype=torch.float64)
    return {
        "token_mask": token_mask,
        "sample_mask": sample_mask,
        "advantages": advantages[:, None].expand(rows, seq).clone(),
        "prev_logprobs": prev,
        "generation_logprobs": prev
        + 0.05 * torch.randn(rows, seq, generator=g, dtype=torch.float64),
        "reference_policy_logprobs": reference,
        "curr_logprobs": curr,
    }


def input_name(masked_samples: bool, clamps: bool) -> str:
    """Suffix of one input variant."""
    return f"{'masked' if masked_samples else 'all'}-{'clamped' if clamps else 'unclamped'}"


def global_counts(data: dict[str, torch.Tensor]) -> tuple[float, float]:
    """(valid tokens, valid sequences) of the whole batch, computed here, not by our code."""
    mask = data["token_mask"][:, 1:] * data["sample_mask"][:, None]
    return float(mask.sum()), float(data["sample_mask"].sum())


def advantage_inputs() -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Reward sets (rewards [B] float64, group ids [B]), groups shuffled over the batch."""
    g = torch.Generator().manual_seed(1)
    sets = {}
    binary_ids = torch.arange(4).repeat_interleave(4)
    binary = (torch.rand(16, generator=g) > 0.6).double()
    binary[0:4] = 1.0  # one constant group: no variation, advantage left unsharpened
    sets["binary"] = (binary, binary_ids)
    cont_ids = torch.arange(3).repeat_interleave(5)
    sets["continuous"] = (torch.rand(15, generator=g, dtype=torch.float64), cont_ids)
    # Partial credit, two constant groups (0.5s, 0s) and two that vary.
    partial = [0.5, 0.5, 0.5, 0.5, 0.0, 0.0, 0.0, 0.0, 1.0, 0.5, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0]
    sets["partial"] = (torch.tensor(partial, dtype=torch.float64), binary_ids)
    sizes_ids = torch.tensor([0] + [1] * 2 + [2] * 3 + [3] * 6)  # a singleton, a pair
    sizes = torch.rand(12, generator=g, dtype=torch.float64)
    perm = torch.randperm(12, generator=g)
    sets["mixed-sizes-shuffled"] = (sizes[perm], sizes_ids[perm])
    return sets


def build_cases() -> dict[str, dict[str, Any]]:
    """Every case the oracle evaluates, by name."""
    cases: dict[str, dict[str, Any]] = {}
    for combo in LOSS_GRID:
        for masked, clamps in INPUTS:
            data = loss_inputs(masked, clamps)
            toks, seqs = global_counts(data)
            cases[f"{loss_name(*combo)}-{input_name(masked, clamps)}"] = {
                "kind": "loss",
                "cfg": loss_config(*combo),
                "data": data,
                "global_valid_toks": toks,
                "global_valid_seqs": seqs,
                "microbatches": MICROBATCHES,
            }
    for kl_type, clamp in itertools.product(KL_TYPES, KL_CLAMPS):
        cases[f"kl-{kl_type}-{clamp}"] = {"kind": "kl", "args": kl_args(kl_type, clamp)}
    for name, args in masked_mean_args().items():
        cases[f"masked_mean-{name}"] = {"kind": "masked_mean", "args": args}
    for (name, (rewards, ids)), loo, norm in itertools.product(
        advantage_inputs().items(), (True, False), (True, False)
    ):
        cases[f"adv-{name}-loo{loo}-norm{norm}"] = {
            "kind": "advantage",
            "rewards": rewards,
            "prompt_ids": ids[:, None],  # NeMo-RL groups by identical prompt rows
            "group_ids": ids,
            "leave_one_out": loo,
            "normalize": norm,
        }
    for name, cfg in REWARD_SHAPINGS.items():
        rewards, cut, lengths = reward_shaping_inputs()
        cases[f"shaping-{name}"] = {
            "kind": "reward_shaping",
            "cfg": cfg,
            "rewards": rewards,
            "truncated": cut,
            "lengths": lengths,
        }
    return cases


DAPO = {"overlong_buffer_length": 8, "overlong_buffer_penalty": 0.5, "max_response_length": 48}
REWARD_SHAPINGS: dict[str, dict[str, Any]] = {
    "off": {"enabled": False, **DAPO},
    "stop0": {"enabled": True, "stop_properly_penalty_coef": 0.0},
    "stop0.5": {"enabled": True, "stop_properly_penalty_coef": 0.5},
    "dapo": {"enabled": True, **DAPO},
    "stop-over-dapo": {"enabled": True, "stop_properly_penalty_coef": 0.25, **DAPO},
}


def reward_shaping_inputs() -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    """Rewards, truncation and lengths of 8 responses: truncated ones that scored 1 and 0,
    lengths below, inside and past DAPO's buffer (40..48 of a 48-token budget)."""
    rewards = torch.tensor([1.0, 0.0, 1.0, 0.0, 1.0, 0.5, 1.0, 0.0], dtype=torch.float64)
    cut = torch.tensor([False, False, True, True, False, False, True, False])
    lengths = [12, 39, 48, 48, 41, 44, 48, 30]
    return rewards, cut, lengths


KL_CLAMPS = {"default": (20.0, 10.0), "none": (None, None), "in5": (5.0, None), "out2": (None, 2.0)}


def kl_args(kl_type: str, clamp: str) -> dict[str, Any]:
    """`calculate_kl` arguments: logr from -30 to 30 (both clamps bite at the ends)."""
    logp = torch.linspace(-6.0, -0.1, 13, dtype=torch.float64)
    logr = torch.tensor([-30, -21, -12, -5, -2, -0.5, 0, 0.5, 2, 3, 5, 21, 30], dtype=torch.float64)
    lo, hi = KL_CLAMPS[clamp]
    return {
        "logprobs": logp,
        "logprobs_reference": logp + logr,
        "kl_type": kl_type,
        "input_clamp_value": lo,
        "output_clamp_value": hi,
    }


def masked_mean_args() -> dict[str, dict[str, Any]]:
    """`masked_mean` arguments: whole tensor / per row, own count / a global factor."""
    g = torch.Generator().manual_seed(2)
    values = torch.randn(4, 5, generator=g, dtype=torch.float64)
    mask = (torch.rand(4, 5, generator=g) > 0.4).double()
    mask[3] = 0.0  # an empty row
    return {
        "all": {"values": values, "mask": mask},
        "rows": {"values": values, "mask": mask, "dim": -1},
        "global": {"values": values, "mask": mask, "global_normalization_factor": 37.0},
    }


@pytest.fixture(scope="module")
def oracle(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """NeMo-RL's results for every case (one subprocess for the module)."""
    tmp = tmp_path_factory.mktemp("nemo_rl_oracle")
    cases_path, out_path = tmp / "cases.pt", tmp / "out.pt"
    torch.save(build_cases(), cases_path)
    proc = subprocess.run(
        [sys.executable, str(ORACLE), str(cases_path), str(out_path)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if proc.returncode != 0:
        raise AssertionError(f"NeMo-RL oracle failed:\n{proc.stdout}\n{proc.stderr}")
    return torch.load(out_path, weights_only=False)


def _diff(a: Any, b: Any) -> float:
    a = torch.as_tensor(a, dtype=torch.float64)
    b = torch.as_tensor(b, dtype=torch.float64)
    assert a.shape == b.shape, (a.shape, b.shape)
    if a.numel() == 0:
        return 0.0
    return float((a - b).abs().max())


def ours_direct(cfg: ClippedPGLossConfig, data: dict[str, torch.Tensor]) -> dict[str, Any]:
    """`clipped_pg_loss` on the whole batch with the global counts."""
    toks, seqs = global_counts(data)
    logprobs = data["curr_logprobs"].clone().requires_grad_(True)
    mask = data["token_mask"][:, 1:] * data["sample_mask"][:, None]
    loss, metrics = clipped_pg_loss(
        logprobs,
        data["prev_logprobs"][:, 1:],
        data["reference_policy_logprobs"][:, 1:],
        data["advantages"][:, 0],
        mask,
        cfg,
        global_valid_toks=toks,
        global_valid_seqs=seqs,
        generation_logprobs=data["generation_logprobs"][:, 1:],
    )
    loss.backward()
    return {"loss": loss.detach(), "grad": logprobs.grad, "metrics": metrics}


def ours_split_step(cfg: ClippedPGLossConfig, data: dict[str, torch.Tensor]) -> dict[str, Any]:
    """What the worker's split train step does: `loss_sum` per microbatch (our batch layout),
    gradients summed, one division by the global `valid_count` at the end; the metrics as a
    rank records them (`RecordingLossSum`'s raw sums over the microbatches)."""
    level = "token" if cfg.token_level_loss else "sequence"
    batch = {
        "input_ids": torch.zeros_like(data["token_mask"], dtype=torch.long),
        "token_mask": data["token_mask"],
        "sample_mask": data["sample_mask"],
        "advantages": data["advantages"][:, 0],
        "prev_logprobs": data["prev_logprobs"],
        "reference_policy_logprobs": data["reference_policy_logprobs"],
        "generation_logprobs": data["generation_logprobs"],
    }
    n = float(valid_count(batch, level))
    total = torch.zeros((), dtype=torch.float64)
    grads = []
    recorder = RecordingLossSum(cfg)
    for lo, hi in MICROBATCHES:
        part = {k: v[lo:hi] for k, v in batch.items()}
        logprobs = data["curr_logprobs"][lo:hi].clone().requires_grad_(True)
        mb = recorder(logprobs, part)
        assert torch.equal(mb, loss_sum(logprobs, part, cfg))
        mb.backward()
        total = total + mb.detach()
        assert logprobs.grad is not None
        grads.append(logprobs.grad)
    assert torch.equal(loss_mask(batch), data["token_mask"][:, 1:] * data["sample_mask"][:, None])
    return {"loss": total / n, "grad": torch.cat(grads) / n, "metric_sums": recorder.take()}


def loss_diffs(case: dict[str, Any], nrl: dict[str, Any]) -> dict[str, float]:
    """Max |ours - NeMo-RL| of each compared quantity of one loss case."""
    cfg = ClippedPGLossConfig(**case["cfg"])
    data = case["data"]
    direct = ours_direct(cfg, data)
    split = ours_split_step(cfg, data)
    toks, seqs = global_counts(data)
    scale = {"tokens": 1 / toks, "sequences": 1 / seqs, "none": 1.0}
    normalizers = metric_normalizers(cfg)
    diffs = {
        "loss": _diff(direct["loss"], nrl["loss"]),
        "grad": _diff(direct["grad"], nrl["grad"]),
        "split_loss": _diff(split["loss"], nrl["loss"]),
        "split_grad": _diff(split["grad"], nrl["grad"]),
        # NeMo-RL's own split way (counts 1, divide once) agrees with its direct call.
        "nrl_split_grad": _diff(
            nrl["mb_grad"] / (toks if cfg.token_level_loss else seqs), nrl["grad"]
        ),
    }
    for key in SHARED_METRICS:
        diffs[f"metric:{key}"] = _diff(direct["metrics"][key], nrl["metrics"][key])
        # Same denominator per metric as NeMo-RL advertises, and its rescaled microbatch
        # sums (what NeMo-RL's split step logs) equal our globally normalised metric.
        assert normalizers[key] == nrl["metric_normalizations"][key], key
        rescaled = sum(m[key] for m in nrl["mb_metrics"]) * scale[normalizers[key]]
        diffs[f"split_metric:{key}"] = _diff(direct["metrics"][key], rescaled)
        # What a rank records (raw sums) rescaled as the driver does equals NeMo-RL's metric.
        recorded = split["metric_sums"][key] * scale[normalizers[key]]
        diffs[f"recorded_metric:{key}"] = _diff(recorded, nrl["metrics"][key])
    return diffs


@pytest.mark.parametrize(("level", "clip", "dual", "kl_type", "beta"), LOSS_GRID)
def test_loss_value_gradient_metrics_match_nemo_rl(
    oracle: dict[str, dict[str, Any]], level: str, clip: str, dual: str, kl_type: str, beta: float
) -> None:
    name = loss_name(level, clip, dual, kl_type, beta)
    cases = build_loss_cases(name, (level, clip, dual, kl_type, beta))
    for suffix, case in cases.items():
        diffs = loss_diffs(case, oracle[f"{name}-{suffix}"])
        worst = {k: v for k, v in diffs.items() if not v <= TOL}
        assert not worst, f"{name}-{suffix}: {worst}"


def build_loss_cases(name: str, combo: tuple[str, str, str, str, float]) -> dict[str, Any]:
    """The 4 input variants of one configuration, as `build_cases` made them."""
    out = {}
    for masked, clamps in INPUTS:
        data = loss_inputs(masked, clamps)
        out[input_name(masked, clamps)] = {"cfg": loss_config(*combo), "data": data}
    return out


def test_kl_gradient_term_is_exercised(oracle: dict[str, dict[str, Any]]) -> None:
    """The grid is not vacuous: at beta > 0 the KL term moves the gradient (so the #2506
    score-function term is compared), the clamps bite, and the dual clip changes the loss."""
    base = "loss-token-sym0.2-nodual-k3"
    for suffix in ("all-unclamped", "all-clamped"):
        g0 = oracle[f"{base}-beta0.0-{suffix}"]["grad"]
        g1 = oracle[f"{base}-beta0.1-{suffix}"]["grad"]
        assert float((g1 - g0).abs().max()) > 1e-3
    clamped = (
        oracle[f"{base}-beta0.1-all-clamped"]["grad"]
        - oracle[f"{base}-beta0.0-all-clamped"]["grad"]
    )
    assert float(clamped[0, 2:6].abs().max()) == 0.0  # clamped tokens: no KL gradient
    dual = oracle["loss-token-sym0.2-dual3-k3-beta0.0-all-unclamped"]["loss"]
    plain = oracle["loss-token-sym0.2-nodual-k3-beta0.0-all-unclamped"]["loss"]
    assert abs(float(dual - plain)) > 1e-3


@pytest.mark.parametrize(("kl_type", "clamp"), list(itertools.product(KL_TYPES, KL_CLAMPS)))
def test_calculate_kl_matches_nemo_rl(
    oracle: dict[str, dict[str, Any]], kl_type: str, clamp: str
) -> None:
    ours = calculate_kl(**kl_args(kl_type, clamp))
    assert _diff(ours, oracle[f"kl-{kl_type}-{clamp}"]["kl"]) == 0.0


@pytest.mark.parametrize("name", ["all", "rows", "global"])
def test_masked_mean_matches_nemo_rl(oracle: dict[str, dict[str, Any]], name: str) -> None:
    ours = masked_mean(**masked_mean_args()[name])
    assert _diff(ours, oracle[f"masked_mean-{name}"]["mean"]) <= TOL


def advantage_diffs(name: str, loo: bool, norm: bool, nrl: dict[str, Any]) -> dict[str, float]:
    """Max |ours - NeMo-RL| of baseline, std and advantages of one reward set."""
    rewards, ids = advantage_inputs()[name]
    baseline, std = baseline_and_std(rewards, ids, leave_one_out=loo)
    advantages = group_advantages(rewards, ids, leave_one_out=loo, normalize=norm)
    assert advantages.dtype == torch.float64
    return {
        "baseline": _diff(baseline, nrl["baseline"]),
        "std": _diff(std, nrl["std"]),
        # NeMo-RL expands the per-sample advantage over the token mask.
        "advantages": _diff(advantages[:, None].expand_as(nrl["advantages"]), nrl["advantages"]),
    }


@pytest.mark.parametrize(
    ("name", "loo", "norm"),
    list(itertools.product(advantage_inputs(), (True, False), (True, False))),
)
def test_advantages_match_nemo_rl(
    oracle: dict[str, dict[str, Any]], name: str, loo: bool, norm: bool
) -> None:
    diffs = advantage_diffs(name, loo, norm, oracle[f"adv-{name}-loo{loo}-norm{norm}"])
    assert all(v <= TOL for v in diffs.values()), diffs


@pytest.mark.parametrize("name", ["binary", "continuous", "partial"])
def test_groups_with_reward_signal_are_those_nemo_rl_dynamic_sampling_keeps(
    oracle: dict[str, dict[str, Any]], name: str
) -> None:
    """``frac_groups_with_reward_signal``: the share of prompt groups whose NeMo-RL std
    (`calculate_baseline_and_std_per_prompt`, no leave-one-out) is non-zero, the groups its
    DAPO dynamic sampling keeps."""
    rewards, ids = advantage_inputs()[name]
    size = int((ids == ids[0]).sum())
    groups = len(ids) // size
    assert torch.equal(ids, torch.arange(groups).repeat_interleave(size))  # contiguous groups
    std = oracle[f"adv-{name}-looFalse-normTrue"]["std"]
    kept = sum(bool(std[g * size] != 0) for g in range(groups))
    if name != "continuous":
        assert 0 < kept < groups  # both kinds present: the comparison can fail
    ours = rollout_metrics(rewards.tolist(), size, [3] * len(rewards))
    assert ours["frac_groups_with_reward_signal"] == kept / groups


@pytest.mark.parametrize("name", list(REWARD_SHAPINGS))
def test_reward_shaping_matches_nemo_rl(oracle: dict[str, dict[str, Any]], name: str) -> None:
    rewards, cut, lengths = reward_shaping_inputs()
    ours = shape_rewards(rewards, lengths, cut, RewardShapingConfig(**REWARD_SHAPINGS[name]))
    theirs = oracle[f"shaping-{name}"]["rewards"]
    assert _diff(ours, theirs) <= TOL, (ours, theirs)
    if name != "off":
        assert not torch.equal(torch.as_tensor(theirs), rewards)  # the case shapes something

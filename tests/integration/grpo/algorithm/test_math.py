"""GRPO math on small tensors whose values were worked out by hand (see comments)."""

from __future__ import annotations

import math

import pytest
import torch
from mcore_grpo.config.loss import ClippedPGLossConfig
from mcore_grpo.grpo.algorithm.advantages import baseline_and_std, group_advantages
from mcore_grpo.grpo.algorithm.loss import calculate_kl, clipped_pg_loss

SQRT_THIRD = math.sqrt(1 / 3)


def test_leave_one_out_advantages_hand_checked() -> None:
    # Group 0 = [1, 0, 0, 1]. For a 1: the others are {0, 0, 1}: mean 1/3, sample var
    # (1/3 - 1/9) * 3/2 = 1/3. For a 0: others {0, 1, 1}: mean 2/3, var 1/3 as well.
    # Group 1 = [1, 1]: no variation -> advantage 0. Group 2 = [0.5]: alone -> 0.
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.5])
    groups = torch.tensor([0, 0, 0, 0, 1, 1, 2])
    baseline, std = baseline_and_std(rewards, groups, leave_one_out=True)
    torch.testing.assert_close(
        baseline.float(), torch.tensor([1 / 3, 2 / 3, 2 / 3, 1 / 3, 1.0, 1.0, 0.5])
    )
    torch.testing.assert_close(std[:4].float(), torch.full((4,), SQRT_THIRD))
    adv = group_advantages(rewards, groups)
    a = (2 / 3) / (SQRT_THIRD + 1e-6)
    torch.testing.assert_close(adv, torch.tensor([a, -a, -a, a, 0.0, 0.0, 0.0]))


def test_plain_mean_advantages_hand_checked() -> None:
    # Group [1, 0, 0, 1] without leave-one-out: baseline 0.5, sample std sqrt(1/3).
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0])
    groups = torch.zeros(4, dtype=torch.long)
    adv = group_advantages(rewards, groups, leave_one_out=False)
    a = 0.5 / (SQRT_THIRD + 1e-6)
    torch.testing.assert_close(adv, torch.tensor([a, -a, -a, a]))
    unnormalised = group_advantages(rewards, groups, leave_one_out=False, normalize=False)
    torch.testing.assert_close(unnormalised, torch.tensor([0.5, -0.5, -0.5, 0.5]))


def test_advantages_shape_error() -> None:
    with pytest.raises(ValueError, match="shape"):
        group_advantages(torch.zeros(3), torch.zeros(4, dtype=torch.long))


def test_kl_estimators_hand_checked() -> None:
    logp = torch.tensor([0.0])
    ref = torch.tensor([math.log(2.0)])  # logr = log 2
    assert calculate_kl(logp, ref, "k1").item() == pytest.approx(-math.log(2))
    assert calculate_kl(logp, ref, "k2").item() == pytest.approx(math.log(2) ** 2 / 2)
    assert calculate_kl(logp, ref, "k3").item() == pytest.approx(2 - 1 - math.log(2))
    # Clamps: logr = 30 -> input clamp 20 -> k3 = e^20 - 21 -> output clamp 10.
    assert calculate_kl(logp, torch.tensor([30.0]), "k3").item() == pytest.approx(10.0)


def _no_kl(**kw: object) -> ClippedPGLossConfig:
    return ClippedPGLossConfig(reference_policy_kl_penalty=0.0, **kw)  # type: ignore[arg-type]


def test_clipped_loss_hand_checked_token_level() -> None:
    # Token ratios 1.5 (clipped to 1.2) and 1.0; advantages +1 and -1 per sequence.
    # A=+1, r=1.5: max(-1.5, -1.2) = -1.2. A=+1, r=1: -1.
    # A=-1, r=1.5: max(1.5, 1.2) = 1.5.   A=-1, r=1: 1. Last token masked out.
    prev = torch.zeros(2, 3)
    cur = torch.tensor([[math.log(1.5), 0.0, 5.0], [math.log(1.5), 0.0, 5.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 0]])
    adv = torch.tensor([1.0, -1.0])
    loss, m = clipped_pg_loss(
        cur, prev, cur, adv, mask, _no_kl(), global_valid_toks=4, global_valid_seqs=2
    )
    assert loss.item() == pytest.approx((-1.2 - 1 + 1.5 + 1) / 4)
    assert m["clip_fraction"].item() == pytest.approx(1 / 4)  # only the A=+1, r=1.5 token
    # Dual clip c=1.2 bounds negative-advantage tokens by -A*c = 1.2: 1.5 -> 1.2.
    dual, _ = clipped_pg_loss(
        cur,
        prev,
        cur,
        adv,
        mask,
        _no_kl(ratio_clip_c=1.2),
        global_valid_toks=4,
        global_valid_seqs=2,
    )
    assert dual.item() == pytest.approx((-1.2 - 1 + 1.2 + 1) / 4)


def test_sequence_level_normalisation_hand_checked() -> None:
    # Ratio 1 everywhere -> per-token loss is -A. Seq 0 (A=2) has 1 valid token, seq 1
    # (A=-1) has 3: token level (-2 + 3) / 4 = 0.25; sequence level (-2 + 1) / 2 = -0.5.
    lp = torch.zeros(2, 3)
    mask = torch.tensor([[1, 0, 0], [1, 1, 1]])
    adv = torch.tensor([2.0, -1.0])
    tok, _ = clipped_pg_loss(
        lp, lp, lp, adv, mask, _no_kl(), global_valid_toks=4, global_valid_seqs=2
    )
    seq, _ = clipped_pg_loss(
        lp,
        lp,
        lp,
        adv,
        mask,
        _no_kl(token_level_loss=False),
        global_valid_toks=4,
        global_valid_seqs=2,
    )
    assert tok.item() == pytest.approx(0.25)
    assert seq.item() == pytest.approx(-0.5)


def test_kl_penalty_and_gradient() -> None:
    # A = 0 so only the KL term is left: beta * k3 with logr = logp_ref - logp = log 2 on
    # both tokens. Value: k3 = 2 - 1 - log 2 per token, mean over the 2 tokens.
    cur = torch.zeros(1, 2, requires_grad=True)
    ref = torch.full((1, 2), math.log(2.0))
    beta = 0.1
    cfg = ClippedPGLossConfig(reference_policy_kl_penalty=beta)
    loss, m = clipped_pg_loss(
        cur,
        cur.detach(),
        ref,
        torch.zeros(1),
        torch.ones(1, 2),
        cfg,
        global_valid_toks=2,
        global_valid_seqs=1,
    )
    k3 = 2 - 1 - math.log(2)
    assert m["kl_penalty"].item() == pytest.approx(k3)  # NeMo-RL's metric: the UNSCALED KL
    assert loss.item() == pytest.approx(beta * k3)
    loss.backward()
    # The tokens are samples of the policy being optimised, so the gradient of the expected
    # KL, grad E_{a~pi}[k(a)] = E[k(a) grad logp(a) + grad k(a)], has a score-function term
    # (NeMo-RL #2506, https://arxiv.org/abs/2506.09477). Per token, by hand:
    #   k(a) * dlogp/dlogp = k3 = 1 - log 2
    #   dk3/dlogp = d/dlogp [exp(ref - logp) - 1 - (ref - logp)] = -exp(log 2) + 1 = -1
    # sum = -log 2; times beta / 2 tokens = -0.05 log 2 = -0.034657 (NeMo-RL: -0.0347; the
    # pre-#2506 gradient without the score term was -0.05).
    assert cur.grad is not None
    expected = beta / 2 * ((1 - math.log(2)) + (1 - 2.0))
    assert expected == pytest.approx(-0.034657, abs=1e-6)
    torch.testing.assert_close(cur.grad, torch.full((1, 2), expected))


def test_clamped_kl_tokens_have_no_gradient() -> None:
    # Token 0: logr = 30 > input clamp 20 -> KL constant, weight detached: no gradient.
    # Token 1: k3 at logr = 15 is e^15 - 16 > output clamp 10 -> clamped: no gradient.
    # Token 2: unclamped, logr = 0: k3 = 0 and dk3/dlogp = 1 - e^0 = 0: no gradient either;
    # token 3: logr = log 2 as above: beta / 4 tokens * (1 - log 2 - 1).
    cur = torch.zeros(1, 4, requires_grad=True)
    ref = torch.tensor([[30.0, 15.0, 0.0, math.log(2.0)]])
    loss, m = clipped_pg_loss(
        cur,
        cur.detach(),
        ref,
        torch.zeros(1),
        torch.ones(1, 4),
        ClippedPGLossConfig(reference_policy_kl_penalty=0.1),
        global_valid_toks=4,
        global_valid_seqs=1,
    )
    assert m["kl_penalty"].item() == pytest.approx((10 + 10 + 0 + 1 - math.log(2)) / 4)
    loss.backward()
    assert cur.grad is not None
    torch.testing.assert_close(cur.grad, torch.tensor([[0.0, 0.0, 0.0, -0.1 * math.log(2) / 4]]))


def test_microbatch_losses_sum_to_full_batch() -> None:
    # Global normalisation: the two halves' losses add up to the whole batch's loss.
    g = torch.Generator().manual_seed(0)
    cur, prev, ref = (torch.randn(4, 5, generator=g) * 0.1 for _ in range(3))
    mask = (torch.rand(4, 5, generator=g) > 0.3).long()
    adv = torch.randn(4, generator=g)
    cfg = ClippedPGLossConfig()
    toks, seqs = int(mask.sum()), 4
    full, _ = clipped_pg_loss(
        cur, prev, ref, adv, mask, cfg, global_valid_toks=toks, global_valid_seqs=seqs
    )
    halves = [
        clipped_pg_loss(
            cur[s],
            prev[s],
            ref[s],
            adv[s],
            mask[s],
            cfg,
            global_valid_toks=toks,
            global_valid_seqs=seqs,
        )[0]
        for s in (slice(0, 2), slice(2, 4))
    ]
    torch.testing.assert_close(halves[0] + halves[1], full)


def test_config_validation() -> None:
    with pytest.raises(ValueError, match="reference_policy_kl_type"):
        ClippedPGLossConfig(reference_policy_kl_type="k4")
    with pytest.raises(ValueError, match="ratio_clip_c"):
        ClippedPGLossConfig(ratio_clip_c=0.5)

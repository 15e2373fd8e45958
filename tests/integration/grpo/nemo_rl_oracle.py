"""NeMo-RL's own GRPO maths as the oracle: run in a subprocess by test_nemo_rl_parity.py.

``python tests/integration/grpo/nemo_rl_oracle.py CASES.pt OUT.pt`` imports NeMo-RL from
3rdparty/NeMo-RL (never installed) and evaluates every case of CASES.pt with NeMo-RL's real
functions -- `ClippedPGLossFn` (value, gradient, metrics, `metric_normalizations`),
`calculate_kl`, `masked_mean`, `calculate_baseline_and_std_per_prompt`,
`GRPOAdvantageEstimator`, `apply_reward_shaping` -- in float64, and writes the results to
OUT.pt.

A subprocess, because importing NeMo-RL has process-wide side effects (logging.basicConfig,
``RAY_ENABLE_UV_RUN_RUNTIME_ENV=0`` and ``RAY_USAGE_STATS_ENABLED=0`` in os.environ, patches
from its generation modules) that other tests in the pytest process must not see.

Imports NeMo-RL makes on the way to these modules that are NOT on the compared paths are
stubbed (`ORACLE_STUBS`, each with its reason); torch, pydantic, numpy and ray are real.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[3]

# Module-level imports of nemo_rl.algorithms.{utils,loss,advantage_estimator} and what they
# pull in (nemo_rl.models.policy -> generation/vllm workers, nemo_rl.utils.logger). None is
# called by ClippedPGLossFn.__call__, calculate_kl, masked_mean, the baseline/std function or
# GRPOAdvantageEstimator.
ORACLE_STUBS: dict[str, str] = {
    "transformers": (
        "tokenizer/processor imports of nemo_rl.algorithms.utils and the model registries; "
        "stubbed so the oracle's import stays light and independent of the installed version "
        "(the `nemo-rl` group installs 5.8.1; NeMo-RL asserts < 5.12 on import)"
    ),
    "nemo_automodel": "DTensor v2 model classes (vlm registry); not installed here",
    "torch.utils.tensorboard": "logger backend (needs the tensorboard package)",
    "wandb": "logger backend",
    "mlflow": "logger backend",
    "swanlab": "logger backend",
    "prometheus_client": "metrics export of the vLLM/generation servers",
    "pynvml": "NVML memory diagnostics (nemo_rl.utils.nvml)",
    "fastapi": "HTTP servers of the generation/refit paths",
    "uvicorn": "HTTP servers of the generation/refit paths",
    "hydra": "get_class for config-driven classes",
    "zmq": "IPC sockets of the refit path (nemo_rl.models.policy.utils)",
}


def _import_nemo_rl() -> dict[str, Any]:
    sys.path.insert(0, str(REPO_ROOT))
    from tests.patches.nemo_rl.heavy_import_stubs import stubbed_imports
    from tests.support.upstream_tree import upstream_tree

    # Appended, not prepended: NeMo-RL's own top-level `tests` package must not shadow ours.
    sys.path.append(str(upstream_tree("NeMo-RL")))
    # importlib, not `import`: NeMo-RL is on sys.path only at run time (not for the checker).
    with stubbed_imports(list(ORACLE_STUBS)):
        estimators = importlib.import_module("nemo_rl.algorithms.advantage_estimator")
        losses = importlib.import_module("nemo_rl.algorithms.loss.loss_functions")
        utils = importlib.import_module("nemo_rl.algorithms.utils")
        shaping = importlib.import_module("nemo_rl.algorithms.reward_functions")
        batched = importlib.import_module("nemo_rl.distributed.batched_data_dict")
    return {
        "BatchedDataDict": batched.BatchedDataDict,
        "RewardShapingConfig": shaping.RewardShapingConfig,
        "apply_reward_shaping": shaping.apply_reward_shaping,
        "AdvEstimatorConfig": estimators.AdvEstimatorConfig,
        "GRPOAdvantageEstimator": estimators.GRPOAdvantageEstimator,
        "ClippedPGLossConfig": losses.ClippedPGLossConfig,
        "ClippedPGLossFn": losses.ClippedPGLossFn,
        "calculate_baseline_and_std_per_prompt": utils.calculate_baseline_and_std_per_prompt,
        "calculate_kl": utils.calculate_kl,
        "masked_mean": utils.masked_mean,
    }


def _loss_case(nrl: dict[str, Any], case: dict[str, Any]) -> dict[str, Any]:
    import torch

    fn = nrl["ClippedPGLossFn"](nrl["ClippedPGLossConfig"](**case["cfg"]))
    data = case["data"]

    def run(rows: slice, toks: Any, seqs: Any) -> tuple[Any, Any, dict[str, Any]]:
        logprobs = data["curr_logprobs"][rows].clone().requires_grad_(True)
        part = {k: v[rows] for k, v in data.items() if k != "curr_logprobs"}
        loss, metrics = fn(logprobs, part, torch.tensor(seqs), torch.tensor(toks))
        loss.backward()
        return loss.detach(), logprobs.grad, metrics

    full = slice(None)
    loss, grad, metrics = run(full, case["global_valid_toks"], case["global_valid_seqs"])
    # The split step's way: each microbatch with placeholder counts 1 (raw sums), summed.
    mb_losses, mb_grads, mb_metrics = [], [], []
    for rows in case["microbatches"]:
        mb_loss, mb_grad, mb_metric = run(slice(*rows), 1.0, 1.0)
        mb_losses.append(mb_loss)
        mb_grads.append(mb_grad)
        mb_metrics.append(mb_metric)
    return {
        "loss": loss,
        "grad": grad,
        "metrics": metrics,
        "mb_loss_sum": sum(mb_losses),
        "mb_grad": torch.cat(mb_grads),
        "mb_metrics": mb_metrics,
        "metric_normalizations": {k: v.value for k, v in fn.metric_normalizations.items()},
    }


def _kl_case(nrl: dict[str, Any], case: dict[str, Any]) -> dict[str, Any]:
    return {"kl": nrl["calculate_kl"](**case["args"])}


def _masked_mean_case(nrl: dict[str, Any], case: dict[str, Any]) -> dict[str, Any]:
    return {"mean": nrl["masked_mean"](**case["args"])}


def _advantage_case(nrl: dict[str, Any], case: dict[str, Any]) -> dict[str, Any]:
    import torch

    rewards, prompts = case["rewards"], case["prompt_ids"]
    loo, normalize = case["leave_one_out"], case["normalize"]
    baseline, std = nrl["calculate_baseline_and_std_per_prompt"](
        prompts, rewards, torch.ones_like(rewards), leave_one_out_baseline=loo
    )
    estimator = nrl["GRPOAdvantageEstimator"](
        nrl["AdvEstimatorConfig"](normalize_rewards=normalize, use_leave_one_out_baseline=loo),
        nrl["ClippedPGLossConfig"](),
    )
    mask = torch.ones(len(rewards), 3, dtype=rewards.dtype)
    advantages = estimator.compute_advantage(prompt_ids=prompts, rewards=rewards, mask=mask)
    return {"baseline": baseline, "std": std, "advantages": advantages}


def _reward_shaping_case(nrl: dict[str, Any], case: dict[str, Any]) -> dict[str, Any]:
    batch = nrl["BatchedDataDict"](
        {
            "total_reward": case["rewards"].clone(),
            "truncated": case["truncated"],
            "response_token_lengths": case["lengths"],
        }
    )
    shaped = nrl["apply_reward_shaping"](batch, nrl["RewardShapingConfig"](**case["cfg"]))
    return {"rewards": shaped["total_reward"]}


_KINDS = {
    "reward_shaping": _reward_shaping_case,
    "loss": _loss_case,
    "kl": _kl_case,
    "masked_mean": _masked_mean_case,
    "advantage": _advantage_case,
}


def main(cases_path: str, out_path: str) -> None:
    import torch

    nrl = _import_nemo_rl()
    # float64 throughout: NeMo-RL builds some tensors with the default dtype (the baseline's
    # torch.eye / torch.ones mask matrix), which would otherwise be float32.
    torch.set_default_dtype(torch.float64)
    cases = torch.load(cases_path, weights_only=False)
    out = {name: _KINDS[case["kind"]](nrl, case) for name, case in cases.items()}
    torch.save(out, out_path)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

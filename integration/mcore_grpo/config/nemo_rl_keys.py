"""NeMo-RL config keys read specially: the ones this project refuses on purpose (with
NeMo-RL's default and why), the ones NeMo-RL's example configs write as interpolations, and
the settings both configs share (`shared_settings`: the NeMo-RL driver's overrides, derived).

`mcore_grpo.config.loader` consults both while it builds the schema
(`mcore_grpo.config.schema`), so a NeMo-RL user's YAML loads or is refused with the reason.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection
from typing import Any

from mcore_grpo.config.schema import ConfigError

# NeMo-RL keys this project does not implement ON PURPOSE, with NeMo-RL's default and why.
# A config may spell one at NeMo-RL's default (it asks for what runs here anyway, so NeMo-RL's
# example YAMLs load); any other value is refused with the reason.
_NOT_IMPLEMENTED_LOSS = "not implemented in mcore_grpo.grpo.algorithm.loss"
REFUSED_NEMO_RL_KEYS: dict[str, tuple[Any, str]] = {
    "loss_fn.use_importance_sampling_correction": (
        False,
        "the sampler here is the trained model itself (no separate inference engine), so "
        "there is no train/generation mismatch to correct; " + _NOT_IMPLEMENTED_LOSS,
    ),
    "loss_fn.truncated_importance_sampling_type": (
        None,
        "needs loss_fn.use_importance_sampling_correction (refused)",
    ),
    "loss_fn.truncated_importance_sampling_ratio": (
        None,
        "needs loss_fn.use_importance_sampling_correction (refused)",
    ),
    "loss_fn.truncated_importance_sampling_ratio_min": (
        None,
        "needs loss_fn.use_importance_sampling_correction (refused)",
    ),
    "loss_fn.sequence_level_importance_ratios": (False, "GSPO is " + _NOT_IMPLEMENTED_LOSS),
    "loss_fn.disable_ppo_ratio": (
        False,
        "REINFORCE/RLOO without the ratio is " + _NOT_IMPLEMENTED_LOSS,
    ),
    "loss_fn.use_cispo": (False, "CISPO is " + _NOT_IMPLEMENTED_LOSS),
    "loss_fn.use_on_policy_kl_approximation": (
        False,
        "its KL weights exp(logp - generation_logp) need the importance-sampling path; "
        + _NOT_IMPLEMENTED_LOSS,
    ),
    "loss_fn.force_on_policy_ratio": (False, _NOT_IMPLEMENTED_LOSS),
    "loss_fn.use_kl_in_reward": (
        False,
        "the KL-in-reward path belongs to NeMo-RL's Reinforce++ estimator, which is not "
        "implemented (grpo.adv_estimator.name must be 'grpo')",
    ),
    "loss_fn.positive_example_nll_weight": (0.0, "VAPO's NLL term is " + _NOT_IMPLEMENTED_LOSS),
    "grpo.adv_estimator.reward_weights": (
        None,
        "read only by NeMo-RL's GDPO estimator, which is not implemented "
        "(grpo.adv_estimator.name must be 'grpo')",
    ),
}


def check_refused_key(key: str, value: Any, where: str) -> bool:
    """True if `key` is a refused NeMo-RL key at NeMo-RL's default (drop it); raises
    `ConfigError` with the reason for any other value; False for every other key."""
    if key not in REFUSED_NEMO_RL_KEYS:
        return False
    default, reason = REFUSED_NEMO_RL_KEYS[key]
    if value == default and type(value) is type(default):
        return True
    raise ConfigError(
        f"'{key}={_yaml_scalar(value)}' ({where}) is refused: {reason}. NeMo-RL's default "
        f"{key}={_yaml_scalar(default)} is accepted."
    )


def _yaml_scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


# NeMo-RL's example configs (examples/configs/grpo_math_1B.yaml) write these two keys as
# OmegaConf interpolations of the grpo.* ones; the same text here means "unset" (null).
INTERPOLATED_DEFAULTS: dict[str, str] = {
    "grpo.adv_estimator.normalize_rewards": "${grpo.normalize_rewards}",
    "grpo.adv_estimator.use_leave_one_out_baseline": "${grpo.use_leave_one_out_baseline}",
}


def field_paths(section: Any, prefix: str = "") -> dict[str, Any]:
    """Every setting of a config dataclass (`RunConfig`, or one section) by its dotted key
    (``policy.megatron_cfg.optimizer.lr``), the key a YAML config spells it by."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(section):
        value = getattr(section, f.name)
        if dataclasses.is_dataclass(value):
            out |= field_paths(value, f"{prefix}{f.name}.")
        else:
            out[f"{prefix}{f.name}"] = value
    return out


def shared_settings(config: Any, nemo_rl_keys: Collection[str]) -> dict[str, Any]:
    """The settings of `config` (a `RunConfig`) that NeMo-RL has too, derived from the two
    schemas: every field whose dotted key is one of `nemo_rl_keys` (NeMo-RL's config, flattened
    the same way), with its value. Our keys are NeMo-RL's names, so nothing is listed twice; a
    key NeMo-RL's config writes as an interpolation of another (INTERPOLATED_DEFAULTS) is left
    to it where ours is unset (None), as in NeMo-RL."""
    return {
        key: value
        for key, value in field_paths(config).items()
        if key in nemo_rl_keys and not (value is None and key in INTERPOLATED_DEFAULTS)
    }

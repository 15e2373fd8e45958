"""Run config: presets, YAML files, key=value overrides and their errors; the task's reward."""

from __future__ import annotations

from pathlib import Path

import pytest
from mcore_grpo.cli import main
from mcore_grpo.config.loader import load_config, preset_names
from mcore_grpo.config.schema import ConfigError, check_data_parallel, unused_settings
from mcore_grpo.grpo.tasks.task import DigitAddTask, build_task, score_response


def test_presets_load_and_defaults() -> None:
    assert {"cpu-tiny", "qwen2.5-1.5b-math", "qwen3-30b-a3b"} <= set(preset_names())
    cfg = load_config()
    assert cfg.policy.device == "cpu"
    assert cfg.samples_per_step % cfg.policy.train_global_batch_size == 0
    big = load_config("qwen3-30b-a3b")
    # The seed's working configuration.
    assert (big.grpo.num_prompts_per_step, big.grpo.num_generations_per_prompt) == (16, 8)
    assert big.policy.train_global_batch_size == 64
    assert big.policy.max_total_sequence_length == 1024
    mcore = big.policy.generation.mcore_generation_config
    assert mcore.unified_memory_level == 1
    assert mcore.kv_cache_management_mode == "offload"
    assert mcore.reset_cuda_graphs
    assert mcore.cuda_graph_impl == "full_iteration"
    assert load_config("qwen2.5-1.5b-math").policy.megatron_cfg.tensor_model_parallel_size == 2


def test_overrides_as_nemo_rl_users_type_them() -> None:
    cfg = load_config(
        overrides=[
            "grpo.max_num_steps=7",
            "policy.megatron_cfg.optimizer.lr=1e-4",  # PyYAML reads this as a string
            "loss_fn.ratio_clip_c=3",
            "policy.generation.stop_token_ids=[2, 3]",
            "loss_fn.kl_input_clamp_value=null",
        ]
    )
    assert cfg.grpo.max_num_steps == 7
    assert cfg.policy.megatron_cfg.optimizer.lr == pytest.approx(1e-4)
    assert cfg.loss_fn.ratio_clip_c == 3.0
    assert cfg.policy.generation.stop_token_ids == [2, 3]
    assert cfg.loss_fn.kl_input_clamp_value is None


@pytest.mark.parametrize(
    ("override", "closest"),
    [
        ("grpo.max_steps=3", "grpo.max_num_steps"),
        ("grpo.num_prompt_per_step=3", "grpo.num_prompts_per_step"),
        (
            "policy.megatron_cfg.tensor_parallel_size=2",
            "policy.megatron_cfg.tensor_model_parallel_size",
        ),
        ("policy.train_global_batchsize=8", "policy.train_global_batch_size"),
    ],
)
def test_unknown_key_names_closest(override: str, closest: str) -> None:
    key = override.split("=")[0]
    with pytest.raises(ConfigError, match=rf"unknown config key '{key}'.*did you mean '{closest}'"):
        load_config(overrides=[override])


@pytest.mark.parametrize("key", ["grpo.no_such_key", "policy.zzz", "loss_fn.colour"])
def test_an_unknown_key_sharing_no_word_with_any_gets_no_suggestion(key: str) -> None:
    with pytest.raises(ConfigError, match=rf"unknown config key '{key}'") as raised:
        load_config(overrides=[f"{key}=1"])
    assert "did you mean" not in str(raised.value)


def test_value_and_shape_errors() -> None:
    with pytest.raises(ConfigError, match=r"'grpo.max_num_steps'.*must be int"):
        load_config(overrides=["grpo.max_num_steps=many"])
    with pytest.raises(ConfigError, match=r"not key=value"):
        load_config(overrides=["grpo.max_num_steps"])
    with pytest.raises(ConfigError, match=r"is a section"):
        load_config(overrides=["grpo=3"])
    with pytest.raises(ConfigError, match=r"not a multiple of policy.train_global_batch_size"):
        load_config(overrides=["policy.train_global_batch_size=48"])
    with pytest.raises(ConfigError, match=r"num_generations_per_prompt must be >= 2"):
        load_config(overrides=["grpo.num_generations_per_prompt=1"])
    with pytest.raises(ConfigError, match=r"reference_policy_kl_type"):
        load_config(overrides=["loss_fn.reference_policy_kl_type=k9"])
    with pytest.raises(ConfigError, match=r"needs loss_fn.reference_policy_kl_penalty=0 \(it is"):
        load_config(overrides=["grpo.skip_reference_policy_logprobs_calculation=true"])
    with pytest.raises(
        ConfigError,
        match=r"task.math_verify_impl='qwen'.*knows hf_math_verify and dapo_math_verify",
    ):
        load_config(overrides=["task.math_verify_impl=qwen"])
    with pytest.raises(ConfigError, match=r"overrides: checkpointing.checkpoint_must_save_by='3h'"):
        load_config(overrides=["checkpointing.checkpoint_must_save_by=3h"])
    with pytest.raises(ConfigError, match=r"unknown preset 'cpu-tiyn'.*did you mean 'cpu-tiny'"):
        load_config("cpu-tiyn")
    with pytest.raises(ConfigError, match=r"must split into data-parallel size 3"):
        check_data_parallel(load_config(), 3)


def test_yaml_file_with_defaults_chain(tmp_path: Path) -> None:
    base = tmp_path / "base.yaml"
    base.write_text("defaults: cpu-tiny\ngrpo:\n  max_num_steps: 11\n")
    child = tmp_path / "child.yaml"
    child.write_text("defaults: base.yaml\npolicy:\n  train_micro_batch_size: 8\n")
    cfg = load_config(None, child, ["grpo.seed=5"])
    assert (cfg.grpo.max_num_steps, cfg.policy.train_micro_batch_size, cfg.grpo.seed) == (11, 8, 5)
    assert cfg.policy.train_global_batch_size == 64  # from cpu-tiny
    bad = tmp_path / "bad.yaml"
    bad.write_text("grpo:\n  num_prompts_per_stp: 4\n")
    with pytest.raises(ConfigError, match=r"'grpo.num_prompts_per_stp' \(.*bad.yaml\)"):
        load_config(None, bad)


def test_cli_config_error_exit_code(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["grpo.max_steps=3"]) == 2
    assert "did you mean 'grpo.max_num_steps'" in capsys.readouterr().err


def test_gpu_presets_refuse_on_cpu(capsys: pytest.CaptureFixture[str]) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the refusal is for CPU machines")
    for preset in ("qwen2.5-1.5b-math", "qwen3-30b-a3b"):
        assert main(["--preset", preset]) == 2
        err = capsys.readouterr().err
        assert "needs CUDA GPUs" in err and "cpu-tiny" in err


def test_reward_function() -> None:
    eos, answer = 2, 7
    assert score_response([answer, eos], answer, eos) == 1.0
    assert score_response([answer], answer, eos) == 0.5  # stopped by the length limit
    assert score_response([answer, answer], answer, eos) == 0.5
    assert score_response([answer - 1, eos], answer, eos) == 0.0
    assert score_response([eos], answer, eos) == 0.0
    assert score_response([], answer, eos) == 0.0


def test_task_problems_and_tokenizer() -> None:
    task = build_task("digit-add", max_addend=2)
    problem = task.problem(9, 2)
    assert problem.answer == 1
    assert task.decode(problem.prompt_ids) == "<bos> 9 + 2 ="
    assert task.reward([task.token_id("1"), task.eos_id], problem) == 1.0
    assert len(task.all_problems()) == 20
    assert task.sample_problems(5, seed=1, step=3) == task.sample_problems(5, seed=1, step=3)
    assert task.sample_problems(5, seed=1, step=3) != task.sample_problems(5, seed=1, step=4)
    with pytest.raises(ValueError, match=r"task.max_addend"):
        DigitAddTask(max_addend=10)


def test_every_parallel_and_precision_setting_reaches_the_worker() -> None:
    """The seed's 30B preset: EP=8, sequence parallel and bf16 must reach WorkerConfig, not be
    parsed and dropped; the engine-only generation settings are reported as unused."""
    from mcore_grpo.grpo.ranks.messages import TaskTokens
    from mcore_grpo.grpo.ranks.worker_settings import worker_config

    config = load_config("qwen3-30b-a3b")
    worker = worker_config(config, TaskTokens(vocab_size=15, pad_id=0, eos_id=1)).validate()
    p = worker.parallel
    assert (p.tensor_model_parallel_size, p.expert_model_parallel_size) == (2, 8)
    assert (p.expert_tensor_parallel_size, p.sequence_parallel) == (1, True)
    assert worker.precision == "bfloat16"
    assert unused_settings(config) == [
        "policy.generation.mcore_generation_config.unified_memory_level=1",
        "policy.generation.mcore_generation_config.kv_cache_management_mode=offload",
        "policy.generation.mcore_generation_config.reset_cuda_graphs=True",
        "policy.generation.mcore_generation_config.cuda_graph_impl=full_iteration",
    ]
    assert unused_settings(load_config("cpu-tiny")) == []


@pytest.mark.parametrize(
    ("override", "error"),
    [
        ("policy.megatron_cfg.context_parallel_size=2", "context_parallel_size > 1 is not"),
        ("policy.megatron_cfg.expert_model_parallel_size=2", "needs a mixture-of-experts"),
        ("policy.megatron_cfg.sequence_parallel=true", "needs tensor_model_parallel_size > 1"),
    ],
)
def test_settings_the_cpu_worker_cannot_honour_are_refused(override: str, error: str) -> None:
    from mcore_grpo.grpo.ranks.messages import TaskTokens
    from mcore_grpo.grpo.ranks.worker_settings import worker_config

    config = load_config("cpu-tiny", overrides=[override])
    with pytest.raises((ValueError, NotImplementedError), match=error):
        worker_config(config, TaskTokens(vocab_size=15, pad_id=0, eos_id=1)).validate()


def test_adv_estimator_keys_follow_nemo_rl_precedence(tmp_path: Path) -> None:
    """grpo.adv_estimator.* wins when set; unset (or NeMo-RL's `${grpo.*}` text) it follows
    grpo.* -- the precedence of NeMo-RL's examples/configs/grpo_math_1B.yaml."""
    cfg = load_config(overrides=["grpo.normalize_rewards=false"])
    assert (cfg.grpo.advantage_normalize_rewards, cfg.grpo.advantage_leave_one_out) == (False, True)
    cfg = load_config(
        overrides=[
            "grpo.normalize_rewards=false",
            "grpo.adv_estimator.normalize_rewards=true",
            "grpo.adv_estimator.use_leave_one_out_baseline=false",
        ]
    )
    assert (cfg.grpo.advantage_normalize_rewards, cfg.grpo.advantage_leave_one_out) == (True, False)
    nemo_rl_style = tmp_path / "nemo_rl_style.yaml"
    nemo_rl_style.write_text(
        "defaults: cpu-tiny\n"
        "grpo:\n"
        "  use_leave_one_out_baseline: false\n"
        "  adv_estimator:\n"
        '    name: "grpo"\n'
        "    normalize_rewards: ${grpo.normalize_rewards}\n"
        "    use_leave_one_out_baseline: ${grpo.use_leave_one_out_baseline}\n"
        "    minus_baseline: true\n"
        "loss_fn:\n"
        "  use_importance_sampling_correction: false\n"
        "  truncated_importance_sampling_ratio: null\n"
    )
    cfg = load_config(None, nemo_rl_style)
    assert (cfg.grpo.advantage_normalize_rewards, cfg.grpo.advantage_leave_one_out) == (True, False)


@pytest.mark.parametrize(
    ("override", "reason"),
    [
        ("grpo.adv_estimator.name=reinforce_plus_plus", r"only NeMo-RL's 'grpo' estimator"),
        ("grpo.adv_estimator.reward_weights=[1, 2]", r"refused: read only by NeMo-RL's GDPO"),
        ("loss_fn.use_importance_sampling_correction=true", r"refused: the sampler here is"),
        ("loss_fn.use_cispo=true", r"refused: CISPO is not implemented"),
        ("loss_fn.use_kl_in_reward=true", r"refused: the KL-in-reward path"),
        ("loss_fn.positive_example_nll_weight=0.1", r"default .*=0.0 is accepted"),
    ],
)
def test_nemo_rl_keys_we_differ_on_are_refused_with_the_reason(override: str, reason: str) -> None:
    with pytest.raises(ConfigError, match=reason):
        load_config(overrides=[override])

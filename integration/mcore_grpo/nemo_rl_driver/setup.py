"""The pieces `grpo_train` takes, built as NeMo-RL's `setup()` builds them, on CPU actors.

NeMo-RL's `setup()` places its workers on a `RayVirtualCluster(use_gpus=True)`; here the same
pieces come from NeMo-RL's own classes where NeMo-RL has them -- the `RayVirtualCluster`
(`cluster.VirtualClusterPlacement`, on this machine's Ray or the cluster at ``RAY_ADDRESS``),
`MasterConfig`, `Logger`,
`CheckpointManager` and the GRPO save state, `ClippedPGLossFn`, `AllTaskProcessedDataset` in a
`StatefulDataLoader`, the Megatron weight synchronizer -- and from this package where the
worker is ours: the policy and its colocated generation over `NemoRLRank` actors (CPU, gloo),
the task as an environment actor, the task tokenizer. A math task (a real pretrained model)
takes NeMo-RL's own pieces there too: its `math_hf_data_processor` renders the prompts with the
checkpoint's tokenizer and chat template, its `MathEnvironment` (``task.math_verify_impl``)
scores them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcore_grpo.config.schema import ConfigError, RunConfig, check_data_parallel
from mcore_grpo.grpo.cluster.local_ray import ADDRESS_ENV, start_local_ray, stop_local_ray
from mcore_grpo.grpo.cluster.ray_import import before_ray_import
from mcore_grpo.grpo.nemo_rl.source import require_nemo_rl
from mcore_grpo.grpo.ranks.messages import TaskTokens
from mcore_grpo.grpo.ranks.runner import RayRunner
from mcore_grpo.grpo.tasks.math_task import MathTask, make_task
from mcore_grpo.grpo.tasks.task import DigitAddTask, Task
from mcore_grpo.nemo_rl_driver.config import master_config
from mcore_grpo.nemo_rl_driver.data import MATH_ENV, build_dataloader, build_math_dataloader
from mcore_grpo.nemo_rl_driver.tokenizer import task_tokenizer


@dataclass
class NemoRLRun:
    """Everything `grpo_train` is called with, plus what the caller must shut down."""

    policy: Any
    generation: Any
    dataloader: Any
    tokenizer: Any
    loss_fn: Any
    task_to_env: dict[str, Any]
    logger: Any
    checkpointer: Any
    save_state: Any
    master_config: Any

    def train(self) -> None:
        """NeMo-RL's `grpo_train` over these pieces (no validation set)."""
        from nemo_rl.algorithms.grpo import grpo_train

        grpo_train(
            self.policy,
            self.generation,
            self.dataloader,
            None,
            self.tokenizer,
            self.loss_fn,
            self.task_to_env,
            None,
            self.logger,
            self.checkpointer,
            self.save_state,
            self.master_config,
        )

    def shutdown(self) -> None:
        """Stop the environment actors, the policy actors and Ray (if started here)."""
        import ray

        for env in self.task_to_env.values():
            ray.kill(env, no_restart=True)
        self.logger.finish()
        self.policy.shutdown()
        stop_local_ray()


def setup_run(
    config: RunConfig, workers: int, output_dir: Path, *, resume: bool = False
) -> NemoRLRun:
    """Build the pieces; Ray actors start here (one `NemoRLRank` per worker). `resume`: from
    the newest NeMo-RL checkpoint in `output_dir`, as NeMo-RL's `setup()` resumes (its save
    state, its dataloader state, the policy's weights and optimizer)."""
    require_nemo_rl()
    from nemo_rl.algorithms.grpo import _get_grpo_save_state
    from nemo_rl.algorithms.loss.loss_functions import ClippedPGLossFn
    from nemo_rl.algorithms.utils import set_seed
    from nemo_rl.utils.checkpoint import CheckpointManager
    from nemo_rl.utils.logger import Logger

    output_dir = output_dir.resolve()  # Ray actors run in their own working directory
    dp = check_data_parallel(config, workers)
    task = make_task(config)
    tokenizer = task.tokenizer if isinstance(task, MathTask) else task_tokenizer()
    master = master_config(config, workers, output_dir, tokenizer)
    set_seed(master.grpo.seed)
    logger = Logger(master.logger)
    logger.log_hyperparams(master.model_dump())
    checkpointer = CheckpointManager(master.checkpointing)
    last = resume_point(checkpointer, output_dir, resume)
    save_state = _get_grpo_save_state(checkpointer.load_training_info(last))
    dataloader = _dataloader(config, task, tokenizer, master, last)
    loss_fn = ClippedPGLossFn(master.loss_fn)
    policy = _start_policy(config, task, workers, dp, tokenizer, master)
    try:
        if last is not None:
            weights, optimizer = checkpointer.get_resume_paths(last)
            if weights is None:
                raise ConfigError(f"{last}: NeMo-RL's checkpoint holds no policy weights")
            policy.load_checkpoint(weights, optimizer)
        generation = _colocated_generation(policy, master, config.grpo.seed, save_state)
        task_to_env = _start_environment(config, task)
    except BaseException:
        policy.shutdown()
        raise
    return NemoRLRun(
        policy=policy,
        generation=generation,
        dataloader=dataloader,
        tokenizer=tokenizer,
        loss_fn=loss_fn,
        task_to_env=task_to_env,
        logger=logger,
        checkpointer=checkpointer,
        save_state=save_state,
        master_config=master,
    )


def _dataloader(
    config: RunConfig, task: Task, tokenizer: Any, master: Any, last: Path | None
) -> Any:
    """NeMo-RL's dataloader of the task's prompts (its state restored from `last`, where
    resuming); refuses a prompt plus response that does not fit the sequence length."""
    from nemo_rl.data.utils import load_dataloader_state

    prompt_len = task.max_prompt_tokens
    max_len = config.policy.max_total_sequence_length
    if prompt_len + config.policy.generation.max_new_tokens > max_len:
        raise ConfigError(
            f"prompt ({prompt_len}) + policy.generation.max_new_tokens exceed "
            f"policy.max_total_sequence_length={max_len}"
        )
    draws = dict(
        num_prompts=config.grpo.num_prompts_per_step,
        seed=config.grpo.seed,
        steps=config.grpo.max_num_steps,
        max_seq_length=max_len,
    )
    if isinstance(task, MathTask):
        dataloader = build_math_dataloader(task, task.spec, **draws)
    elif isinstance(task, DigitAddTask):
        dataloader = build_dataloader(task, tokenizer, **draws)
    else:
        raise ConfigError(f"task.name={config.task.name}: no NeMo-RL dataloader for it")
    if last is not None:
        load_dataloader_state(dataloader, str(last), master.data)
    return dataloader


def _start_policy(
    config: RunConfig, task: Task, workers: int, dp: int, tokenizer: Any, master: Any
) -> Any:
    """NeMo-RL's policy over one `NemoRLRank` actor per worker, on this machine's Ray (started
    here) or the cluster at ``RAY_ADDRESS``."""
    from mcore_grpo.nemo_rl_driver.cluster import VirtualClusterPlacement
    from mcore_grpo.nemo_rl_driver.policy import NemoRLPolicy
    from mcore_grpo.nemo_rl_driver.rank import NemoRLRank

    tokens = TaskTokens.of(task)
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # inherited by the actors
    before_ray_import()
    if not os.environ.get(ADDRESS_ENV):
        # NeMo-RL's math environment and its verifier are actors of one (logical) CPU each;
        # on a cluster (RAY_ADDRESS) the runner attaches and the cluster must hold them.
        start_local_ray(workers, extra_cpus=2 if isinstance(task, MathTask) else 0)
    runner = RayRunner(
        config, tokens, workers, rank_cls=NemoRLRank, placement_factory=VirtualClusterPlacement
    )
    return NemoRLPolicy(runner, dp, tokenizer, master.policy)


def _colocated_generation(policy: Any, master: Any, seed: int, save_state: Any) -> Any:
    """Generation on the policy's own actors, with NeMo-RL's Megatron weight synchronizer
    (colocated: the same weights, nothing moves)."""
    from nemo_rl.weight_sync.factory import create_weight_synchronizer

    from mcore_grpo.nemo_rl_driver.generation import NemoRLGeneration

    generation = NemoRLGeneration(policy, master.policy["generation"], seed)
    # Sampling seeds follow the generate calls (one per step): continue the count.
    generation.calls = save_state.current_step
    generation.weight_synchronizer = create_weight_synchronizer(
        policy=policy, generation=generation, generation_backend="megatron", colocated=True
    )
    generation.weight_synchronizer.init_communicator()
    return generation


def _start_environment(config: RunConfig, task: Task) -> dict[str, Any]:
    """The task's environment actor by name: NeMo-RL's `MathEnvironment` for a math task,
    ours for a built-in one."""
    from mcore_grpo.nemo_rl_driver.environment import start_environment, start_math_environment

    if isinstance(task, MathTask):
        return {MATH_ENV: start_math_environment(task.verify_impl)}
    return {task.name: start_environment(task.name, config.task.max_addend, config.task.num_terms)}


def resume_point(checkpointer: Any, output_dir: Path, resume: bool) -> Path | None:
    """The checkpoint to resume from: the newest one with `resume`, else None; refuses to
    start over a run's checkpoints, and to resume with none."""
    last = checkpointer.get_latest_checkpoint_path()
    if last is not None and not resume:
        raise ConfigError(
            f"{output_dir / 'checkpoints'} holds NeMo-RL's checkpoint {Path(last).name}: add "
            "--resume to continue that run, or use a fresh --output-dir"
        )
    if last is None and resume:
        raise ConfigError(f"--resume: no NeMo-RL checkpoint in {output_dir / 'checkpoints'}")
    return None if last is None else Path(last)

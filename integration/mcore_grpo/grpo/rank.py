"""What one policy worker (one rank) does in a GRPO step, around `MegatronPolicyWorker`.

The same class runs in-process (one rank) and as a Ray actor (`mcore_grpo.grpo.engine`).
Sampling is seeded per prompt group from (seed, step, group index) and each group is
sampled in its own call, so the samples do not depend on how groups are spread over
workers: ``--workers 2`` reproduces ``--workers 1`` to float tolerance.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from mcore_grpo.grpo.loss import ClippedPGLossConfig, calculate_kl, clipped_pg_loss
from mcore_grpo.grpo.schema import RunConfig
from mcore_grpo.train_step import LossSumFn

# How long a collective may wait for a peer before gloo gives up (the driver normally
# notices a dead worker first and kills the rest).
COLLECTIVE_TIMEOUT = timedelta(seconds=120)
# The tiny model's vocab is padded as Megatron pads it (`--make-vocab-size-divisible-by`
# 128, times the TP size). The worker's sampler, logprob and training forwards all
# normalise over the task's real ids only, so the padding changes no distribution.
VOCAB_DIVISIBLE_BY = 128


@dataclass(frozen=True)
class GroupSpec:
    """One prompt group to sample: its global index and prompt token ids."""

    index: int
    prompt_ids: tuple[int, ...]


@dataclass(frozen=True)
class TaskTokens:
    """The task facts a worker needs (no tokenizer object crosses the process boundary)."""

    vocab_size: int
    pad_id: int
    eos_id: int


class InjectedFailure(RuntimeError):
    """Raised by a worker told to fail (tests of the engine's failure handling)."""


def group_seed(seed: int, step: int, group: int) -> int:
    """Sampling seed of one prompt group at one step (independent of the worker layout)."""
    return (seed * 1_000_003 + step * 10_007 + group) % (2**63 - 1)


def padded_vocab_size(vocab_size: int, tensor_parallel_size: int) -> int:
    """Embedding rows of the tiny model (a multiple Megatron's TP vocab split can divide)."""
    multiple = VOCAB_DIVISIBLE_BY * tensor_parallel_size
    return -(-vocab_size // multiple) * multiple


def worker_config(config: RunConfig, tokens: TaskTokens) -> Any:
    """The integration worker's `WorkerConfig` for this run."""
    from mcore_grpo.config import (
        DDPConfig,
        LossConfig,
        ModelConfig,
        OptimizerSettings,
        ParallelConfig,
        WorkerConfig,
    )

    p = config.policy
    mc = p.megatron_cfg
    tiny = p.tiny_model
    hf = None if p.model_name == "tiny-gpt" else p.model_name
    return WorkerConfig(
        device=p.device,  # type: ignore[arg-type]
        seed=config.grpo.seed,
        micro_batch_size=p.train_micro_batch_size,
        model=ModelConfig(
            num_layers=tiny.num_layers,
            hidden_size=tiny.hidden_size,
            num_attention_heads=tiny.num_attention_heads,
            ffn_hidden_size=tiny.ffn_hidden_size,
            vocab_size=tokens.vocab_size,
            max_sequence_length=p.max_total_sequence_length,
            padded_vocab_size_override=padded_vocab_size(
                tokens.vocab_size, mc.tensor_model_parallel_size
            ),
            hf_checkpoint=hf,
        ),
        parallel=ParallelConfig(
            tensor_model_parallel_size=mc.tensor_model_parallel_size,
            pipeline_model_parallel_size=mc.pipeline_model_parallel_size,
            context_parallel_size=mc.context_parallel_size,
            expert_model_parallel_size=mc.expert_model_parallel_size,
            expert_tensor_parallel_size=mc.expert_tensor_parallel_size,
            sequence_parallel=mc.sequence_parallel,
        ),
        ddp=DDPConfig(
            use_distributed_optimizer=mc.optimizer.use_distributed_optimizer,
            overlap_grad_reduce=mc.distributed_data_parallel_config.overlap_grad_reduce,
            overlap_param_gather=mc.distributed_data_parallel_config.overlap_param_gather,
            grad_reduce_in_fp32=mc.distributed_data_parallel_config.grad_reduce_in_fp32,
        ),
        optimizer=OptimizerSettings(
            lr=mc.optimizer.lr,
            weight_decay=mc.optimizer.weight_decay,
            adam_beta1=mc.optimizer.adam_beta1,
            adam_beta2=mc.optimizer.adam_beta2,
            adam_eps=mc.optimizer.adam_eps,
            clip_grad=p.max_grad_norm,
        ),
        loss=LossConfig(
            level="token" if config.loss_fn.token_level_loss else "sequence",
            ratio_clip=config.loss_fn.ratio_clip_min,
        ),
        temperature=p.generation.temperature,
        precision=p.precision,  # type: ignore[arg-type]
    )


def grpo_loss_sum(cfg: ClippedPGLossConfig) -> LossSumFn:
    """The worker's microbatch loss: clipped PG + KL penalty as an un-normalised sum.

    The split train step divides the summed gradients once by the global valid-token (or
    sequence) count, so the loss is evaluated with normalisation factors of 1 here.
    `logprobs` is [B, S-1] (next-token); the batch tensors are [B, S] aligned with input_ids
    (the `mcore_grpo.train_step.LossSumFn` contract).
    """

    def loss_sum(logprobs: torch.Tensor, mb: Mapping[str, torch.Tensor]) -> torch.Tensor:
        mask = mb["token_mask"][:, 1:].float() * mb["sample_mask"].float()[:, None]
        loss, _ = clipped_pg_loss(
            logprobs,
            mb["prev_logprobs"][:, 1:],
            mb["reference_policy_logprobs"][:, 1:],
            mb["advantages"],
            mask,
            cfg,
            global_valid_toks=1.0,
            global_valid_seqs=1.0,
        )
        return loss

    return loss_sum


def build_batch(
    prompts: list[list[int]], responses: list[list[int]], seq_len: int, pad_id: int
) -> dict[str, torch.Tensor]:
    """Right-padded [B, seq_len] training rows: prompt + response, response tokens masked in."""
    rows = len(prompts)
    input_ids = torch.full((rows, seq_len), pad_id, dtype=torch.long)
    attention = torch.zeros(rows, seq_len, dtype=torch.long)
    token_mask = torch.zeros(rows, seq_len, dtype=torch.long)
    for i, (prompt, response) in enumerate(zip(prompts, responses, strict=True)):
        ids = prompt + response
        if len(ids) > seq_len:
            raise ValueError(
                f"prompt ({len(prompt)}) + response ({len(response)}) tokens exceed "
                f"{seq_len}; raise policy.max_total_sequence_length"
            )
        input_ids[i, : len(ids)] = torch.tensor(ids)
        attention[i, : len(ids)] = 1
        token_mask[i, len(prompt) : len(ids)] = 1
    return {
        "input_ids": input_ids,
        "attention_mask": attention,
        "token_mask": token_mask,
        "sample_mask": torch.ones(rows, dtype=torch.long),
    }


def aligned_logprobs(
    prompts: list[list[int]], response_logprobs: list[list[float]], seq_len: int
) -> torch.Tensor:
    """[B, seq_len] sampler logprobs placed at their response token positions (0 elsewhere)."""
    out = torch.zeros(len(prompts), seq_len, dtype=torch.float32)
    for i, (prompt, lps) in enumerate(zip(prompts, response_logprobs, strict=True)):
        out[i, len(prompt) : len(prompt) + len(lps)] = torch.tensor(lps, dtype=torch.float32)
    return out


class PolicyRank:
    """One worker: generation for its prompt groups, logprobs, its share of each train step."""

    def __init__(
        self,
        config: RunConfig,
        tokens: TaskTokens,
        rank: int,
        world_size: int,
        master_addr: str,
        master_port: int,
        *,
        num_threads: int | None = None,
        fail_at_step: int | None = None,
    ) -> None:
        if num_threads is not None:
            torch.set_num_threads(num_threads)
        self.config = config
        self.tokens = tokens
        self.rank = rank
        self.fail_at_step = fail_at_step
        if not dist.is_initialized():
            os.environ.update(
                RANK=str(rank),
                WORLD_SIZE=str(world_size),
                MASTER_ADDR=master_addr,
                MASTER_PORT=str(master_port),
            )
            dist.init_process_group(
                backend="gloo" if config.policy.device == "cpu" else "nccl",
                rank=rank,
                world_size=world_size,
                timeout=COLLECTIVE_TIMEOUT,
            )
        from mcore_grpo.generation import SamplingParams
        from mcore_grpo.worker import MegatronPolicyWorker

        self.worker = MegatronPolicyWorker(
            worker_config(config, tokens), loss_sum_fn=grpo_loss_sum(config.loss_fn)
        )
        g = config.policy.generation
        stops = tuple(g.stop_token_ids) if g.stop_token_ids is not None else (tokens.eos_id,)
        self.sampling = SamplingParams(
            temperature=g.temperature,
            top_p=g.top_p,
            max_new_tokens=g.max_new_tokens,
            stop_token_ids=stops,
            pad_token_id=tokens.pad_id,
            backend="torch" if g.backend == "megatron" else g.backend,
        )

    def ready(self) -> int:
        """Round trip used by the engine to wait for construction."""
        return self.rank

    def _maybe_fail(self, step: int, where: str) -> None:
        if self.fail_at_step is not None and step == self.fail_at_step:
            raise InjectedFailure(f"injected failure in {where} at step {step} on rank {self.rank}")

    def generate(self, step: int, groups: list[GroupSpec]) -> dict[str, Any]:
        """Sample `num_generations_per_prompt` responses per group; returns token lists."""
        self._maybe_fail(step, "generate")
        start = time.perf_counter()
        n = self.config.grpo.num_generations_per_prompt
        self.worker.prepare_for_generation()
        responses: list[list[int]] = []
        gen_logprobs: list[list[float]] = []
        for group in groups:
            prompt = torch.tensor([group.prompt_ids] * n, dtype=torch.long)
            generator = torch.Generator().manual_seed(
                group_seed(self.config.grpo.seed, step, group.index)
            )
            out = self.worker.generate(prompt, torch.ones_like(prompt), self.sampling, generator)
            plen = prompt.shape[1]
            for row in range(n):
                length = int(out.generation_lengths[row])
                responses.append(out.output_ids[row, plen : plen + length].tolist())
                gen_logprobs.append(out.logprobs[row, plen : plen + length].tolist())
        self.worker.finish_generation()
        return {
            "responses": responses,
            "generation_logprobs": gen_logprobs,
            "time_s": time.perf_counter() - start,
        }

    def _logprobs(self, batch: dict[str, torch.Tensor], reference: bool) -> torch.Tensor:
        size = self.config.policy.logprob_batch_size
        fn = self.worker.get_reference_policy_logprobs if reference else self.worker.get_logprobs
        rows = batch["input_ids"].shape[0]
        parts = [fn({k: v[i : i + size] for k, v in batch.items()}) for i in range(0, rows, size)]
        return torch.cat(parts, dim=0)

    def train(
        self,
        step: int,
        shards: list[dict[str, Any]],
        seq_len: int,
    ) -> dict[str, Any]:
        """This rank's part of each optimizer step of GRPO step `step`.

        `shards[k]` holds prompts, responses and advantages of this rank's slice of optimizer
        step k. Returns loss/KL sums and counts for the driver to reduce, and the time split.
        """
        self._maybe_fail(step, "train")
        batches = [
            build_batch(s["prompts"], s["responses"], seq_len, self.tokens.pad_id)
            | {
                "advantages": torch.tensor(s["advantages"], dtype=torch.float32),
                "generation_logprobs": aligned_logprobs(
                    s["prompts"], s["generation_logprobs"], seq_len
                ),
            }
            for s in shards
        ]
        start = time.perf_counter()
        self.worker.prepare_for_lp_inference()
        kl_sum = 0.0
        tokens = 0.0
        prob_error_sum = 0.0
        cfg = self.config.loss_fn
        for batch in batches:
            batch["prev_logprobs"] = self._logprobs(batch, reference=False)
            batch["reference_policy_logprobs"] = self._logprobs(batch, reference=True)
            mask = batch["token_mask"][:, 1:].float()
            kl = calculate_kl(
                batch["prev_logprobs"][:, 1:],
                batch["reference_policy_logprobs"][:, 1:],
                cfg.reference_policy_kl_type,
                cfg.kl_input_clamp_value,
                cfg.kl_output_clamp_value,
            )
            kl_sum += float((kl * mask).sum())
            tokens += float(mask.sum())
            # NeMo-RL's token_mult_prob_error diagnostic: do training-side logprobs agree
            # with the sampler's? (exp|lp_train - lp_gen| averaged over response tokens)
            lp_error = (batch["prev_logprobs"] - batch["generation_logprobs"]).abs()[:, 1:]
            prob_error_sum += float((torch.exp(lp_error * mask) * mask).sum())
        logprob_time = time.perf_counter() - start
        start = time.perf_counter()
        self.worker.prepare_for_training()
        step_metrics = [self.worker.train(batch) for batch in batches]
        training_time = time.perf_counter() - start
        return {
            "kl_sum": kl_sum,
            "prob_error_sum": prob_error_sum,
            "tokens": tokens,
            "loss": [m["global_loss"] for m in step_metrics],
            "grad_norm": [m["grad_norm"] for m in step_metrics],
            "logprob_time_s": logprob_time,
            "training_time_s": training_time,
        }

    # ---- checkpoints ----------------------------------------------------------------
    def _inner_optimizers(self) -> list[Any]:
        opt = self.worker.policy.optimizer
        return list(getattr(opt, "chained_optimizers", [opt]))

    def save(self, tmp_dir: str) -> str:
        """Write this rank's weights and optimizer shard (and, on rank 0, the reference)."""
        from mcore_grpo.grpo import checkpoint

        self.worker.prepare_for_lp_inference()  # param sync: every rank's weights current
        state = {
            "model": self.worker.policy.gpt.state_dict(),
            "optimizer": [o.optimizer.state_dict() for o in self._inner_optimizers()],
        }
        path = checkpoint.save_rank_state(Path(tmp_dir), self.rank, state)
        if self.rank == 0:
            checkpoint.save_reference(Path(tmp_dir), self.worker.reference.state_dict())
        return str(path)

    def load(self, rank_file: str, reference_file: str) -> None:
        """Restore weights, optimizer shard and reference weights from a checkpoint."""
        from mcore_grpo.grpo import checkpoint

        state = torch.load(rank_file, map_location="cpu", weights_only=False)
        live = self.worker.policy.gpt.state_dict()
        tensors = {k: v for k, v in state["model"].items() if isinstance(v, torch.Tensor)}
        checkpoint.check_shapes(
            tensors,
            {k: v for k, v in live.items() if isinstance(v, torch.Tensor)},
            Path(rank_file),
        )
        self.worker.policy.gpt.load_state_dict(state["model"])
        for opt, opt_state in zip(self._inner_optimizers(), state["optimizer"], strict=True):
            opt.optimizer.load_state_dict(opt_state)
        reference = torch.load(reference_file, map_location="cpu", weights_only=True)
        held = self.worker.reference.state_dict()
        checkpoint.check_shapes(reference, held, Path(reference_file))
        self.worker.reference.load_state_dict(reference)

    def shutdown(self) -> None:
        """Tear down megatron's parallel state and the process group."""
        from megatron.core import parallel_state

        parallel_state.destroy_model_parallel()
        if dist.is_initialized():
            dist.destroy_process_group()

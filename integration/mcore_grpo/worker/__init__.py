"""The GRPO policy worker on megatron-core: one rank's policy, NeMo-RL's worker method names.

Module map (one concept each): `policy_worker` (`MegatronPolicyWorker`, the entry points),
`phase_guard` (which entry point may run in which phase), `config` (`WorkerConfig`),
`batch` (the batch layout, the trained-position mask, the count a loss is divided by, the
`LossSumFn` contract), `model` (build the GPT, DDP and optimizer), `parallel` (process group
and megatron parallel state), `forward` (logits and next-token logprobs), `train_step` (the
split train step: one gradient reduction per optimizer step), `reference` (the frozen
reference policy), `generation` (sampling), `engine_lifecycle` (suspend/resume of an inference
engine on all ranks together), `cpu` (the CPU redirects, the only place that patches
megatron-core for CUDA-less machines), `comm_volume` (counts gradient reductions; tests and
benchmarks), `memory/` (offloading weights, optimizer state and NCCL groups).

The worker knows nothing of the GRPO loop; the loop (`mcore_grpo.grpo`) drives it. The one
exception is its default loss, the GRPO loss without a KL term (`mcore_grpo.grpo.algorithm.loss`).
"""

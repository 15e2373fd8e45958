"""GRPO on the megatron-core policy worker: the driver, the ranks, and the maths between them.

Module map (one concern each):

- run config: `schema` (the dataclass tree, NeMo-RL's key names and defaults),
  `config_loader` (YAML presets, config files, ``key=value`` overrides, dump);
- maths: `loss` (the ONE GRPO loss: clipped policy gradient, dual clip, KL penalty; also the
  worker's default loss), `advantages` (group-normalised advantages);
- the task: `task` (the built-in verifiable task and its locally built tokenizer);
- driver <-> rank: `messages` (typed dataclasses both sides exchange), `runner` (in-process
  or Ray actors joined by one torch.distributed group), `rank` (the actor: one
  `MegatronPolicyWorker` driven by messages), `worker_settings` (run config -> the worker's
  `WorkerConfig` and `SamplingParams`), `train_batch` (a `TrainShard` -> the worker's batch);
- the driver: `loop` (one GRPO step after another), `metrics` (metrics.jsonl, the log line,
  the end-of-run plot), `checkpoint` (atomic save and resume).
"""

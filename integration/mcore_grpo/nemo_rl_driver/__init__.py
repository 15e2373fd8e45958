"""NeMo-RL's `grpo_train` driving the megatron-core worker (``mcore-grpo --driver nemo-rl``).

Module map (one concern each): `source` (NeMo-RL installed, or one line naming the fix),
`config` (its `MasterConfig`: example YAML + CPU overrides), `tokenizer` (the task tokenizer
as a Hugging Face tokenizer), `data` (prompts through NeMo-RL's dataloader), `environment`
(the task as an `EnvironmentInterface` actor), `batches` (NeMo-RL <-> worker batch layouts),
`loss` (NeMo-RL's loss as the worker's microbatch loss sum), `rank` (the Ray actor),
`policy` (`ColocatablePolicyInterface`), `coalescer` + `generation` (`GenerationInterface`,
colocated megatron backend), `setup` (the pieces as NeMo-RL's `setup()` builds them),
`run_metrics` (NeMo-RL's logged metrics read back), `driver` (the CLI's entry).

Only `source`, `batches`, `coalescer`, `loss` and `run_metrics` import without NeMo-RL.
"""

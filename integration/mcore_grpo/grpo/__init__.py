"""GRPO on the megatron-core policy worker: math, task, config, engine, loop.

Module map (one concern each): `advantages` (group-normalised advantages), `loss` (clipped
policy-gradient loss with a KL penalty to the reference), `config` (run config: YAML presets
and NeMo-RL style ``key=value`` overrides), `task` (the built-in verifiable toy task and its
locally built tokenizer), `metrics` (metrics.jsonl and the end-of-run plot), `checkpoint`
(atomic save and resume), `engine` (Ray actors joined by one torch.distributed group),
`loop` (one GRPO step after another).
"""

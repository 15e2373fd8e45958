"""GRPO on the megatron-core policy worker: the driver, the ranks, and the maths between them.

One sub-package per concern, read top to bottom as a step runs (the run config they all read
is the layer below, `mcore_grpo.config`):

- `tasks`: what the policy is trained on and graded by (`task`: the built-in CPU tasks;
  `math_data`, `math_task`, `nemo_rl_math`: real math problems under NeMo-RL's prompt and
  verifier; `evaluation`, `hf_eval`: held-out accuracy);
- `policy_model`: `policy.model_name` made a local checkpoint (`hf_model`, `pretrained`);
- `algorithm`: the maths (`loss`: the one GRPO loss; `advantages`: group-normalised);
- `ranks`: driver <-> policy ranks (`messages`: what they exchange; `runner`: in-process or
  Ray actors; `rank`: one `MegatronPolicyWorker` driven by messages; `worker_settings`,
  `train_batch`: run config and shards -> what the worker takes);
- `cluster`: where ranks run (`placement`, `local_ray`, `cluster_attach`) and why a call across
  them failed (`fault`);
- `driver`: the loop itself (`loop`: one GRPO step after another; `metrics`, `checkpoint`:
  what a run leaves behind; `dry_run`: the parallel layout checked before any GPU is rented).
"""

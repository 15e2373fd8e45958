#!/usr/bin/env bash
# SmolLM2-135M-Instruct learning GSM8K by GRPO on a lent GPU, with the full test split (1,319
# problems) evaluated before and after: on 2 CPU cores one such evaluation takes ~4.4 h
# (docs/real-model.md, "GSM8K"). Run ON the lent machine (the `device` tool) from the repository
# root over `bundle.sh --real-model`, in two calls because one call carries at most 64 MiB:
#   run(command="bash benchmarks/device/real_model.sh --preflight", carry=[".device"])
#   run(command="cp .device-b/gguf.part-b /tmp/", carry=[".device-b"])
#   run(command="bash benchmarks/device/real_model.sh", carry=[".device"], timeout_s=600)
# (the second at once: the machine goes back after 30 s idle; unpack.sh says why /tmp).
# --preflight checks, without the model, what the run imports: CUDA, NeMo-RL's math verifier
# (a right \boxed{} answer 1.0, a wrong one 0.0), the GGUF reader, Megatron-Bridge.
# The run: the cpu-smollm2-gsm8k preset on `cuda`, in-process, ending by
# checkpointing.checkpoint_must_save_by (MUST_SAVE_BY, default 00:00:06:00) and at most STEPS
# steps; EXTRA adds overrides. metrics.jsonl, the held-out samples and the log come back in $OUT.
set -uo pipefail
# shellcheck source=benchmarks/device/unpack.sh
source benchmarks/device/unpack.sh
python3 -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.cuda.is_available(), "transformers", transformers.__version__)'
cat "$work/src/PINS"

if [[ ${1:-} == --preflight ]]; then
  python3 - <<'PY'
import time
start = time.perf_counter()
import gguf  # noqa: F401  (transformers' GGUF reader)
import megatron.bridge  # noqa: F401
from mcore_grpo.grpo.tasks.nemo_rl_math import MathVerifier

verifier = MathVerifier("hf_math_verify")
scores = verifier.scores(["so the answer is \\boxed{18}", "so the answer is \\boxed{17}"], ["18", "18"])
print("preflight: NeMo-RL hf_math_verify scores", scores, f"({time.perf_counter() - start:.1f} s)")
assert scores == [1.0, 0.0], scores
PY
  exit $?
fi

gguf=$work/SmolLM2-135M-Instruct.Q4_1.gguf
cat .device/gguf.part-a "$part_b" >"$gguf" || { echo "gguf parts missing" >&2; exit 2; }
[[ $(sha256sum "$gguf" | awk '{print $1}') == $(cat .device/gguf.sha256) ]] ||
  { echo "the GGUF reassembled from its parts does not match its sha256" >&2; exit 2; }
tar xzf .device/gsm8k.tar.gz -C "$work"
rm -rf "$work/run"
export MCORE_GRPO_MODEL_CACHE=$work/models
# shellcheck disable=SC2086  # EXTRA: words on purpose
python3 -m mcore_grpo.cli --preset cpu-smollm2-gsm8k --in-process --output-dir "$work/run" \
  policy.device=cuda "policy.model_name=$gguf" \
  "task.dataset.train_path=$work/gsm8k/train.jsonl" "task.dataset.eval_path=$work/gsm8k/test.jsonl" \
  "grpo.max_num_steps=${STEPS:-40}" \
  "checkpointing.checkpoint_must_save_by=${MUST_SAVE_BY:-00:00:06:00}" ${EXTRA:-} 2>&1 |
  tee "$OUT/run.log"
rc=${PIPESTATUS[0]}
for f in metrics.jsonl validation_samples.jsonl reward_loss.png config.yaml; do
  [[ -f $work/run/$f ]] && cp "$work/run/$f" "$OUT/"
done
nvidia-smi --query-gpu=name,memory.used --format=csv,noheader
exit "$rc"

#!/usr/bin/env bash
# The GPU checks, run ON the lent machine (the `device` tool) from the repository root over the
# bundle that benchmarks/device/bundle.sh made, e.g.
#   run(command="bash benchmarks/device/gpu_check.sh", carry=[".device"], timeout_s=560)
# Stages, each bounded so the whole fits one call and each writes its own log under $OUT:
#   1. pytest: the in-process worker tests on `cuda` (NCCL world of 1) and the `gpu` tests;
#   2. bench_gpu.py: the worker's train step / logprobs / generate at Qwen2.5-1.5B's shape,
#      each beside megatron-core's own way, as ratios;
#   2b. unpatched: the DDP-hook tripwire's `gpu` test (real CudaGraphManagers) against the PINNED
#      megatron-core (bundle.sh's pin-core.tar.gz, without the series): it must FAIL there;
#   3. parity: bench_smollm2_parity.py, SmolLM2-135M-Instruct through the worker against
#      `transformers` on the GPU in fp32 and bf16 (logits, logprobs, sampling at batch 64), when
#      the GGUF's two parts are there (bundle.sh --real-model; the second part copied to /tmp
#      by an earlier call on the same warm machine: unpack.sh);
#   4. the gpu-smoke preset: `mcore-grpo --preset gpu-smoke --in-process`, 30 GRPO steps.
# summary.txt has one line per stage (exit status, seconds). STAGES picks stages (default
# "pytest unpatched bench parity smoke"); PYTEST_S / BENCH_S / PARITY_S / SMOKE_S bound them in
# seconds; SMOKE_ARGS adds config overrides to the smoke run (e.g. "policy.megatron_cfg.optimizer.lr=3e-6").
set -uo pipefail
# shellcheck source=benchmarks/device/unpack.sh
source benchmarks/device/unpack.sh

{
  date -u +%FT%TZ
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python3 -c 'import torch, transformers, megatron.core as m; print("python", __import__("sys").version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__, "megatron-core", m.__version__)'
  cat "$work/src/PINS"
} >"$OUT/summary.txt" 2>&1

STAGES=${STAGES:-pytest unpatched bench parity smoke}
stage() {
  local name=$1 limit=$2 start rc
  shift 2
  [[ " $STAGES " == *" $name "* ]] || return 0
  start=$(date +%s)
  timeout -s INT -k 15 "$limit" "$@" >"$OUT/$name.log" 2>&1
  rc=$?
  echo "stage $name: exit $rc in $(($(date +%s) - start)) s (limit $limit s)" | tee -a "$OUT/summary.txt"
}

stage pytest "${PYTEST_S:-240}" python3 -m pytest -p no:cacheprovider -q -m "not slow" \
  --timeout 150 --durations 15 --junitxml="$OUT/junit.xml" \
  tests/integration/worker tests/integration/grpo/algorithm/test_loss.py \
  tests/integration/grpo/test_gpu_smoke_preset.py tests/integration/test_seed_crash.py \
  tests/patches/megatron_lm/test_ddp_forward_pre_hook.py tests/benchmarks
[[ -f $OUT/pytest.log ]] && tail -n 40 "$OUT/pytest.log" | grep -E "passed|failed|error|FAILED|ERROR" >>"$OUT/summary.txt"

# The pinned megatron-core first on the path; Bridge, NeMo-RL and megatron/training stay patched
# (megatron is a namespace package in the bundle: core comes from the first entry).
if [[ " $STAGES " == *" unpatched "* ]]; then
  mkdir -p "$work/pin" && tar xzf .device/pin-core.tar.gz -C "$work/pin"
  PYTHONPATH="$PWD:$PWD/integration:$work/pin:$work/src:$work/site" stage unpatched 120 \
    python3 -m pytest -p no:cacheprovider -q --timeout 100 \
    tests/patches/megatron_lm/test_ddp_forward_pre_hook.py -k gpu
  if grep -q "1 failed" "$OUT/unpatched.log"; then
    echo "unpatched: the tripwire FAILS on the pinned megatron-core, as it must" >>"$OUT/summary.txt"
  else
    echo "unpatched: the tripwire did NOT fail on the pinned megatron-core" >>"$OUT/summary.txt"
  fi
fi

stage bench "${BENCH_S:-120}" python3 benchmarks/bench_gpu.py --repeat 3

gguf=$work/SmolLM2-135M-Instruct.Q4_1.gguf
if [[ " $STAGES " == *" parity "* ]] && [[ -f .device/gguf.part-a && -f $part_b ]]; then
  cat .device/gguf.part-a "$part_b" >"$gguf"
  if [[ $(sha256sum "$gguf" | awk '{print $1}') == $(cat .device/gguf.sha256) ]]; then
    MCORE_GRPO_MODEL_CACHE=$work/models stage parity "${PARITY_S:-150}" \
      python3 benchmarks/bench_smollm2_parity.py --device cuda --model "$gguf"
  else
    echo "stage parity: the GGUF reassembled from its parts does not match its sha256" >>"$OUT/summary.txt"
  fi
elif [[ " $STAGES " == *" parity "* ]]; then
  echo "stage parity: skipped, the GGUF's parts are not both here (copy .device-b's to /tmp first: unpack.sh)" >>"$OUT/summary.txt"
fi

# shellcheck disable=SC2086  # SMOKE_ARGS: words on purpose
stage smoke "${SMOKE_S:-240}" python3 -m mcore_grpo.cli --preset gpu-smoke --in-process \
  --output-dir "$work/gpu-smoke" ${SMOKE_ARGS:-}
cp "$work/gpu-smoke/metrics.jsonl" "$OUT/smoke-metrics.jsonl" 2>/dev/null
nvidia-smi --query-gpu=memory.used --format=csv,noheader >>"$OUT/summary.txt" 2>&1
cat "$OUT/summary.txt"

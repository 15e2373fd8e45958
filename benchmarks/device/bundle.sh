#!/usr/bin/env bash
# Packs what a lent GPU machine (the `device` tool) lacks into `.device/`, an ignored folder
# that travels with the working tree when a run names it in `carry`:
#   - src.tar.gz: the PATCHED upstream sources the worker imports (megatron/core,
#     megatron/training, megatron/bridge, nemo_rl), read from the 3rdparty checkouts;
#   - whl/: pure-Python wheels missing there, at the versions uv.lock pins.
# That machine is offline and has its own torch/transformers; only the checkout travels, not the
# submodules' files (../shared/DESIGN.md, "The GPU machine"). Then, there:
#   bash benchmarks/device/gpu_check.sh
# Usage: bash benchmarks/device/bundle.sh   (after tools/apply_patches.sh)
set -euo pipefail
root=$(git rev-parse --show-toplevel)
cd "$root"
dest=.device
exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")"
grep -qxF "/$dest/" "$exclude" 2>/dev/null || echo "/$dest/" >>"$exclude"

for tree in 3rdparty/Megatron-LM/megatron/core 3rdparty/Megatron-Bridge/src/megatron/bridge \
  3rdparty/NeMo-RL/nemo_rl; do
  [[ -d $tree ]] || { echo "bundle.sh: $tree missing: run tools/apply_patches.sh first" >&2; exit 1; }
done

rm -rf "$dest"
mkdir -p "$dest/src/megatron" "$dest/whl"
cp -r 3rdparty/Megatron-LM/megatron/core 3rdparty/Megatron-LM/megatron/training "$dest/src/megatron/"
cp -r 3rdparty/Megatron-Bridge/src/megatron/bridge "$dest/src/megatron/"
cp -r 3rdparty/NeMo-RL/nemo_rl "$dest/src/"
find "$dest/src" -name __pycache__ -prune -exec rm -rf {} +
# Which patches the sources carry, so the run's log can say what it ran.
for up in Megatron-LM Megatron-Bridge NeMo-RL; do
  echo "$up $(git -C "3rdparty/$up" rev-parse HEAD) $(git -C "3rdparty/$up" log --oneline \
    "$(git ls-tree HEAD "3rdparty/$up" | awk '{print $3}')..HEAD" | wc -l) patches"
done >"$dest/src/PINS"
tar czf "$dest/src.tar.gz" -C "$dest/src" .
rm -rf "$dest/src"

# Pure-Python packages the worker path needs that the machine's image lacks (its list:
# /work/.library/device/KINDS.md): Megatron-Bridge imports omegaconf. Versions from uv.lock;
# `pip wheel` builds antlr4's sdist-only release into a wheel here.
locked() { awk -v n="$1" '$0=="name = \""n"\"" {getline; gsub(/version = |"/, ""); print; exit}' uv.lock; }
for pkg in omegaconf antlr4-python3-runtime; do
  python3 -m pip wheel -q --no-deps -w "$dest/whl" "$pkg==$(locked "$pkg")"
done
du -sh "$dest"/* | sed 's/^/bundle.sh: /'

#!/usr/bin/env bash
# The README's main job on a machine that reaches only the package index: a fresh clone of this
# commit in a scratch directory, with no mirror and no ../shared beside it, so the apply falls
# back to the release stand-ins (Megatron-LM from the megatron-core sdist, Megatron-Bridge from
# its wheel, NeMo-RL missing); then the README's commands, and uv.lock must come out unchanged.
# Figures: docs/environment.md ("Only the package index").
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
scratch="$(mktemp -d "${TMPDIR:-/tmp}/mcore-rl-stack-index-only.XXXXXX")"
trap 'rm -rf "$scratch"' EXIT
unset PATCHTOOL_MIRROR_DIR
timed() { local t=$SECONDS; "$@"; echo "index-only: '$*' took $((SECONDS - t)) s"; }

git clone --quiet --no-local "$repo" "$scratch/main"
cd "$scratch/main"
echo "index-only: a clone of $(git rev-parse --short HEAD) in $scratch/main, no mirror, no ../shared"
timed tools/apply_patches.sh --allow-missing
tools/patches status
timed uv sync --frozen
timed uv run --frozen mcore-grpo --no-progress
if ! git diff --quiet -- uv.lock; then
    echo "index-only: the README's commands rewrote uv.lock:" >&2
    git diff --stat -- uv.lock >&2
    exit 1
fi
echo "index-only: the main job ran on the stand-ins; uv.lock unchanged"

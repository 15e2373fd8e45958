# Sourced ON the lent GPU machine by gpu_check.sh and real_model.sh: unpacks the bundle that
# bundle.sh made (.device/) into $work and puts the sources and packages on PYTHONPATH.
OUT=${OUT:-/tmp/gpu-check-out}
mkdir -p "$OUT"
work=/tmp/mcore-device
rm -rf "$work/src" "$work/site" && mkdir -p "$work/src" "$work/site"
tar xzf .device/src.tar.gz -C "$work/src" || { echo "no .device/src.tar.gz: carry .device" >&2; exit 2; }
tar xzf .device/site.tar.gz -C "$work/site" || { echo "no .device/site.tar.gz: rerun bundle.sh" >&2; exit 2; }
export PYTHONPATH="$PWD:$PWD/integration:$work/src:$work/site"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
# The GGUF's second part (bundle.sh --real-model): an ignored path that a call does not carry is
# removed there, even on a warm machine (seen 2026-11-27), so the first call copies it out of
# the tree: run(command="cp .device-b/gguf.part-b /tmp/", carry=[".device-b"]), then at once
# (the machine goes back after 30 s idle) the call that carries .device.
part_b=.device-b/gguf.part-b
[[ -f $part_b ]] || part_b=/tmp/gguf.part-b

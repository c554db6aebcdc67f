#!/usr/bin/env bash
# One call of the device tool: host time per call (direct launch against
# Triton's dispatch; kernelized MLP against eager at Gemma3 1B/4B dims, 1, 64,
# 256 and 1024 tokens, with the kernels each call launches; the decode path's
# stages). Outputs to $OUT. With a build carried as .baseline-build/ (python
# -m geglu_triton build --out .baseline-build, from the revision to compare
# with), or the carried build named as the argument, its kernelized MLP is
# timed beside this one.
source "$(dirname "$0")/setup.sh"
baseline_dir=${1:-.baseline-build}
if [ $# -gt 0 ] && [ ! -d "$baseline_dir" ]; then
    echo "host_time.sh: the baseline build $baseline_dir is not a directory here (name it in the device tool's carry)" >&2
    exit 1
fi
baseline=()
[ -d "$baseline_dir" ] && baseline=(--baseline-kernel-dir "$baseline_dir")
timeout 300 "$PY" benchmarks/host_time.py --kernel-dir "$build" "${baseline[@]}" --out "$OUT/host_time.json" 2>&1 \
    | tee "$OUT/host_time.log" | grep -v "dirty git tree" | tail -30

#!/usr/bin/env bash
# One call of the device tool: host time (host_time.sh's run) and, for every
# Gemma size's MLP at 1, 8 and 16 tokens, the launch table's fused GEMM against
# the weight-read floor and against one kernel's fixed cost under the same
# timer (tune_gemm_config.py without a candidate sweep); then a 1B prefill
# profiled, eager against ours (prefill_profile.py). Outputs to $OUT.
source "$(dirname "$0")/setup.sh"
baseline=()
[ -d .baseline-build ] && baseline=(--baseline-kernel-dir .baseline-build)
timeout 300 "$PY" benchmarks/host_time.py --kernel-dir "$build" "${baseline[@]}" --out "$OUT/host_time.json" 2>&1 \
    | tee "$OUT/host_time.log" | grep -v "dirty git tree" | tail -32
timeout 200 "$PY" benchmarks/tune_gemm_config.py --kernel-dir "$build" --tokens 1 8 16 --sweep \
    --out "$OUT/decode_floor.json" 2>&1 | grep -v Warning | tee "$OUT/decode_floor.log" | tail -30
timeout 150 "$PY" benchmarks/prefill_profile.py --kernel-dir "$build" --out "$OUT/prefill_profile.json" 2>&1 \
    | grep -v "kernel mapping\|WARNING\|dirty git tree\|^$" | tee "$OUT/prefill_profile.log" | tail -60

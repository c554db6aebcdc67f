#!/usr/bin/env bash
# One call of the device tool: host time per call (direct launch against
# Triton's dispatch; kernelized decode MLP against eager at Gemma3 1B/4B
# dims). Outputs to $OUT. (The tests run in suite.sh.)
source "$(dirname "$0")/setup.sh"
timeout 240 "$PY" benchmarks/host_time.py --kernel-dir "$build" --out "$OUT/host_time.json" 2>&1 \
    | tee "$OUT/host_time.log" | tail -12

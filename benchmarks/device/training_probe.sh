#!/usr/bin/env bash
# One call of the device tool (PERFORMANCE v19): benchmarks/training_probe.py on a Gemma3 training step at
# bench --models' training shape (default the 1B; PROBE_SIZE, PROBE_ROUNDS): the forward and the backward
# apart, wall time and kernel sums for eager, ours and Liger in rounds taken in turns, the backward also on
# the calling thread, then one profiled step's host calls. Outputs to $OUT.
source "$(dirname "$0")/setup.sh"
size=${PROBE_SIZE:-1b}
timeout 300 "$PY" benchmarks/training_probe.py --size "$size" --rounds "${PROBE_ROUNDS:-8}" --kernel-dir "$build" \
    --out "$OUT/training_probe_$size.json" 2>&1 \
    | grep -v "mapping found\|WARNING:kernels\|^$\|USDT\|dirty git\|_warn_once\|Profiler clears" \
    | tee "$OUT/training_probe_$size.log" | grep -v "^    "

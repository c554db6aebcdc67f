#!/usr/bin/env bash
# One call of the device tool (PERFORMANCE v19): benchmarks/training_probe.py on a Gemma3 training step at
# bench --models' training shape (default the 1B; PROBE_SIZE, PROBE_ROUNDS, PROBE_TOKENS="BATCH SEQUENCE",
# PROBE_NAME naming the outputs): the forward and the backward apart, wall time and kernel sums for eager,
# ours and Liger in rounds taken in turns, the backward also on the calling thread, then one profiled step's
# host calls. Outputs to $OUT.
source "$(dirname "$0")/setup.sh"
size=${PROBE_SIZE:-1b}
name=${PROBE_NAME:-training_probe_$size}
timeout 300 "$PY" benchmarks/training_probe.py --size "$size" --rounds "${PROBE_ROUNDS:-8}" --kernel-dir "$build" \
    --tokens ${PROBE_TOKENS:-8 1024} --out "$OUT/$name.json" 2>&1 \
    | grep -v "mapping found\|WARNING:kernels\|^$\|USDT\|dirty git\|_warn_once\|Profiler clears" \
    | tee "$OUT/$name.log" | grep -v "^    "

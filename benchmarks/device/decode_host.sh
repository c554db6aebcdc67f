#!/usr/bin/env bash
# One call of the device tool: where a kernelized decode MLP's host time goes inside a whole model
# (decode_probe.py's split and cold stages on the 1B, or DECODE_PROBE_SIZE; 313 s of wall time on the H100 in v39).
# The split stage times generate with each arm (ours, ours with the down projection on cuBLAS, and the
# control arms); the cold stage times the pieces of one MLP call warm and right after a model forward.
# Outputs to $OUT.
source "$(dirname "$0")/setup.sh"
size=${DECODE_PROBE_SIZE:-1b}
timeout 400 "$PY" benchmarks/decode_probe.py --kernel-dir "$build" --size "$size" --stages split cold \
    --out "$OUT/decode_probe_${size}_host.json" 2>&1 \
    | grep -v "kernel mapping\|WARNING\|dirty git tree\|^$" | tee "$OUT/decode_probe_${size}_host.log" | tail -24

#!/usr/bin/env bash
# One call of the device tool: the whole test suite (suite.sh), then the
# whole-model decode probe (decode_probe.py: turn order and garbage collector
# varied). Outputs to $OUT.
SUITE_TIMEOUT_S=${SUITE_TIMEOUT_S:-380} bash "$(dirname "$0")/suite.sh"
source "$(dirname "$0")/setup.sh"
timeout 120 "$PY" benchmarks/decode_probe.py --kernel-dir "$build" --out "$OUT/decode_probe.json" 2>&1 \
    | grep -v "kernel mapping\|WARNING\|dirty git tree\|^$" | tee "$OUT/decode_probe.log" | tail -8

#!/usr/bin/env bash
# One call of the device tool: the whole test suite (suite.sh), then the
# whole-model decode probe's rounds stage (decode_probe.py: tokens/s of generate
# and the static loop, each arm paired with eager's round). Outputs to $OUT.
SUITE_TIMEOUT_S=${SUITE_TIMEOUT_S:-380} bash "$(dirname "$0")/suite.sh"
source "$(dirname "$0")/setup.sh"
timeout 170 "$PY" benchmarks/decode_probe.py --kernel-dir "$build" --stages rounds --out "$OUT/decode_probe.json" 2>&1 \
    | grep -v "kernel mapping\|WARNING\|dirty git tree\|^$" | tee "$OUT/decode_probe.log" | tail -8

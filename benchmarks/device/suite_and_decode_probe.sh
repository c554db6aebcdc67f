#!/usr/bin/env bash
# One call of the device tool: the whole test suite (suite.sh), then the
# whole-model decode probe's rounds stage for the four MLPs users choose between
# (decode_probe.py: tokens/s of generate and the static loop, each paired with
# eager's round; 8 rounds x 2 loops x 4 arms at up to 1.6 s a generate on a slow
# H100 host, v39, fit the timeout). Outputs to $OUT.
SUITE_TIMEOUT_S=${SUITE_TIMEOUT_S:-380} bash "$(dirname "$0")/suite.sh"
source "$(dirname "$0")/setup.sh"
timeout 170 "$PY" benchmarks/decode_probe.py --kernel-dir "$build" --stages rounds \
    --arms eager ours liger compile --out "$OUT/decode_probe.json" 2>&1 \
    | grep -v "kernel mapping\|WARNING\|dirty git tree\|^$" | tee "$OUT/decode_probe.log" | tail -8

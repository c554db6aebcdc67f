#!/usr/bin/env bash
# One call of the device tool: the full benchmark grid alone, with the grid's
# own time budget, then the targets checked. Outputs go to $OUT (the bench's
# files as one tarball: the tool brings back at most 8 files).
source "$(dirname "$0")/setup.sh"
timeout 520 "$PY" -m geglu_triton bench --kernel-dir "$build" --out /tmp/bench > /tmp/bench.log 2>&1
"$PY" benchmarks/check_targets.py /tmp/bench/results.json --out /tmp/bench/targets.md | grep "^## "
cp /tmp/bench.log /tmp/bench/ && tar -C /tmp -cf "$OUT/bench.tar" bench
tail -45 /tmp/bench.log

#!/usr/bin/env bash
# One call of the device tool: benchmarks/one_launch_decode_probe.py (the decode MLP in one launch, both ways of
# meeting its partial sums, against ours' two launches and eager, on the 1B and the 4B at one token: output,
# repeatability, GPU time by graph replay, host time). About 2-3 minutes. Outputs to $OUT.
source "$(dirname "$0")/setup.sh"
timeout 240 "$PY" benchmarks/one_launch_decode_probe.py --kernel-dir "$build" --out "$OUT/one_launch_decode_probe.json" 2>&1 \
    | grep -v "dirty git tree" | tee "$OUT/one_launch_decode_probe.log" | grep -A24 '"gpu_us"\|"host_us"' | head -70

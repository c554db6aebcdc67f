#!/usr/bin/env bash
# One call of the device tool: where a forward+backward's host time goes
# (benchmarks/host_overhead.py), and the fp16/fp32 activation-forward cells
# of the bench again, to see whether their small-cell outliers repeat.
source "$(dirname "$0")/setup.sh"
timeout 150 "$PY" benchmarks/host_overhead.py --kernel-dir "$build" --out "$OUT/host_overhead.json" 2>&1 \
    | tee "$OUT/host_overhead.log" | tail -60
timeout 200 "$PY" -m geglu_triton bench --kernel-dir "$build" --out /tmp/bench --dtypes fp16 fp32 \
    --workloads activation-forward > "$OUT/bench.log" 2>&1
cp /tmp/bench/results.json "$OUT/bench_fp16_fp32_forward.json"
grep -E "x(4231|9216|14336) " "$OUT/bench.log" | grep -E " (1|16)x" | head -24

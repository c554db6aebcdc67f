#!/usr/bin/env bash
# One call of the device tool: the L2-flush probe, the kernel tests on the
# GPU (the launcher's direct path), the host-overhead probe and the bench's
# host section (best of 5 rounds). Outputs to $OUT.
source "$(dirname "$0")/setup.sh"
timeout 150 "$PY" benchmarks/l2_flush_probe.py --kernel-dir "$build" --out "$OUT/l2_flush.json" 2>&1 \
    | tee "$OUT/l2_flush.log" | tail -16
timeout 100 "$PY" -m pytest -q -p no:cacheprovider tests/test_launcher.py tests/test_geglu.py tests/test_linear.py \
    2>&1 | tail -2 | tee "$OUT/pytest.log"
timeout 100 "$PY" benchmarks/host_overhead.py --kernel-dir "$build" --out "$OUT/host_overhead.json" \
    > "$OUT/host_overhead.log" 2>&1
timeout 90 "$PY" -m geglu_triton bench --kernel-dir "$build" --workloads host --out /tmp/bench_host \
    > /tmp/bench_host.log 2>&1
cp /tmp/bench_host/results.json "$OUT/bench_host.json"; sed -n '/Per-call overhead/,/^$/p' /tmp/bench_host.log

#!/usr/bin/env bash
# One call of the device tool: the host-overhead probe, the full benchmark
# grid, then the GPU tests not run by probe.sh. Outputs go to $OUT (the
# bench's files as one tarball: the tool brings back at most 8 files).
source "$(dirname "$0")/setup.sh"
timeout 100 "$PY" benchmarks/host_overhead.py --kernel-dir "$build" --out "$OUT/host_overhead.json" 2>&1 \
    | tee "$OUT/host_overhead.log" | tail -45
timeout 330 "$PY" -m geglu_triton bench --kernel-dir "$build" --out /tmp/bench --time-budget-s 320 \
    > /tmp/bench.log 2>&1
cp /tmp/bench.log /tmp/bench/ && tar -C /tmp -cf "$OUT/bench.tar" bench
tail -45 /tmp/bench.log
timeout 90 "$PY" -m pytest -q -p no:cacheprovider tests/test_models.py tests/test_tensor_parallel.py \
    tests/test_bench.py 2>&1 | tail -8 | tee "$OUT/pytest.log"

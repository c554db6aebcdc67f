#!/usr/bin/env bash
# One call of the device tool: the host-overhead probe, the full benchmark
# grid, then the GPU tests not run by probe.sh. Outputs go to $OUT (the
# bench's files as one tarball: the tool brings back at most 8 files).
set -uo pipefail
export PYTHONUNBUFFERED=1
source scripts/env.sh
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv
build=/tmp/fused-geglu-build
"$PY" -m geglu_triton build --out "$build" > /tmp/build.log 2>&1 || { tail /tmp/build.log; exit 1; }
timeout 100 "$PY" benchmarks/host_overhead.py --kernel-dir "$build" --out "$OUT/host_overhead.json" 2>&1 \
    | tee "$OUT/host_overhead.log" | head -40
timeout 330 "$PY" -m geglu_triton bench --kernel-dir "$build" --out /tmp/bench --time-budget-s 320 \
    > /tmp/bench.log 2>&1
cp /tmp/bench.log /tmp/bench/ && tar -C /tmp -cf "$OUT/bench.tar" bench
tail -45 /tmp/bench.log
timeout 90 "$PY" -m pytest -q -p no:cacheprovider tests/test_models.py tests/test_tensor_parallel.py \
    tests/test_bench.py 2>&1 | tail -8 | tee "$OUT/pytest.log"

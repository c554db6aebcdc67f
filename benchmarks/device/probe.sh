#!/usr/bin/env bash
# One call of the device tool (it runs this from the repo root with $OUT set):
# GPU tests of the kernels, the host-overhead probe,
# the fused-GEMM sweep and the profiler study. Logs and JSON go to $OUT.
source "$(dirname "$0")/setup.sh"
timeout 120 "$PY" -m pytest -q -p no:cacheprovider -x tests/test_launcher.py tests/test_linear.py tests/test_geglu.py \
    tests/test_ops.py tests/test_layers.py 2>&1 | tail -15 | tee "$OUT/pytest.log"
timeout 80 "$PY" benchmarks/host_overhead.py --kernel-dir "$build" --out "$OUT/host_overhead.json" 2>&1 \
    | tee "$OUT/host_overhead.log" | tail -30
timeout 70 "$PY" -m geglu_triton profile --kernel-dir "$build" --out /tmp/profile > /tmp/profile.log 2>&1
cp /tmp/profile/profile.md /tmp/profile/profile.json "$OUT"/ || tail /tmp/profile.log
timeout 240 "$PY" benchmarks/tune_gemm_config.py --kernel-dir "$build" --out "$OUT/gemm_sweep.json" \
    --sweep ${GEMM_SWEEP_TOKENS:-128 256 512} 2>&1 | grep -v Warning | tee "$OUT/gemm_sweep.log" | tail -30

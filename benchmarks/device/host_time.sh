#!/usr/bin/env bash
# One call of the device tool: host time per call (direct launch against
# Triton's dispatch; kernelized decode MLP against eager at Gemma3 1B/4B
# dims), then the tests of the per-device tables, the launcher, the fallback
# and the offline compile check on the GPU. Outputs to $OUT.
source "$(dirname "$0")/setup.sh"
timeout 240 "$PY" benchmarks/host_time.py --kernel-dir "$build" --out "$OUT/host_time.json" 2>&1 \
    | tee "$OUT/host_time.log" | tail -12
timeout 330 "$PY" -m pytest -q -p no:cacheprovider tests/test_launcher.py tests/test_fallback.py \
    tests/test_device_tables.py tests/test_offline_compile.py tests/test_linear.py tests/test_geglu.py 2>&1 \
    | tail -15 | tee "$OUT/pytest.log"

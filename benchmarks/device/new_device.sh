#!/usr/bin/env bash
# One call of the device tool on a GPU the tables were not tuned on (an H100 beside the H200's
# measurements): the fused GEMM's launch table against cuBLAS plus our activation and eager on every
# Gemma MLP at 1-256 tokens (GPU time, side by side; the table's own choice, no candidate sweep:
# does the H200's crossover hold on this device's memory bandwidth?), then the GPU tests of every file
# that launches a kernel (TESTS overrides the list). Outputs to $OUT.
source "$(dirname "$0")/setup.sh"
timeout "${TABLE_TIMEOUT_S:-240}" "$PY" benchmarks/tune_gemm_config.py --kernel-dir "$build" --sweep \
    --out "$OUT/table_vs_cublas.json" 2>&1 | grep -v "Warning\|dirty git" | tee "$OUT/table_vs_cublas.log" | cut -c1-150
tests=${TESTS:-tests/test_geglu.py tests/test_linear.py tests/test_layers.py tests/test_training.py tests/test_ops.py
    tests/test_launcher.py tests/test_device_tables.py tests/test_fallback.py tests/test_tensor_parallel.py
    tests/test_transformers_route.py tests/test_models.py}
# shellcheck disable=SC2086  # a list of test files
timeout "${SUITE_TIMEOUT_S:-300}" "$PY" -m pytest -q -p no:cacheprovider -rfEs --durations=10 \
    --junitxml="$OUT/pytest.xml" $tests 2>&1 | tee "$OUT/pytest.log" | tail -25

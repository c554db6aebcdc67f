#!/usr/bin/env bash
# One call of the device tool: for every Gemma size's MLP at 1, 8 and 16 tokens, the launch table's fused
# GEMM against the copy-rate floor and against the fastest one-kernel read of the same bytes
# (tune_gemm_config.py without a candidate sweep: its read-once is a streaming read swept over
# launches), and against a baseline build's table where .baseline-build holds one; timed once after
# the default L2 flush (a write: dirty lines) and once after a read flush (clean lines, as at decode);
# FLUSHES=read (or write) runs one of them, so that the call fits the device tool's 10 minutes with time
# to spare. Then the GPU tests of the files that run the fused GEMM. Outputs to $OUT.
source "$(dirname "$0")/setup.sh"
baseline=()
[ -d .baseline-build ] && baseline=(--baseline-kernel-dir .baseline-build)
for flush in ${FLUSHES:-write read}; do
    flag=(); [ "$flush" = read ] && flag=(--read-flush)
    timeout 200 "$PY" benchmarks/tune_gemm_config.py --kernel-dir "$build" "${baseline[@]}" --tokens 1 8 16 --sweep \
        "${flag[@]}" --out "$OUT/read_floor_${flush}_flush.json" 2>&1 | grep -v "Warning\|dirty git" \
        | tee "$OUT/read_floor_${flush}_flush.log" | tail -3
done
timeout 200 "$PY" -m pytest -q -p no:cacheprovider -rfEs --junitxml="$OUT/pytest_gemm_paths.xml" \
    tests/test_linear.py tests/test_layers.py tests/test_device_tables.py tests/test_models.py 2>&1 \
    | tee "$OUT/pytest_gemm_paths.log" | tail -6

#!/usr/bin/env bash
# One call of the device tool, after the fused GEMM's table took classes past 64 tokens for small
# weights (PERFORMANCE v15): the GPU tests of the GEMM's paths; the table against cuBLAS plus our
# activation and eager on the MLPs at the crossover (GPU time, side by side); host time with the
# build carried as .baseline-build/ timed beside; the MLP part of the model-level benchmark
# (GPU time by CUDA-graph replay, host and wall time).
source "$(dirname "$0")/setup.sh"
timeout 120 "$PY" -m pytest -q -p no:cacheprovider tests/test_linear.py tests/test_device_tables.py tests/test_layers.py \
    --junitxml="$OUT/pytest_gemm_paths.xml" 2>&1 | tail -6 | tee "$OUT/pytest_gemm_paths.log"
timeout 120 "$PY" benchmarks/tune_gemm_config.py --kernel-dir "$build" --tokens 128 192 256 --sweep \
    --models "Gemma3 1B" "Gemma2 2B" "Gemma3 4B" "Gemma 2B" "Gemma2 9B" --out "$OUT/crossover_table.json" 2>&1 \
    | grep -v "Warning\|dirty git" | tee "$OUT/crossover_table.log" | cut -c1-200
baseline=()
[ -d .baseline-build ] && baseline=(--baseline-kernel-dir .baseline-build)
timeout 130 "$PY" benchmarks/host_time.py --kernel-dir "$build" "${baseline[@]}" --out "$OUT/host_time.json" 2>&1 \
    | grep -v "dirty git tree" | tee "$OUT/host_time.log" | grep "MLP\|stage.*\(geglu_mlp\|linear_impl\|GeGLUMLP\)"
timeout 150 "$PY" -m geglu_triton bench --models 1b 4b --model-parts mlp --kernel-dir "$build" --out /tmp/models \
    --time-budget-s 130 > /tmp/models.log 2>&1
mkdir -p /tmp/models && cp /tmp/models.log /tmp/models/ && tar -C /tmp -cf "$OUT/models_mlp.tar" models
grep "mlp x" /tmp/models.log | tail -32

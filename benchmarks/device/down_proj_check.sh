#!/usr/bin/env bash
# One call of the device tool, after the down projection's one-token form became the default
# (PERFORMANCE v14): the GPU tests of the GEMM's paths; the launch table's configuration against
# cuBLAS's F.linear on every Gemma down projection at one token (side by side); host time with
# the build carried as .baseline-build/ timed beside (host_time.sh); the MLP part of the
# model-level benchmark on every Gemma3 size (GPU time by CUDA-graph replay, host and wall time).
source "$(dirname "$0")/setup.sh"
timeout 170 "$PY" -m pytest -q -p no:cacheprovider tests/test_linear.py tests/test_fallback.py tests/test_ops.py \
    tests/test_layers.py tests/test_training.py tests/test_device_tables.py --junitxml="$OUT/pytest_gemm_paths.xml" \
    2>&1 | tail -6 | tee "$OUT/pytest_gemm_paths.log"
timeout 60 "$PY" benchmarks/tune_gemm_config.py --kernel-dir "$build" --down-proj --tokens 1 --sweep \
    --out "$OUT/down_proj_table.json" 2>&1 | grep -v "Warning\|dirty git" | tee "$OUT/down_proj_table.log" | tail -10
baseline=()
[ -d .baseline-build ] && baseline=(--baseline-kernel-dir .baseline-build)
timeout 130 "$PY" benchmarks/host_time.py --kernel-dir "$build" "${baseline[@]}" --out "$OUT/host_time.json" 2>&1 \
    | grep -v "dirty git tree" | tee "$OUT/host_time.log" | grep "MLP\|stage.*\(geglu_mlp\|linear_impl\|F.linear(h, down\|GeGLUMLP\)"
timeout 150 "$PY" -m geglu_triton bench --models --model-parts mlp --kernel-dir "$build" --out /tmp/models \
    --time-budget-s 130 > /tmp/models.log 2>&1
mkdir -p /tmp/models && cp /tmp/models.log /tmp/models/ && tar -C /tmp -cf "$OUT/models_mlp.tar" models
grep "mlp x" /tmp/models.log | tail -32

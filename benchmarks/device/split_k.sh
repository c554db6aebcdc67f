#!/usr/bin/env bash
# One call of the device tool: the split-K decode GEMM on the GPU. Its tests
# (tests/test_linear.py, with CUDA graphs and two streams; the tables), then,
# for every Gemma size's MLP at 1, 8 and 16 tokens, the launch table's choice
# against the weight-read floor, and at 1 and 16 tokens the decode tiles split
# over 1-8 programs per tile (tune_gemm_config.py --split-k); then host time
# (host_time.py: the 4B decode launches split); then the fused/cuBLAS crossover of the three
# smallest MLPs at 128-1024 tokens. Outputs to $OUT.
source "$(dirname "$0")/setup.sh"
timeout 120 "$PY" -m pytest -q -p no:cacheprovider -rfEs tests/test_linear.py tests/test_device_tables.py \
    --junitxml="$OUT/pytest_split_k.xml" 2>&1 | tee "$OUT/pytest_split_k.log" | tail -8
timeout 240 "$PY" benchmarks/tune_gemm_config.py --kernel-dir "$build" --tokens 1 8 16 --sweep 1 16 \
    --split-k 1 2 3 4 5 6 8 --out "$OUT/decode_split_k.json" 2>&1 | grep -v Warning | tee "$OUT/decode_split_k.log" | tail -30
timeout 100 "$PY" benchmarks/host_time.py --kernel-dir "$build" --out "$OUT/host_time.json" 2>&1 \
    | tee "$OUT/host_time.log" | grep -v "dirty git tree" | tail -12
# Where the fused GEMM and cuBLAS cross over for the smallest MLPs, whose MLP alone is host-bound at
# 256-1024 tokens (PERFORMANCE v11): every candidate configuration against two cuBLAS GEMMs.
timeout 100 "$PY" benchmarks/tune_gemm_config.py --kernel-dir "$build" --tokens 128 256 512 1024 \
    --models "Gemma3 1B" "Gemma2 2B" "Gemma3 4B" --out "$OUT/crossover_small.json" 2>&1 | grep -v Warning \
    | tee "$OUT/crossover_small.log" | tail -12

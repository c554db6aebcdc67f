#!/usr/bin/env bash
# One call of the device tool: one-token tiles (BLOCK_M 1, the GEMM kernel's GEMV form) swept at one
# token on every Gemma size's MLP, for the down projection (plain form, against cuBLAS's F.linear) and
# for the gated first half (against eager, cuBLAS + our activation, and the launch table's tile).
source "$(dirname "$0")/setup.sh"
for form in down-proj gated; do
    flag=(); [ "$form" = down-proj ] && flag=(--down-proj)
    timeout 260 "$PY" benchmarks/tune_gemm_config.py --kernel-dir "$build" "${flag[@]}" --gemv --tokens 1 \
        --out "$OUT/gemv_sweep_$form.json" 2>&1 | grep -v "Warning\|dirty git" | tee "$OUT/gemv_sweep_$form.log" | tail -12
done

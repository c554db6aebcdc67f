#!/usr/bin/env bash
# One call of the device tool: the fused GEMM's candidate sweep over every
# Gemma size's MLP (grid.GEMMA_MLPS) at decode and crossover token counts,
# with the shared memory and registers of each compiled configuration.
source "$(dirname "$0")/setup.sh"
timeout 520 "$PY" benchmarks/tune_gemm_config.py --kernel-dir "$build" --out "$OUT/gemm_sweep_all.json" 2>&1 \
    | grep -v Warning | tee "$OUT/gemm_sweep_all.log" | tail -70

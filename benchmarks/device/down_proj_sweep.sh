#!/usr/bin/env bash
# One call of the device tool: the down projection's candidate sweep (the plain
# kernel on one [hidden, intermediate] weight, every Gemma size's MLP at 1 and
# 16 tokens) against cuBLAS's F.linear, with the shared memory and registers of
# each compiled configuration: evidence for device_tables.DOWN_PROJ_TABLES.
source "$(dirname "$0")/setup.sh"
timeout 540 "$PY" benchmarks/tune_gemm_config.py --kernel-dir "$build" --down-proj --tokens 1 16 \
    --out "$OUT/down_proj_sweep.json" 2>&1 | grep -v Warning | tee "$OUT/down_proj_sweep.log" | tail -40

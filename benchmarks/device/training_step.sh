#!/usr/bin/env bash
# One call of the device tool: issue 15's training step (benchmarks/training_step.py)
# on the Gemma3 1B and 4B MLP stacks, 8 x 1024 tokens, bf16: eager, ours and
# Liger's LigerGEGLUMLP (liger_kernel from .whl/, see fetch_wheels.sh), then the
# training tests on the GPU. Outputs go to $OUT.
source "$(dirname "$0")/setup.sh"
timeout 420 "$PY" benchmarks/training_step.py --kernel-dir "$build" --out "$OUT/training_step.json" 2>&1 \
    | tee "$OUT/training_step.log" | tail -20
timeout 150 "$PY" -m pytest -q -p no:cacheprovider tests/test_training.py 2>&1 | tail -8 | tee "$OUT/pytest.log"

#!/usr/bin/env bash
# One call of the device tool, after the whole-MLP autograd step (PERFORMANCE v18): the GPU kernels of one
# Gemma3 1B MLP's training step (profile --training), the training part of bench --models on the 1B and
# 4B (step time and peak, eager, ours, Liger, torch.compile of the MLP), and the training tests. Outputs to $OUT.
source "$(dirname "$0")/setup.sh"
timeout 150 "$PY" -m geglu_triton profile --training --kernel-dir "$build" --out /tmp/profile_training \
    > /tmp/profile_training.log 2>&1
cp /tmp/profile_training/profile.json "$OUT/profile_training.json"
cp /tmp/profile_training/profile.md "$OUT/profile_training.md"
grep "^| mlp" "$OUT/profile_training.md" | cut -d'|' -f1-5
timeout 200 "$PY" -m geglu_triton bench --models 1b 4b --model-parts training --kernel-dir "$build" \
    --out /tmp/models_training > /tmp/models_training.log 2>&1
for f in models.json models.md; do cp "/tmp/models_training/$f" "$OUT/models_training_${f#models.}"; done
grep -v "mapping found\|WARNING:kernels\|^$" /tmp/models_training.log > "$OUT/models_training.log"
grep "training:" "$OUT/models_training.log"
timeout 120 "$PY" -m pytest -q -p no:cacheprovider -rfEs --junitxml="$OUT/pytest_training.xml" tests/test_training.py \
    tests/test_bench.py::test_profile_training_runs_forward_and_backward 2>&1 | tee "$OUT/pytest_training.log" | tail -4

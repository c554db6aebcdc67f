#!/usr/bin/env bash
# One call of the device tool, on the training targets of issue 15 (PERFORMANCE v17): what the Gemma3 1B
# and 4B training steps save for the backward, by part of the model, with each step's peak
# (benchmarks/saved_activations.py, whole models at bench --models' training shape); the GPU kernels of one
# Gemma3 1B MLP's training step for eager, torch.compile, Liger and ours (profile --training); then the
# test files given as arguments. Outputs to $OUT.
source "$(dirname "$0")/setup.sh"
timeout 200 "$PY" benchmarks/saved_activations.py --kernel-dir "$build" --out "$OUT/saved_activations.json" 2>&1 \
    | grep -v "mapping found\|dirty git tree" | tee "$OUT/saved_activations.log" | tail -8
timeout 150 "$PY" -m geglu_triton profile --training --kernel-dir "$build" --out /tmp/profile_training \
    > /tmp/profile_training.log 2>&1
cp /tmp/profile_training/profile.json "$OUT/profile_training.json"
cp /tmp/profile_training/profile.md "$OUT/profile_training.md"
grep "^| mlp" "$OUT/profile_training.md" | cut -d'|' -f1-5
[ $# -gt 0 ] && timeout 240 "$PY" -m pytest -q -p no:cacheprovider -rfEs --junitxml="$OUT/pytest.xml" "$@" 2>&1 \
    | tee "$OUT/pytest.log" | tail -8
exit 0

#!/usr/bin/env bash
# One call of the device tool: the whole test suite on the GPU, as
# `sys.executable -m pytest` (no console script from PATH), with the wheels of
# .whl/ installed by scripts/env.sh. The log and a JUnit report go to $OUT.
# Arguments go to pytest (test files: a part of the suite). On a cold machine the
# whole suite no longer fits one call (v13: 490 of 521 tests in 440 s): run it in
# two, the files up to test_readme.py, then the rest (test_tensor_parallel.py
# test_training.py test_transformers_route.py, about 70 s).
source "$(dirname "$0")/setup.sh"
"$PY" -c 'import torch, triton, transformers, kernels; print("torch", torch.__version__, "triton", triton.__version__, "transformers", transformers.__version__, "kernels", kernels.__version__)'
timeout "${SUITE_TIMEOUT_S:-450}" "$PY" -m pytest -q -p no:cacheprovider -rfEs --durations=15 \
    --junitxml="$OUT/pytest.xml" "$@" 2>&1 | tee "$OUT/pytest.log" | tail -60

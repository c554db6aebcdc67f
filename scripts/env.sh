# Sourced by scripts/test.sh and scripts/demo.sh: sets up the Python
# environment for fused-geglu on a fresh machine and sets PY to the interpreter.
#
# - Where python3 already has a CUDA (or ROCm) build of torch, as on a GPU box,
#   that interpreter is used as it is; only missing packages are installed.
# - Otherwise a virtual environment .venv is created with the pinned CPU build
#   of torch (torch==2.13.0) and requirements-dev.txt.
# Either way the toolkit (geglu_triton) is installed in editable mode. On a
# machine without a GPU, TRITON_INTERPRET=1 is exported so that the real
# Triton kernels run, interpreted, on CPU tensors.
cd "$(dirname "${BASH_SOURCE[0]}")/.."

log() { echo "[env] $*" >&2; }

if python3 -c 'import sys, torch; sys.exit(0 if (torch.version.cuda or torch.version.hip) else 1)' 2>/dev/null; then
    PY=python3
    log "using the GPU build of torch in $(command -v python3)"
    if [ -d .whl ]; then
        # An offline GPU box: packages it lacks travel as wheels in .whl/.
        site="${TMPDIR:-/tmp}/fused-geglu-site"
        log "installing the wheels in .whl/ into $site"
        python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$site" .whl/*.whl >&2
        export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
    else
        missing=$(python3 - <<'PY'
import importlib.util
for mod, pkg in [("kernels", "kernels==0.17.2"), ("fastapi", "fastapi"), ("uvicorn", "uvicorn"), ("pytest", "pytest"),
                 ("hypothesis", "hypothesis==6.170.15")]:
    if importlib.util.find_spec(mod) is None:
        print(pkg)
PY
)
        if [ -n "$missing" ]; then
            log "installing: $missing"
            python3 -m pip install -q $missing >&2
        fi
    fi
    export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
else
    if [ ! -x .venv/bin/python ]; then
        log "creating .venv"
        python3 -m venv .venv
    fi
    PY=.venv/bin/python
    if ! "$PY" -c 'import torch, sys; sys.exit(0 if torch.__version__.startswith("2.13.0") else 1)' 2>/dev/null; then
        log "installing torch==2.13.0 (CPU build)"
        "$PY" -m pip install -q torch==2.13.0 >&2
    fi
    log "installing requirements-dev.txt"
    "$PY" -m pip install -q -r requirements-dev.txt >&2
    "$PY" -m pip install -q --no-deps -e . >&2
fi
if ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
    export TRITON_INTERPRET=1
fi

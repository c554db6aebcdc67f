"""Shared test set-up.

Without a GPU, TRITON_INTERPRET=1 is set here unless the environment sets it.
The Hub endpoint is fixed here, at import, because huggingface_hub (and so
kernels) reads HF_ENDPOINT once, when it is first imported. The local Hub
server itself starts only when a test asks for the ``hub`` fixture.

Nothing outlives the run: the HF_HOME made here is removed when the session
ends, and pytest's own temporary directories (``tmp_path``) are removed too
unless their test failed (``tmp_path_retention_policy`` in pyproject.toml).
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from pathlib import Path

import pytest
import torch

# Without a GPU the tests run the Triton kernels under Triton's interpreter, as scripts/test.sh does:
# otherwise CPU tensors take the PyTorch fallback, and the kernel tests would test that instead. Set
# before any test module imports triton, which reads it when it decorates a kernel; an explicit
# TRITON_INTERPRET is left as it is.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

def _free_loopback_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


HUB_PORT = _free_loopback_port()
HUB_TOKEN = "hf_local_test_token"
TRUSTED_ORG = "org"
_HF_HOME = tempfile.mkdtemp(prefix="fused-geglu-hf-home-")

os.environ["HF_ENDPOINT"] = f"http://127.0.0.1:{HUB_PORT}"
os.environ["HF_HOME"] = _HF_HOME
os.environ["HF_TOKEN"] = HUB_TOKEN
# With huggingface_hub 2.4 and kernels 0.17.2 this variable breaks every
# kernels request (a malformed User-Agent); make sure it is not inherited.
os.environ.pop("HF_HUB_DISABLE_TELEMETRY", None)
os.environ.pop("HF_HUB_OFFLINE", None)


def pytest_unconfigure(config) -> None:
    shutil.rmtree(_HF_HOME, ignore_errors=True)


@pytest.fixture(scope="session")
def build_dir(tmp_path_factory) -> Path:
    """The kernel built from this checkout, as ``python -m geglu_triton build`` does."""
    from geglu_triton.build import build_variants

    out = tmp_path_factory.mktemp("build")
    build_variants(out)
    return out


@pytest.fixture(scope="session")
def kernel(build_dir):
    """The kernel module, loaded from the build output through ``kernels``, as users load it."""
    from kernels import get_local_kernel

    return get_local_kernel(build_dir)


@pytest.fixture(scope="session")
def hub(tmp_path_factory, kernel):
    """A local Hub server on HUB_PORT (the HF_ENDPOINT above), trusting TRUSTED_ORG.

    After ``kernel``: kernels names a build's module after the build's id, so a Hub copy of this build
    imported first would own the module's name in sys.modules, and the local load would then reuse its
    submodules without binding them to the package (``kernel.ops`` missing in whichever test came next).
    """
    from geglu_triton.hub.background import LocalHub

    with LocalHub(
        tmp_path_factory.mktemp("hub-data"),
        port=HUB_PORT,
        trusted_orgs=(TRUSTED_ORG,),
        token=HUB_TOKEN,
    ) as running:
        yield running

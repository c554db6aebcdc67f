"""The main job, as README's first command runs it: python -m geglu_triton demo."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from geglu_triton import REPO_ROOT
from geglu_triton.demo import _require_swapped_mlps
from geglu_triton.errors import UserError
from geglu_triton.models import KernelizeReport


def test_demo_end_to_end(tmp_path):
    """With the user's own caches set, which take precedence over HF_HOME: the demo's downloads stay in its scratch
    directory (they went into the user's hub cache)."""
    users_caches = {name: tmp_path / name.lower() for name in ("HF_HUB_CACHE", "KERNELS_CACHE")}
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update({name: str(path) for name, path in users_caches.items()})
    result = subprocess.run(
        [sys.executable, "-m", "geglu_triton", "demo", "--build", str(tmp_path / "build"), "--allow-dirty"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "swapped: model.layers.0.mlp" in result.stdout
    # Under pytest without a GPU TRITON_INTERPRET=1 is set (conftest), and the demo says what ran.
    ran = "the Triton kernels, compiled for cuda" if torch.cuda.is_available() else "the Triton kernels under Triton's"
    assert f"the kernel's MLPs will run {ran}" in result.stdout
    assert "OK: the kernelized model matches the original" in result.stdout
    assert not any(path.exists() for path in users_caches.values())


def test_a_kernelize_that_swapped_nothing_is_named_by_its_cause():
    """kernelize_geglu_mlps returns an empty swap only where DISABLE_KERNEL_MAPPING is set (it raises otherwise)."""
    with pytest.raises(UserError, match="DISABLE_KERNEL_MAPPING is set"):
        _require_swapped_mlps(KernelizeReport(classes=["Gemma3MLP"], swapped_modules=[]))
    _require_swapped_mlps(KernelizeReport(classes=["Gemma3MLP"], swapped_modules=["model.layers.0.mlp"]))

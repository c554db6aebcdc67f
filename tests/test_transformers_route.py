"""transformers' own kernel route, against the local Hub: ``from_pretrained(..., use_kernels=True, kernel_config=...)``.

``KernelConfig({"Gemma3MLP": "org/fused-geglu:GeGLUMLP"})`` needs no
registration by the user: transformers finds the kernel's ``GeGLUMLPLayout``
next to ``GeGLUMLP``, builds the model with it in place of the Gemma MLP and
kernelizes it. transformers 5.22 takes no ``cpu`` device in a KernelConfig,
so:

- on a GPU, the route runs as users run it (``-m gpu``; the lead runs it on the H200);
- on CPU (CI), the same route runs with ``cpu`` added to transformers' list of
  kernel devices, after checking that transformers still refuses it; and the
  route transformers does allow on CPU (``use_kernels=True`` with a ``cpu``
  mapping registered with kernels) runs as it is.

Each test checks that the MLPs run our forward (``check_geglu_mlps``) and that
the logits match the eager model's.
"""

from __future__ import annotations

import copy
import os

import pytest
import torch

from geglu_triton.models import KernelLoadError, check_geglu_mlps, kernelize_geglu_mlps
from geglu_triton.publish import publish
from reference import ERROR_RATIO_TO_EAGER, FORWARD_REL_TOL, rel_error
from tiny_models import LOGITS_REL_TOL, VOCAB_SIZE, tiny_model

transformers = pytest.importorskip("transformers")
from transformers import AutoModelForCausalLM, KernelConfig  # noqa: E402
from transformers.utils import kernel_config as kernel_config_module  # noqa: E402

REPO = "org/fused-geglu-transformers"
MLP_CLASS = {"gemma": "GemmaMLP", "gemma2": "Gemma2MLP", "gemma3": "Gemma3MLP"}
MLP_NAMES = ["model.layers.0.mlp", "model.layers.1.mlp"]


@pytest.fixture(scope="module")
def published(hub, build_dir):
    from huggingface_hub import HfApi

    api = HfApi(endpoint=hub.endpoint, token=os.environ["HF_TOKEN"])
    publish(build_dir, REPO, api=api, allow_dirty=True, import_check=False, echo=lambda _line: None)
    return REPO


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """family -> (directory of a tiny random model saved with save_pretrained, that model, eager)."""
    models = {}
    for family in MLP_CLASS:
        model = tiny_model(family).eval()
        path = tmp_path_factory.mktemp(f"tiny-{family}")
        model.save_pretrained(path)
        models[family] = (path, model)
    return models


@pytest.fixture(autouse=True)
def restore_transformers_patches():
    """A KernelConfig registers its layout process-wide (transformers' patch mapping); undo it after each test."""
    from transformers.monkey_patching import clear_patch_mapping, get_patch_mapping, register_patch_mapping

    before = get_patch_mapping()
    yield
    clear_patch_mapping()
    register_patch_mapping(before)


@pytest.fixture
def cpu_admitted(monkeypatch):
    """Let transformers' KernelConfig take ``cpu``, which 5.22 refuses, so that the GPU route runs in CI."""
    devices = kernel_config_module.KERNELS_SUPPORTED_DEVICE_TYPES
    assert "cpu" not in devices, "transformers now takes a cpu KernelConfig: run the route as it is, drop this fixture"
    monkeypatch.setattr(kernel_config_module, "KERNELS_SUPPORTED_DEVICE_TYPES", [*devices, "cpu"])


def kernel_config(family: str) -> KernelConfig:
    # inherit_mapping=False: only our mapping, not transformers' defaults (which would fetch
    # kernels-community's kernels for other layers, and Liger's GeGLUMLP for training).
    return KernelConfig({MLP_CLASS[family]: (f"{REPO}:GeGLUMLP", {"version": 1})}, inherit_mapping=False)


def logits(model, device="cpu"):
    input_ids = torch.randint(0, VOCAB_SIZE, (2, 12), generator=torch.Generator().manual_seed(1)).to(device)
    with torch.no_grad():
        return model(input_ids).logits


def test_transformers_refuses_a_cpu_kernel_config(published, saved):
    path, _ = saved["gemma3"]
    with pytest.raises(ValueError, match="got: cpu"):
        AutoModelForCausalLM.from_pretrained(path, use_kernels=True, kernel_config=kernel_config("gemma3"))


@pytest.mark.parametrize("family", list(MLP_CLASS))
def test_kernel_config_route_swaps_every_gemma_mlp(published, saved, cpu_admitted, family):
    path, eager = saved[family]
    model = AutoModelForCausalLM.from_pretrained(path, use_kernels=True, kernel_config=kernel_config(family))
    assert type(model.model.layers[0].mlp).__name__ == "GeGLUMLPLayout"
    assert check_geglu_mlps(model) == MLP_NAMES
    assert rel_error(logits(model), logits(eager)) <= LOGITS_REL_TOL


def test_train_after_the_kernel_config_route_is_reported_and_fixed(published, saved, cpu_admitted):
    """model.train() kernelizes again for training, which the KernelConfig's mapping (made for
    inference) lacks: transformers silently keeps the layout's own forward. check_geglu_mlps says so,
    and kernelize_geglu_mlps puts the layer back for training."""
    path, _ = saved["gemma3"]
    model = AutoModelForCausalLM.from_pretrained(path, use_kernels=True, kernel_config=kernel_config("gemma3"))
    model.train()
    unfused = (
        r"^2 of 2 modules mapped to GeGLUMLP do not run its forward \(first: model.layers.0.mlp, which runs "
        r"GeGLUMLPLayout.forward\)"
    )
    with pytest.raises(KernelLoadError, match=unfused):
        check_geglu_mlps(model)
    with pytest.warns(UserWarning, match="in training mode"):
        assert check_geglu_mlps(model, strict=False) == []
    kernelize_geglu_mlps(model, repo_id=published, version=1)
    assert check_geglu_mlps(model) == MLP_NAMES


def test_use_kernels_false_keeps_the_layer_through_train_and_eval(published, saved, cpu_admitted):
    """README's advice for training: with use_kernels set to False after from_pretrained, train() and eval()
    (Trainer switches at every evaluation) no longer kernelize again, and the MLPs keep GeGLUMLP."""
    path, _ = saved["gemma3"]
    model = AutoModelForCausalLM.from_pretrained(path, use_kernels=True, kernel_config=kernel_config("gemma3"))
    model.use_kernels = False
    for switch in (model.train, model.eval, model.train):
        switch()
        assert check_geglu_mlps(model) == MLP_NAMES


def test_a_model_without_mapped_mlps_is_reported():
    with pytest.raises(KernelLoadError, match="no module of Sequential is mapped to GeGLUMLP"):
        check_geglu_mlps(torch.nn.Sequential(torch.nn.Linear(4, 4)))


def test_use_kernels_with_a_cpu_mapping(published, saved):
    """The route transformers allows on CPU: the MLP class registered, a cpu mapping given to kernels."""
    from kernels import LayerRepository, replace_kernel_forward_from_hub, use_kernel_mapping
    from transformers.models.gemma3.modeling_gemma3 import Gemma3MLP

    path, eager = saved["gemma3"]
    replace_kernel_forward_from_hub(Gemma3MLP, "GeGLUMLP")
    repository = LayerRepository(published, layer_name="GeGLUMLP", version=1)
    with use_kernel_mapping({"GeGLUMLP": {"cpu": repository}}):
        model = AutoModelForCausalLM.from_pretrained(path, use_kernels=True)
    assert check_geglu_mlps(model) == MLP_NAMES
    assert rel_error(logits(model), logits(eager)) <= LOGITS_REL_TOL


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="transformers takes a KernelConfig only for GPU devices")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("family", list(MLP_CLASS))
def test_kernel_config_route_on_the_gpu(published, saved, family, dtype):
    """The route as users run it, with no emulation; bf16 at 24 tokens runs the fused gate/up GEMM."""
    path, eager = saved[family]
    model = AutoModelForCausalLM.from_pretrained(
        path, use_kernels=True, kernel_config=kernel_config(family), device_map="cuda", dtype=dtype
    )
    assert check_geglu_mlps(model) == MLP_NAMES
    eager = copy.deepcopy(eager).to("cuda")
    exact = logits(eager, "cuda")
    if dtype == torch.float32:
        assert rel_error(logits(model, "cuda"), exact) <= LOGITS_REL_TOL
    else:
        eager_error = rel_error(logits(eager.to(dtype), "cuda"), exact)
        bound = max(FORWARD_REL_TOL[dtype], ERROR_RATIO_TO_EAGER * eager_error)
        assert rel_error(logits(model, "cuda"), exact) <= bound

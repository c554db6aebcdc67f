"""Kernelize tiny Gemma, Gemma2 and Gemma3 models with the layer published on the local Hub.

The kernel is built from this checkout, published to the ``hub`` fixture and
fetched back through ``LayerRepository`` (by ``geglu_triton.models``), as a
user's model would get it.
"""

from __future__ import annotations

import copy
import io
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import types
from pathlib import Path

import kernels
import pytest
import torch

from geglu_triton import REPO_ROOT, layout
from geglu_triton.buildinfo import read_config
from geglu_triton.models import (
    DEFAULT_REPO_ID,
    KernelLoadError,
    NoGeGLUMLPError,
    check_geglu_mlps,
    kernelize_geglu_mlps,
)
from geglu_triton.publish import publish
from child_process import child_env
from kernel_sources import redigest
from reference import rel_error
from tiny_models import (
    BOI_TOKEN,
    EOI_TOKEN,
    IMAGE_SIZE,
    IMAGE_TOKEN,
    IMAGE_TOKENS,
    LOGITS_REL_TOL,
    tiny_gemma3_multimodal,
    tiny_model,
    tiny_t5gemma_mlp,
)

transformers = pytest.importorskip("transformers")

REPO = "org/fused-geglu-models"
GRAD_REL_TOL = 1e-4  # fp32 model: fused backward (fp32 math) against eager autograd


@pytest.fixture(scope="module")
def published(hub, build_dir):
    from huggingface_hub import HfApi

    api = HfApi(endpoint=hub.endpoint, token=os.environ["HF_TOKEN"])
    publish(build_dir, REPO, api=api, allow_dirty=True, import_check=False, echo=lambda _line: None)
    return REPO


def _run(model, input_ids, train: bool):
    model.train(train)
    logits = model(input_ids).logits
    if not train:
        return logits, None
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), input_ids.flatten())
    loss.backward()
    return logits, {name: p.grad for name, p in model.named_parameters()}


@pytest.mark.parametrize("train", [False, True], ids=["inference", "training"])
@pytest.mark.parametrize("activation", ["gelu_pytorch_tanh", "gelu"])
@pytest.mark.parametrize("family", ["gemma", "gemma2", "gemma3"])
def test_kernelized_model_matches_the_original(kernel, published, family, activation, train):
    original = tiny_model(family, activation)
    kernelized = copy.deepcopy(original)
    kernelized.train(train)
    report = kernelize_geglu_mlps(kernelized, repo_id=published, version=1)
    assert report.swapped_modules == [f"model.layers.{i}.mlp" for i in range(2)]
    # The fused path runs, not the module's own forward: kernelize also binds forwards on the activations.
    assert None not in [kernel.layers.gelu_approximation(layer.mlp) for layer in kernelized.model.layers]

    input_ids = torch.randint(0, 128, (2, 12))
    expected_logits, expected_grads = _run(original, input_ids, train)
    logits, grads = _run(kernelized, input_ids, train)
    assert rel_error(logits, expected_logits) <= LOGITS_REL_TOL
    if train:
        assert grads.keys() == expected_grads.keys()
        for name, grad in grads.items():
            assert rel_error(grad, expected_grads[name]) <= GRAD_REL_TOL, name


def test_a_model_with_another_activation_is_named_whatever_was_registered(published):
    """A SiLU Gemma3 whose MLP class is registered anyway (as transformers' or an earlier call's registration
    leaves it, process-wide): the helper decides on the model's activations alone, says it has no GeGLU MLP
    and changes nothing (it returned two 'swapped' modules that ran unfused, or raised, depending on what
    had run before in the process); the logits stay eager's."""
    from kernels import replace_kernel_forward_from_hub
    from transformers.models.gemma3.modeling_gemma3 import Gemma3MLP

    original = tiny_model("gemma3", "silu")
    kernelized = copy.deepcopy(original)
    replace_kernel_forward_from_hub(Gemma3MLP, "GeGLUMLP")
    with pytest.raises(NoGeGLUMLPError, match="Gemma3ForCausalLM has no GeGLU MLP to kernelize"):
        kernelize_geglu_mlps(kernelized, repo_id=published, version=1)
    assert all("forward" not in module.__dict__ for module in kernelized.modules())
    input_ids = torch.randint(0, 128, (1, 8))
    with torch.no_grad():
        assert torch.equal(kernelized(input_ids).logits, original(input_ids).logits)


def test_a_model_without_a_geglu_mlp_is_an_error_not_an_empty_report(published):
    """A model whose MLPs are not GeGLU MLPs (Llama's SwiGLU, a class nothing maps to the layer): kernelize_geglu_mlps
    says so, where it returned an empty report and changed nothing, silently."""
    import transformers

    config = transformers.LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1,
    )
    model = transformers.LlamaForCausalLM(config)
    with pytest.raises(NoGeGLUMLPError, match="LlamaForCausalLM has no GeGLU MLP to kernelize"):
        kernelize_geglu_mlps(model, repo_id=published, version=1)
    assert all("forward" not in module.__dict__ for module in model.modules())


def test_gemma3n_keeps_its_sparse_layers_exact(published):
    """Gemma 3n's MLP class is a GeGLU MLP and is kernelized; its sparse layer (a top-k of the gate before
    the GELU) runs its own forward through the layer, so the logits stay eager's."""
    original = tiny_model("gemma3n").eval()
    kernelized = copy.deepcopy(original)
    report = kernelize_geglu_mlps(kernelized, repo_id=published, version=1)
    assert report.classes == ["Gemma3nTextMLP"]
    assert report.swapped_modules == ["model.layers.0.mlp", "model.layers.1.mlp"]
    input_ids = torch.randint(0, 128, (1, 8))
    with torch.no_grad():
        assert rel_error(kernelized(input_ids).logits, original(input_ids).logits) <= LOGITS_REL_TOL


def test_a_multimodal_gemma3_kernelizes_its_language_model(published):
    """Gemma 3's larger checkpoints load as Gemma3ForConditionalGeneration: the language model's MLPs are
    kernelized, the vision tower's (SigLIP's fc1/fc2, not a GeGLU) keep theirs, and a prompt with an image
    gives eager's logits."""
    original = tiny_gemma3_multimodal().eval()
    kernelized = copy.deepcopy(original)
    report = kernelize_geglu_mlps(kernelized, repo_id=published, version=1)
    assert report.classes == ["Gemma3MLP"]
    assert report.swapped_modules == ["model.language_model.layers.0.mlp", "model.language_model.layers.1.mlp"]
    input_ids = torch.tensor([[5, 6, BOI_TOKEN, *[IMAGE_TOKEN] * IMAGE_TOKENS, EOI_TOKEN, 7, 8]])
    pixel_values = torch.randn(1, 3, IMAGE_SIZE, IMAGE_SIZE)
    with torch.no_grad():
        logits = kernelized(input_ids=input_ids, pixel_values=pixel_values).logits
        expected = original(input_ids=input_ids, pixel_values=pixel_values).logits
    assert rel_error(logits, expected) <= LOGITS_REL_TOL


class _LoraLinear(torch.nn.Module):
    """PEFT's LoRA layer as it wraps an nn.Linear: base_layer plus a low-rank update (not an nn.Linear itself)."""

    def __init__(self, base_layer: torch.nn.Linear, rank: int = 2):
        super().__init__()
        self.base_layer = base_layer
        self.lora_A = torch.nn.Linear(base_layer.in_features, rank, bias=False)
        self.lora_B = torch.nn.Linear(rank, base_layer.out_features, bias=False)

    def forward(self, x):
        return self.base_layer(x) + self.lora_B(self.lora_A(x))


def test_a_lora_model_is_kernelized_and_keeps_its_adapters(published):
    """LoRA-wrapped projections are found, and GeGLUMLP calls them (the GeGLU fused, the adapters applied)."""
    original = tiny_model("gemma3").eval()
    for layer in original.model.layers:
        layer.mlp.up_proj = _LoraLinear(layer.mlp.up_proj)
        torch.nn.init.normal_(layer.mlp.up_proj.lora_B.weight)
    kernelized = copy.deepcopy(original)
    report = kernelize_geglu_mlps(kernelized, repo_id=published, version=1)
    assert report.swapped_modules == ["model.layers.0.mlp", "model.layers.1.mlp"]
    input_ids = torch.randint(0, 128, (1, 8))
    with torch.no_grad():
        assert rel_error(kernelized(input_ids).logits, original(input_ids).logits) <= LOGITS_REL_TOL


def test_only_modules_that_hold_nothing_but_a_geglu_mlp_are_taken_for_one():
    """Gemma-family MLPs are GeGLU MLPs; a module with a GELU and the three projections that holds more (a
    multiplier, a scale parameter, a norm) may compute more, and keeps its own forward."""
    from transformers.models.falcon_h1.modeling_falcon_h1 import FalconH1MLP

    from geglu_triton.models import is_geglu_mlp

    for family in ("gemma", "gemma2", "gemma3", "gemma3n"):
        assert all(is_geglu_mlp(layer.mlp) for layer in tiny_model(family).model.layers), family
    lora = tiny_model("gemma3").model.layers[0].mlp
    lora.gate_proj = _LoraLinear(lora.gate_proj)
    assert is_geglu_mlp(lora)
    kernelized = tiny_model("gemma3").model.layers[0].mlp
    kernelized.forward = types.MethodType(lambda self, x: x, kernelized)  # as kernelize (and accelerate) bind one
    assert is_geglu_mlp(kernelized)
    falcon = FalconH1MLP(types.SimpleNamespace(
        hidden_size=32, intermediate_size=64, mlp_bias=False, hidden_act="gelu_pytorch_tanh",
        mlp_multipliers=(0.5, 2.0),
    ))
    assert not is_geglu_mlp(falcon)  # y = down(up(x) * gelu(gate(x) * 0.5)) * 2
    scaled = tiny_model("gemma3").model.layers[0].mlp
    scaled.register_parameter("global_scale", torch.nn.Parameter(torch.ones(())))
    assert not is_geglu_mlp(scaled)
    normed = tiny_model("gemma3").model.layers[0].mlp
    normed.ffn_sub_norm = torch.nn.LayerNorm(72)
    assert not is_geglu_mlp(normed)


def test_classes_are_found_by_their_activation_whatever_the_mode(kernel):
    """A T5Gemma MLP in training (its dropout active, so the layer runs its own forward then) is still
    registered: in eval the same module takes the fused path."""
    from geglu_triton.models import geglu_mlp_classes

    model = torch.nn.Sequential(tiny_t5gemma_mlp()).train()
    assert kernel.layers.gelu_approximation(model[0]) is None
    assert geglu_mlp_classes(model, kernel.layers.activation_gelu_form) == [type(model[0])]


def test_a_subclass_with_a_forward_of_its_own_keeps_it(published):
    """Only what a module holds was read: a subclass whose forward scaled the output was swapped, and its
    logits changed silently. A class's forward must be transformers' or Liger's."""
    from transformers.models.gemma3.modeling_gemma3 import Gemma3MLP

    class ScaledMLP(Gemma3MLP):
        def forward(self, x):
            return 3.0 * super().forward(x)

    model = tiny_model("gemma3").eval()
    scaled = ScaledMLP(model.config)
    scaled.load_state_dict(model.model.layers[0].mlp.state_dict())
    model.model.layers[0].mlp = scaled
    tokens = torch.randint(0, model.config.vocab_size, (1, 6))
    with torch.no_grad():
        expected = model(tokens).logits
    report = kernelize_geglu_mlps(model, repo_id=published, version=1)
    assert report.classes == ["Gemma3MLP"] and report.swapped_modules == ["model.layers.1.mlp"]
    with torch.no_grad():
        assert rel_error(model(tokens).logits, expected) <= 1e-6


def _same_function(self, x):
    """A forward bound as kernelize binds a Hub kernel's: the class's own computation, marked by this name."""
    return type(self).forward(self, x)


def test_other_layers_keep_the_kernels_they_run(published):
    """The helper gave kernelize the whole model under a mapping of this layer alone, and kernelize put every
    other mapped layer back on its original forward: transformers' own Hub kernels (GeluTanh, here the vision
    tower's and the MLPs' activations) were silently undone."""
    model = tiny_gemma3_multimodal().eval()
    activations = [module for module in model.modules() if getattr(type(module), "kernel_layer_name", None) == "GeluTanh"]
    assert len(activations) >= 3  # in the vision tower and in each text MLP
    for activation in activations:
        activation.forward = types.MethodType(_same_function, activation)
    report = kernelize_geglu_mlps(model, repo_id=published, version=1)
    assert len(report.swapped_modules) == 2
    assert all(activation.forward.__func__ is _same_function for activation in activations)


def test_kernelizing_logs_nothing_about_layers_it_leaves_alone(published, caplog):
    """kernelize, given an MLP, walked its activation too (GeluTanh, mapped by transformers) and logged once per
    MLP that no kernel was mapped for it: a warning per layer of every Gemma3 model, in the demo too."""
    model = tiny_model("gemma3", "gelu_pytorch_tanh").eval()
    with caplog.at_level("INFO", logger="kernels"):
        report = kernelize_geglu_mlps(model, repo_id=published, version=1)
    assert report.swapped_modules == ["model.layers.0.mlp", "model.layers.1.mlp"]
    assert [r.getMessage() for r in caplog.records if "GeluTanh" in r.getMessage()] == []


def test_kernelizing_again_finds_the_same_classes(published):
    """After model.train() transformers' users kernelize again: the swapped modules are still GeGLU MLPs."""
    model = tiny_model("gemma3").eval()
    first = kernelize_geglu_mlps(model, repo_id=published, version=1)
    again = kernelize_geglu_mlps(model.train(), repo_id=published, version=1)
    assert again.classes == first.classes == ["Gemma3MLP"]
    assert again.swapped_modules == first.swapped_modules == ["model.layers.0.mlp", "model.layers.1.mlp"]


def test_an_unpickled_kernelized_module_is_named_as_unfused(published, tmp_path):
    """torch.save pickles a module's bound forward by name, so a loaded copy runs its class's forward again:
    correct, unfused. check_geglu_mlps names that cause among the others."""
    mlps = torch.nn.Sequential(*(layer.mlp for layer in tiny_model("gemma3").model.layers))
    kernelize_geglu_mlps(mlps, repo_id=published, version=1)
    buffer = io.BytesIO()
    torch.save(mlps, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    with pytest.raises(KernelLoadError, match=r"the model was unpickled \(torch.save keeps no kernelized forward"):
        check_geglu_mlps(loaded)
    kernelize_geglu_mlps(loaded, repo_id=published, version=1)
    assert check_geglu_mlps(loaded) == ["0", "1"]


def test_kernelize_with_torch_compile_mode(published):
    from kernels import Mode

    original = tiny_model("gemma3", "gelu_pytorch_tanh").eval()
    kernelized = copy.deepcopy(original)
    report = kernelize_geglu_mlps(kernelized, repo_id=published, version=1, mode=Mode.INFERENCE | Mode.TORCH_COMPILE)
    assert report.swapped_modules == ["model.layers.0.mlp", "model.layers.1.mlp"]  # not kernelize's fallback
    input_ids = torch.randint(0, 128, (1, 8))
    with torch.no_grad():
        assert rel_error(kernelized(input_ids).logits, original(input_ids).logits) <= LOGITS_REL_TOL


_KERNELIZE_WITHOUT_A_HUB = """
import torch
from geglu_triton.models import KernelLoadError, kernelize_geglu_mlps
for trust in (False, True):
    try:
        kernelize_geglu_mlps(torch.nn.Linear(2, 2), repo_id="org/fused-geglu", trust_remote_code=trust)
    except KernelLoadError as error:
        print(error)
"""


def test_an_unreachable_hub_is_named_in_one_line(tmp_path):
    """get_kernel says only that it "could not verify publisher trust status"; the helper names the network error."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        endpoint = f"http://127.0.0.1:{sock.getsockname()[1]}"  # closed once the block ends: refused
    env = child_env(HF_ENDPOINT=endpoint, HF_HOME=str(tmp_path))
    result = subprocess.run(
        [sys.executable, "-c", _KERNELIZE_WITHOUT_A_HUB], env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    refused = (
        f"connection refused by {endpoint.removeprefix('http://')}: is the Hub running? start a local Hub with "
        "`python -m geglu_triton hub serve --data DIR`, or fix HF_ENDPOINT"
    )
    assert result.stdout.splitlines() == [
        f"cannot check whether 'org' is a trusted kernel publisher at {endpoint}: "
        f"GET {endpoint}/api/organizations/org/overview: {refused}",
        f"cannot fetch org/fused-geglu version 1 from {endpoint}: GET {endpoint}/api/kernels/org/fused-geglu/refs: {refused}",
    ]


def test_a_repository_the_hub_does_not_have_is_named_in_one_line(published):
    """The Hub answered 404: no advice to start a Hub that is running, and no multi-line Hub text."""
    typo = published.replace("fused-geglu", "fused-gelgu")
    with pytest.raises(KernelLoadError) as caught:
        kernelize_geglu_mlps(torch.nn.Linear(2, 2), repo_id=typo, version=1)
    message = str(caught.value)
    assert "\n" not in message and "the repository does not exist" in message and typo in message
    assert "is the Hub running" not in message


def test_a_build_without_this_torchs_variant_is_named_in_one_line(tmp_path):
    with pytest.raises(KernelLoadError) as caught:
        kernelize_geglu_mlps(torch.nn.Linear(2, 2), local_path=tmp_path)
    message = str(caught.value)
    assert message.startswith(f"no build variant for this torch in {tmp_path} (")
    assert message.endswith(f"build one with `python -m geglu_triton build --out {tmp_path}`")
    assert "\n" not in message


@pytest.mark.parametrize(
    ("local_path", "error", "message"),
    [
        (lambda tmp: tmp / "missing", ValueError, "local_path: '{tmp}/missing' does not exist"),
        (lambda tmp: tmp / "a-file", ValueError, "local_path: '{tmp}/a-file' is not a directory"),
        (lambda tmp: "", ValueError, "local_path: an empty path: name a directory ('.' for the current one)"),
        (lambda tmp: 5, TypeError, "local_path must be a path (str or os.PathLike), got int"),
    ],
    ids=["missing", "file", "empty", "not-a-path"],
)
def test_a_local_path_that_is_not_a_directory_is_named(tmp_path, local_path, error, message):
    """A missing path or a file was 'no build variant for this torch'; '' silently meant the current directory."""
    (tmp_path / "a-file").write_text("")
    with pytest.raises(error, match=re.escape(message.format(tmp=tmp_path))):
        kernelize_geglu_mlps(torch.nn.Linear(2, 2), local_path=local_path(tmp_path))


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        ({"model": None}, TypeError, "model must be a torch.nn.Module, got NoneType"),
        ({"repo_id": 5}, TypeError, "repo_id must be a string, '<namespace>/<name>', got int"),
        ({"version": -1}, ValueError, "version must be 0 or more"),  # was an OverflowError from kernels' Rust
        ({"version": True}, TypeError, "version must be a whole number"),  # was taken for 1
        ({"version": "1"}, TypeError, "version must be a whole number (the kernel's major version), got '1'"),
        ({"trust_remote_code": "yes"}, TypeError, "trust_remote_code must be True, False or a list of repository ids"),
    ],
    ids=["model", "repo-id", "negative-version", "bool-version", "str-version", "trust"],
)
def test_arguments_of_the_wrong_kind_are_named_before_any_request(arguments, error, message):
    """Each was an error from deep inside kernels (or, for True, silently version 1)."""
    arguments = {"model": torch.nn.Linear(2, 2), "repo_id": "org/fused-geglu", "version": 1, **arguments}
    with pytest.raises(error, match=re.escape(message)):
        kernelize_geglu_mlps(arguments.pop("model"), **arguments)


@pytest.mark.parametrize(
    ("endpoint", "message"),
    [("", "HF_ENDPOINT is empty"), ("127.0.0.1:8080", "HF_ENDPOINT '127.0.0.1:8080' is not an http:// or https:// URL")],
    ids=["empty", "no-scheme"],
)
def test_an_hf_endpoint_that_is_not_a_url_is_named_before_any_request(monkeypatch, endpoint, message):
    """huggingface_hub reads HF_ENDPOINT on import and used it as it was: a request to '' failed with "cannot
    reach : Request URL is missing an 'http://' or 'https://' protocol". As publish names it, so do the helpers."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "ENDPOINT", endpoint)
    with pytest.raises(ValueError, match=re.escape(message)):
        kernelize_geglu_mlps(tiny_model("gemma3"), repo_id="org/fused-geglu", version=1)


def test_version_0_is_a_version(published):
    """build.toml (kernels-data) and get_kernel take version 0, and publish makes its branch v0: the helper asks
    the Hub for it (which has v1 only here) instead of refusing it as a mistake."""
    with pytest.raises(KernelLoadError, match=f"{published} version 0"):
        kernelize_geglu_mlps(tiny_model("gemma3"), repo_id=published, version=0)


@pytest.mark.parametrize("hub_kernel", [{"repo_id": "org/fused-geglu"}, {"version": 2}], ids=["repo-id", "version"])
def test_a_local_path_with_a_hub_kernel_is_refused(build_dir, hub_kernel):
    """local_path was taken and the repo_id or version beside it ignored without a word."""
    with pytest.raises(ValueError, match=r"^local_path and repo_id/version name two kernels: pass local_path"):
        kernelize_geglu_mlps(tiny_model("gemma3"), local_path=build_dir, **hub_kernel)


def test_a_build_of_another_kernel_is_named(build_dir, tmp_path):
    """A build that loads, digests intact, but holds no GeGLUMLP: kernels' ValueError from deep in kernelize."""
    other = tmp_path / "other"
    shutil.copytree(build_dir, other)
    for variant in layout.discover_variants(other):
        (variant / "__init__.py").write_text("from . import layers\n")
        (variant / "layers.py").write_text("class ReLU:\n    pass\n")
        # Its own module name: under the built one's, `from . import layers` finds that build's, imported already.
        metadata = variant / layout.METADATA_FILE
        metadata.write_text(json.dumps({**json.loads(metadata.read_text()), "id": f"_relu_{variant.name}"}))
        redigest(variant)
    with pytest.raises(KernelLoadError, match=re.escape(f"the kernel of {other} has no layers.GeGLUMLP")):
        kernelize_geglu_mlps(tiny_model("gemma3"), local_path=other)


def test_the_default_kernel_is_the_one_build_toml_publishes():
    assert read_config(REPO_ROOT).repo_id == DEFAULT_REPO_ID


def test_check_refuses_what_is_not_a_module():
    with pytest.raises(TypeError, match="model must be a torch.nn.Module, got NoneType"):
        check_geglu_mlps(None)


def test_a_repo_id_without_a_namespace_is_a_value_error_before_any_request():
    """Fetched, 'fused-geglu' was read as an organization: "organization 'fused-geglu' not found"."""
    expected = r"^repo_id 'fused-geglu' is not a kernel repository id: expected <namespace>/<name>"
    with pytest.raises(ValueError, match=expected):
        kernelize_geglu_mlps(torch.nn.Linear(2, 2), repo_id="fused-geglu", version=1)


@pytest.mark.parametrize(
    ("kwargs", "error", "expected"),
    [
        ({"mode": "inference"}, TypeError, "mode must be a kernels.Mode (Mode.INFERENCE, Mode.TRAINING, ...), got"),
        ({"mode": kernels.Mode.TORCH_COMPILE}, ValueError, "must contain Mode.INFERENCE or Mode.TRAINING"),
        ({"device": "mps"}, ValueError, "device 'mps': the kernel has variants for cuda, rocm, xpu, cpu"),
        ({"device": "cuda"}, ValueError, "device 'cuda' is not available to this torch"),
    ],
)
def test_a_mode_or_device_kernelize_cannot_use_is_named_before_any_request(kwargs, error, expected):
    """A mode string failed inside kernels after the download, 'cuda' on a CPU torch in torch.cuda's assertion,
    and 'mps' returned an empty report."""
    if kwargs.get("device") == "cuda" and torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    with pytest.raises(error, match=re.escape(expected)):
        kernelize_geglu_mlps(tiny_model("gemma3"), repo_id="org/unreachable", **kwargs)


def test_a_model_on_the_meta_device_needs_its_device_type(published):
    """Initialised on the meta device (from_pretrained's way), the model was reported kernelized with no module
    swapped; named now, and with device= it is kernelized."""
    with torch.device("meta"):
        model = tiny_model("gemma3")
    with pytest.raises(ValueError, match="the model is on the meta device: pass device="):
        kernelize_geglu_mlps(model, repo_id=published, version=1)
    report = kernelize_geglu_mlps(model, repo_id=published, version=1, device="cpu")
    assert report.swapped_modules == ["model.layers.0.mlp", "model.layers.1.mlp"]


def test_a_version_the_hub_does_not_have_is_one_line(published):
    with pytest.raises(KernelLoadError, match=f"^cannot load {published} version 2: ") as caught:
        kernelize_geglu_mlps(tiny_model("gemma3"), repo_id=published, version=2)
    assert "\n" not in str(caught.value)


def test_device_types_kernelize_takes_are_taken(monkeypatch):
    """A torch.device, as kernels' kernelize takes one, and 'cuda' on a ROCm torch, whose GPU tensors are 'cuda'
    tensors: both were refused by the first version of this check."""
    from geglu_triton.models import _device_type_to_kernelize

    model = torch.nn.Linear(2, 2)
    assert _device_type_to_kernelize(model, torch.device("cpu")) == "cpu"
    assert _device_type_to_kernelize(model, None) == "cpu"
    monkeypatch.setattr(torch.version, "hip", "6.4")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert _device_type_to_kernelize(model, "cuda") == "cuda"
    assert _device_type_to_kernelize(model, "rocm") == "rocm"


def test_a_kernelize_that_swaps_nothing_is_an_error(published, monkeypatch):
    monkeypatch.setattr(kernels, "kernelize", lambda model, **kwargs: model)
    with pytest.raises(KernelLoadError, match=r"^kernelize replaced none of the model's GeGLU MLPs \(Gemma3MLP\)"):
        kernelize_geglu_mlps(tiny_model("gemma3"), repo_id=published, version=1)


_KERNELIZE_WITH_MAPPING_DISABLED = """
import sys, warnings
sys.path.insert(0, {tests!r})
from tiny_models import tiny_model
from geglu_triton.models import kernelize_geglu_mlps
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    report = kernelize_geglu_mlps(tiny_model("gemma3"), local_path={build!r})
print(report.swapped_modules, [str(w.message) for w in caught if "DISABLE_KERNEL_MAPPING" in str(w.message)])
"""


def test_kernel_mapping_disabled_on_purpose_is_a_warning(build_dir):
    """kernels' DISABLE_KERNEL_MAPPING=1 keeps every original forward by design: said, not raised."""
    script = _KERNELIZE_WITH_MAPPING_DISABLED.format(tests=str(Path(__file__).parent), build=str(build_dir))
    env = {**child_env(), "DISABLE_KERNEL_MAPPING": "1"}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == (
        "[] [\"DISABLE_KERNEL_MAPPING is set: kernelize kept every module's own forward\"]"
    )

"""Kernelize a transformers model with fused-geglu, without naming its MLP classes.

transformers does not decorate the Gemma MLPs with ``use_kernel_forward_from_hub``,
so ``kernelize`` alone would leave them untouched. The recipe is:

    replace_kernel_forward_from_hub(Gemma3MLP, "GeGLUMLP")
    with use_kernel_mapping({"GeGLUMLP": {"cuda": LayerRepository(...), ...}}):
        kernelize(model, mode=Mode.INFERENCE)

``kernelize_geglu_mlps`` does exactly that for every GeGLU MLP class it finds.

transformers (5.22+) can do it too, from the kernel's ``GeGLUMLPLayout``:
``from_pretrained(..., use_kernels=True, kernel_config=KernelConfig({"Gemma3MLP":
"org/fused-geglu:GeGLUMLP"}))``. When its ``kernelize`` cannot use the layer
(no mapping for the device or mode, a variant that does not load), it keeps
the original forward without a word; ``check_geglu_mlps`` says so.
"""

from __future__ import annotations

import argparse
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Optional
from urllib.parse import urlsplit

import torch.nn as nn

from . import layout
from .errors import (
    UsageError,
    UserError,
    directory_to_read,
    from_hub_error,
    one_line,
    sends_a_token,
    validate_endpoint,
    validate_repo_id,
)

#: The Hub kernel ``kernelize_geglu_mlps`` loads by default: build.toml's ``[general.hub] repo-id``, where the
#: demo publishes it.
DEFAULT_REPO_ID = "org/fused-geglu"
#: The name under which the layer is registered, as in transformers' hub mapping.
LAYER_NAME = "GeGLUMLP"
#: Devices the layer serves; kernels picks the entry matching the model's device.
DEVICE_TYPES = ("cuda", "rocm", "xpu", "cpu")


#: What a module may hold to be taken for a GeGLU MLP, ``down_proj(act_fn(gate_proj(x)) * up_proj(x))``: the
#: members of transformers' Gemma-family MLPs (GeGLUMLP handles Gemma 3n's ``activation_sparsity`` and
#: T5Gemma's ``dropout`` itself). A module with anything more may compute more: FalconH1's multipliers,
#: Inkling's global scale, BitNet's sub-norm, the clamp limits of DeepSeek V4, GLM-5 and Step 3.7. Such a
#: module keeps its own forward whatever its activation, rather than silently losing what it adds. An
#: instance's ``forward`` is allowed: kernelize binds the layer's there, and accelerate's hooks their own.
GEGLU_MLP_SUBMODULES = frozenset({"gate_proj", "up_proj", "down_proj", "act_fn", "dropout"})
#: Where a GeGLU MLP class's forward may come from: transformers (whose MLPs with these members compute
#: ``down_proj(act_fn(gate_proj(x)) * up_proj(x))``), Liger (``LigerGEGLUMLP``), or this kernel's own
#: ``GeGLUMLPLayout`` (the class transformers builds from a KernelConfig, in a build's module of any name). A
#: class with a forward of its own (a subclass that scales the output, say) may compute more, and keeps it.
GEGLU_MLP_FORWARD_PACKAGES = ("transformers.", "liger_kernel.")
GEGLU_MLP_LAYOUT_FORWARD = "GeGLUMLPLayout.forward"
GEGLU_MLP_ATTRIBUTES = frozenset(
    {"config", "hidden_size", "intermediate_size", "activation_sparsity", "training", "forward"}
)


def _is_linear(module) -> bool:
    """An ``nn.Linear``, or one wrapped as PEFT's LoRA layers wrap it (``base_layer``): GeGLUMLP calls those."""
    return isinstance(getattr(module, "base_layer", module), nn.Linear)


def is_geglu_mlp(module: nn.Module) -> bool:
    """A GeGLU MLP: gate_proj, up_proj and down_proj linear layers (LoRA-wrapped ones too), nothing that a
    GeGLU MLP does not hold (``GEGLU_MLP_SUBMODULES``, ``GEGLU_MLP_ATTRIBUTES``; no parameters or buffers of
    its own), and its class's forward from transformers, Liger or the kernel's layout
    (``GEGLU_MLP_FORWARD_PACKAGES``, ``GEGLU_MLP_LAYOUT_FORWARD``)."""
    forward = type(module).forward
    return (
        (
            getattr(forward, "__module__", "").startswith(GEGLU_MLP_FORWARD_PACKAGES)
            or getattr(forward, "__qualname__", None) == GEGLU_MLP_LAYOUT_FORWARD
        )
        and all(_is_linear(getattr(module, name, None)) for name in ("gate_proj", "up_proj", "down_proj"))
        and GEGLU_MLP_SUBMODULES.issuperset(module._modules)
        and not module._parameters
        and not module._buffers
        and GEGLU_MLP_ATTRIBUTES.issuperset(name for name in vars(module) if not name.startswith("_"))
    )


def geglu_mlp_classes(model: nn.Module, activation_gelu_form) -> list[type]:
    """Classes of the model's GeGLU MLPs whose activation the fused layer computes.

    ``activation_gelu_form`` is the kernel's ``layers.activation_gelu_form``,
    the one place that knows which activations are GELUs; MLPs with any other
    activation (SiLU for Llama, say) are left alone. It reads the activation
    alone, whatever the module's mode: what a module adds at some moment (a
    dropout in training) is the layer's to check on each call.
    """
    classes: list[type] = []
    for module in model.modules():
        if type(module) in classes or not is_geglu_mlp(module):
            continue
        try:
            approximate = activation_gelu_form(module)
        except ValueError:
            approximate = None
        if approximate is not None:
            classes.append(type(module))
    return classes


class KernelLoadError(UserError, RuntimeError):
    """The kernel could not be fetched or did not replace the MLPs; the one-line message says why (the command
    line reports it as it is)."""


class NoGeGLUMLPError(ValueError):
    """The model has no GeGLU MLP whose activation the fused layer computes: nothing to kernelize."""


def _fused_forward(module: nn.Module) -> bool:
    """Whether ``module`` runs fused-geglu's ``GeGLUMLP.forward`` (as ``kernelize`` binds it)."""
    function = getattr(module.forward, "__func__", None)
    return (
        getattr(function, "__qualname__", None) == f"{LAYER_NAME}.forward"
        and getattr(function, "__module__", "").rpartition(".")[2] == "layers"
    )


def check_geglu_mlps(model: nn.Module, *, strict: bool = True) -> list[str]:
    """The names of the modules that run ``GeGLUMLP``; KernelLoadError if a mapped one kept its own forward.

    With ``strict=False`` a warning instead of the error. A GeGLU MLP (``is_geglu_mlp``) is mapped when its
    class carries ``kernel_layer_name = "GeGLUMLP"``: the layout class transformers builds from a
    ``KernelConfig``, or a class registered with ``replace_kernel_forward_from_hub``. Call it after
    ``from_pretrained(..., use_kernels=True)`` and after ``model.train()``/``eval()``,
    which kernelize again: transformers falls back to the original forward
    silently (``KernelizeFallback.ALL``).
    """
    _require_module(model)
    mapped = _mapped_mlps(model)
    if not mapped:
        problem = (
            f"no module of {type(model).__name__} is mapped to {LAYER_NAME}: the KernelConfig key must be "
            "the model's MLP class (GemmaMLP, Gemma2MLP or Gemma3MLP)"
        )
    else:
        unfused = [name for name, module in mapped.items() if not _fused_forward(module)]
        if not unfused:
            return list(mapped)
        device = next(model.parameters()).device.type
        mode = "training" if model.training else "inference"
        forward = mapped[unfused[0]].forward
        running = getattr(getattr(forward, "__func__", forward), "__qualname__", type(forward).__name__)
        problem = (
            f"{len(unfused)} of {len(mapped)} modules mapped to {LAYER_NAME} do not run its forward (first: "
            f"{unfused[0]}, which runs {running}): kernelize found no {LAYER_NAME} kernel for device {device!r} in "
            f"{mode} mode, could not load it, or was given another layer, or the model was unpickled (torch.save "
            "keeps no kernelized forward: kernelize again after loading); see README, 'Kernelizing a transformers "
            "model'"
        )
    if strict:
        raise KernelLoadError(problem)
    warnings.warn(problem, stacklevel=2)
    return [name for name, module in mapped.items() if _fused_forward(module)]


def load_local_kernel(build_dir: Path):
    """``kernels.get_local_kernel``, with a directory that holds no variant for this torch, one that does not load,
    or one whose files differ from what its metadata's digest records, reported in one line."""
    from kernels import get_local_kernel

    changed = _digest_mismatch(build_dir)
    if changed is not None:
        raise KernelLoadError(
            f"the build in {build_dir} fails its digest check ({changed}): its files are not the ones built; build "
            f"it again with `python -m geglu_triton build --out {build_dir}`"
        )
    try:
        return get_local_kernel(build_dir)
    except FileNotFoundError as cause:  # kernels' message lists every variant it tried, over many lines
        raise KernelLoadError(
            f"no build variant for this torch in {build_dir} ({one_line(cause).rstrip(':')}): build one with "
            f"`python -m geglu_triton build --out {build_dir}`"
        ) from cause
    except Exception as cause:  # no or corrupt metadata.json; importing the variant runs its code: any error is its
        raise KernelLoadError(
            f"cannot load the build in {build_dir} ({type(cause).__name__}: {one_line(cause)}): "
            f"`python -m geglu_triton check {build_dir}` names what is wrong with it"
        ) from cause


def _digest_mismatch(build_dir: Path) -> str | None:
    """The first digest violation among the build's variants (``check``'s rule), before any is imported.

    kernels never compares a variant's files with its metadata's digest: an
    edited variant would run, and a benchmark would record the identity of
    the build its metadata names. A variant whose metadata cannot be read is
    left to the load, which reports it.
    """
    from kernels._rust import Metadata

    from .check import digest_violations

    for variant in layout.discover_variants(Path(build_dir)):
        try:
            metadata = Metadata.read_from_file(variant / layout.METADATA_FILE)
        except (OSError, ValueError):
            continue
        violations = digest_violations(variant, variant.name, metadata)
        if violations:
            return str(violations[0])
    return None


def load_hub_kernel(repo_id: str, version: int, trust_remote_code: bool):
    """``kernels.get_kernel``, with a failure to fetch reported as one line that names it (before any request,
    TypeError or ValueError for a ``repo_id`` that is not ``<namespace>/<name>``, a ``version`` that is not a
    whole number of 0 or more, a ``trust_remote_code`` that is neither a bool nor a list of repository ids, an
    ``HF_ENDPOINT`` that is not a Hub's URL).

    Without ``trust_remote_code``, get_kernel first asks the Hub whether the
    publisher is trusted; when the Hub cannot be reached it says only that it
    "could not verify publisher trust status". The request is repeated here to
    name the network error instead.
    """
    import httpx2  # huggingface_hub 2.x's HTTP client, whose errors it raises
    from huggingface_hub import HfApi, constants
    from kernels import get_kernel

    if not isinstance(repo_id, str):
        raise TypeError(f"repo_id must be a string, '<namespace>/<name>', got {type(repo_id).__name__}")
    try:
        validate_repo_id(repo_id, option="repo_id")
    except UsageError as error:
        raise ValueError(str(error)) from None
    if isinstance(version, bool) or not isinstance(version, int):
        raise TypeError(f"version must be a whole number (the kernel's major version), got {version!r}")
    if version < 0:  # 0 is one: build.toml (kernels-data) and get_kernel take it, as branch v0
        raise ValueError(
            f"version must be 0 or more (the kernel's major version, its branch v<version>), got {version}"
        )
    trusted_repos = isinstance(trust_remote_code, list) and all(isinstance(item, str) for item in trust_remote_code)
    if not (isinstance(trust_remote_code, bool) or trusted_repos):
        raise TypeError(f"trust_remote_code must be True, False or a list of repository ids, got {trust_remote_code!r}")
    endpoint = constants.ENDPOINT
    try:
        validate_endpoint(endpoint, option="HF_ENDPOINT", token_option="HF_TOKEN")  # huggingface_hub's, read at import
    except UsageError as error:
        raise ValueError(str(error)) from None
    try:
        return get_kernel(repo_id, version=version, trust_remote_code=trust_remote_code)
    except ValueError as error:
        if "could not verify publisher trust status" not in str(error):  # a version it does not have, say
            raise KernelLoadError(f"cannot load {repo_id} version {version}: {one_line(error)}") from None
        org = repo_id.partition("/")[0]
        try:
            HfApi(endpoint=endpoint).get_organization_overview(org)
        except Exception as cause:  # noqa: BLE001 (any failure of the request is what the user must see)
            reason = _fetch_failure(cause, endpoint)
        else:
            reason = "the request succeeded when repeated; try again"
        raise KernelLoadError(
            f"cannot check whether {org!r} is a trusted kernel publisher at {endpoint}: {reason}"
        ) from None
    except (OSError, httpx2.HTTPError) as cause:
        raise KernelLoadError(
            f"cannot fetch {repo_id} version {version} from {endpoint}: {_fetch_failure(cause, endpoint)}"
        ) from None


def _fetch_failure(cause: BaseException, endpoint: str) -> str:
    """A failed request as the toolkit's commands report it: a Hub that answered (no such repository) or a
    request that got no answer, with what to do; any other failure (the cache's file system) as it is."""
    translated = from_hub_error(cause, endpoint=endpoint, token_sent=sends_a_token(), endpoint_source="HF_ENDPOINT")
    if translated is not None:
        return str(translated)
    host = urlsplit(endpoint).hostname or ""
    local = host in ("127.0.0.1", "localhost", "::1")
    hint = "is the local Hub running (python -m geglu_triton hub serve --data DIR)?" if local else "check HF_ENDPOINT"
    return f"{type(cause).__name__}: {one_line(cause)}; {hint}"


@dataclass
class KernelizeReport:
    classes: list[str]
    swapped_modules: list[str]


def _kernel_mapping_disabled() -> bool:
    """Whether kernels' DISABLE_KERNEL_MAPPING is on, parsed as kernels parses it (``bool(int(value))``; kernels
    reads it once, at its import, so a value changed later is not what it acts on)."""
    try:
        return bool(int(os.environ.get("DISABLE_KERNEL_MAPPING", "0")))
    except ValueError:  # set to a non-integer after kernels read it at its import (which refuses one)
        return False


def kernelize_geglu_mlps(
    model: nn.Module,
    *,
    repo_id: Optional[str] = None,
    version: Optional[int] = None,
    local_path: Optional[Path] = None,
    mode=None,
    device: Optional[str] = None,
    trust_remote_code: bool = False,
) -> KernelizeReport:
    """Swap fused-geglu's ``GeGLUMLP`` into every GeGLU MLP of ``model``.

    Args:
        repo_id, version: the Hub kernel to use (``get_kernel(repo_id, version=version)``); by default
            ``DEFAULT_REPO_ID``, version 1.
        local_path: a local build directory to use instead of the Hub (then ``repo_id`` and ``version`` are
            refused: the build is not theirs); refused where its files differ from what its metadata.json
            digests record (edited after the build).
        mode: a ``kernels.Mode``; by default TRAINING when the model is in
            training mode, else INFERENCE.
        device: the device type to kernelize for; by default the model's.
        trust_remote_code: load a kernel whose publisher the Hub does not
            mark as trusted (as ``get_kernel`` takes it).

    Raises, in one line and before anything is fetched, TypeError for a ``mode`` that is not a
    ``kernels.Mode`` and ValueError for a ``repo_id`` that is not ``<namespace>/<name>``, a device the
    kernel has no variant for or this torch cannot run, or a model on the meta device without ``device``;
    KernelLoadError when the kernel cannot be fetched (the Hub cannot be reached, has no such repository
    or version, or ``local_path`` has no variant for this torch) and when kernelize replaced none of the
    GeGLU MLPs found; NoGeGLUMLPError (a ValueError) when the model has none, before anything changes.
    """
    from kernels import (
        LayerRepository,
        LocalLayerRepository,
        Mode,
        kernelize,
        replace_kernel_forward_from_hub,
        use_kernel_mapping,
    )

    _require_module(model)
    if mode is not None and not isinstance(mode, Mode):
        raise TypeError(f"mode must be a kernels.Mode (Mode.INFERENCE, Mode.TRAINING, ...), got {mode!r}")
    if mode is not None and Mode.INFERENCE not in mode and Mode.TRAINING not in mode:
        raise ValueError(f"mode {mode} must contain Mode.INFERENCE or Mode.TRAINING, as kernelize requires")
    device_type = _device_type_to_kernelize(model, device)
    if local_path is not None:
        if repo_id is not None or version is not None:
            raise ValueError(
                "local_path and repo_id/version name two kernels: pass local_path for a local build, or repo_id and "
                "version for a Hub kernel"
            )
        local_path = _build_directory(local_path)
        kernel = load_local_kernel(local_path)
        repository = LocalLayerRepository(repo_path=local_path, layer_name=LAYER_NAME)
        source = str(local_path)
    else:
        repo_id = DEFAULT_REPO_ID if repo_id is None else repo_id
        version = 1 if version is None else version
        kernel = load_hub_kernel(repo_id, version, trust_remote_code)
        repository = LayerRepository(
            repo_id=repo_id, layer_name=LAYER_NAME, version=version, trust_remote_code=trust_remote_code
        )
        source = f"{repo_id} version {version}"
    layers = getattr(kernel, "layers", None)
    if not all(hasattr(layers, name) for name in (LAYER_NAME, "activation_gelu_form")):
        raise KernelLoadError(
            f"the kernel of {source} has no layers.{LAYER_NAME} with layers.activation_gelu_form: it is not a "
            "fused-geglu build"
        )

    classes = geglu_mlp_classes(model, layers.activation_gelu_form)
    if not classes:  # decided on the model alone, before anything changes, whatever earlier calls mapped
        raise NoGeGLUMLPError(
            f"{type(model).__name__} has no GeGLU MLP to kernelize (a module with gate_proj, up_proj and down_proj "
            "whose act_fn is a GELU): nothing was changed"
        )
    for cls in classes:
        replace_kernel_forward_from_hub(cls, LAYER_NAME)

    if mode is None:
        mode = Mode.TRAINING if model.training else Mode.INFERENCE
    mapping = {LAYER_NAME: {device_type: repository for device_type in DEVICE_TYPES}}
    with use_kernel_mapping(mapping, inherit_mapping=False):
        for mlp in _mapped_mlps(model).values():
            _kernelize_alone(kernelize, mlp, mode, device_type)

    layer_forward = getattr(layers, LAYER_NAME).forward
    swapped = [
        name
        for name, module in model.named_modules()
        if getattr(module.forward, "__func__", None) is layer_forward
    ]
    names = [cls.__qualname__ for cls in classes]
    if not swapped and _kernel_mapping_disabled():
        warnings.warn("DISABLE_KERNEL_MAPPING is set: kernelize kept every module's own forward", stacklevel=2)
    elif not swapped:
        raise KernelLoadError(
            f"kernelize replaced none of the model's GeGLU MLPs ({', '.join(names)}) for device {device_type!r} "
            f"in {mode}"
        )
    return KernelizeReport(classes=names, swapped_modules=swapped)


def _build_directory(local_path) -> Path:
    """``local_path`` as a Path to an existing directory (the command line's ``directory_to_read`` rule);
    TypeError or ValueError naming what it is otherwise."""
    if not isinstance(local_path, (str, os.PathLike)):
        raise TypeError(f"local_path must be a path (str or os.PathLike), got {type(local_path).__name__}")
    try:
        return directory_to_read(os.fspath(local_path))
    except argparse.ArgumentTypeError as error:
        raise ValueError(f"local_path: {error}") from None


def _require_module(model) -> None:
    """A TypeError for a ``model`` that is not an ``nn.Module`` (a name, None), before anything reads it."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")


def _mapped_mlps(model: nn.Module) -> dict[str, nn.Module]:
    """The GeGLU MLPs of ``model`` (``is_geglu_mlp``) whose class is mapped to the layer (``kernel_layer_name``,
    which a subclass inherits, whatever its forward computes), by name, each once."""
    return {
        name: module
        for name, module in model.named_modules()
        if getattr(type(module), "kernel_layer_name", None) == LAYER_NAME and is_geglu_mlp(module)
    }


def _kernelize_alone(kernelize, module: nn.Module, mode, device_type: str) -> None:
    """``kernelize(module)`` with only ``module``'s own forward changed.

    kernelize walks every submodule of what it is given, and under a mapping
    that names only this layer it would put each other mapped layer back on
    its original forward (the MLP's activation, say, which transformers' own
    Hub kernels replace) and log, for each, that no kernel is mapped for it:
    one warning per MLP of a Gemma3 model, for a layer nobody asked to change.
    So the whole model is never given to it, and while it runs the module's
    submodules are out of its reach (``_modules``, which ``named_modules``
    walks, emptied and put back).
    """
    state = module.__dict__
    submodules = state["_modules"]
    state["_modules"] = {}
    try:
        kernelize(module, mode=mode, device=device_type)
    finally:
        state["_modules"] = submodules


def _device_type_to_kernelize(model: nn.Module, device) -> str:
    """``device`` (a type or a ``torch.device``), else the type of the model's first parameter, as kernelize
    infers it; ValueError where the kernel has no variant for it, this torch cannot run it, or the model is on
    the meta device (kernelize would map nothing)."""
    import torch

    if isinstance(device, str) and ":" in device:  # "cuda:0": kernelize maps device types, not devices
        try:
            device = torch.device(device)
        except RuntimeError:
            pass  # not a device: named below
    if isinstance(device, torch.device):
        device = device.type
    if device is None:
        parameter = next(model.parameters(), None)
        device = "cpu" if parameter is None else parameter.device.type
        if device == "meta":
            raise ValueError(
                "the model is on the meta device: pass device=, the type it will run on "
                f"({', '.join(DEVICE_TYPES)})"
            )
    if device not in DEVICE_TYPES:
        raise ValueError(f"device {device!r}: the kernel has variants for {', '.join(DEVICE_TYPES)}")
    available = {  # kernels takes "cuda" on ROCm torch too, for the GPU its "cuda" tensors are on
        "cuda": torch.cuda.is_available(),
        "rocm": torch.cuda.is_available() and bool(torch.version.hip),
        "xpu": hasattr(torch, "xpu") and torch.xpu.is_available(),
        "cpu": True,
    }
    if not available[device]:
        raise ValueError(f"device {device!r} is not available to this torch ({torch.__version__})")
    return device

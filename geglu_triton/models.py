"""Kernelize a transformers model with fused-geglu, without naming its MLP classes.

transformers does not decorate the Gemma MLPs with ``use_kernel_forward_from_hub``,
so ``kernelize`` alone would leave them untouched. The recipe is:

    replace_kernel_forward_from_hub(Gemma3MLP, "GeGLUMLP")
    with use_kernel_mapping({"GeGLUMLP": {"cuda": LayerRepository(...), ...}}):
        kernelize(model, mode=Mode.INFERENCE)

``kernelize_geglu_mlps`` does exactly that for every GeGLU MLP class it finds.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import torch.nn as nn

#: The name under which the layer is registered, as in transformers' hub mapping.
LAYER_NAME = "GeGLUMLP"
#: Devices the layer serves; kernels picks the entry matching the model's device.
DEVICE_TYPES = ("cuda", "rocm", "xpu", "cpu")


def is_geglu_mlp(module: nn.Module) -> bool:
    """A module shaped like a GeGLU MLP: gate_proj, up_proj and down_proj linear layers."""
    return all(isinstance(getattr(module, name, None), nn.Linear) for name in ("gate_proj", "up_proj", "down_proj"))


def geglu_mlp_classes(model: nn.Module, gelu_approximation) -> list[type]:
    """Classes of the model's GeGLU MLPs whose activation the fused layer computes.

    ``gelu_approximation`` is the kernel's ``layers.gelu_approximation``, the
    one place that knows which activations are GELUs; MLPs with any other
    activation (SiLU for Llama, say) are left alone.
    """
    classes: list[type] = []
    for module in model.modules():
        if type(module) in classes or not is_geglu_mlp(module):
            continue
        try:
            approximate = gelu_approximation(module)
        except ValueError:
            approximate = None
        if approximate is not None:
            classes.append(type(module))
    return classes


@dataclass
class KernelizeReport:
    classes: list[str]
    swapped_modules: list[str]


def kernelize_geglu_mlps(
    model: nn.Module,
    *,
    repo_id: str = "org/fused-geglu",
    version: int = 1,
    local_path: Optional[Path] = None,
    mode=None,
    device: Optional[str] = None,
    trust_remote_code: bool = False,
) -> KernelizeReport:
    """Swap fused-geglu's ``GeGLUMLP`` into every GeGLU MLP of ``model``.

    Args:
        repo_id, version: the Hub kernel to use (``get_kernel(repo_id, version=version)``).
        local_path: a local build directory to use instead of the Hub.
        mode: a ``kernels.Mode``; by default TRAINING when the model is in
            training mode, else INFERENCE.
        device: the device type to kernelize for; by default the model's.
    """
    from kernels import (
        LayerRepository,
        LocalLayerRepository,
        Mode,
        get_kernel,
        get_local_kernel,
        kernelize,
        replace_kernel_forward_from_hub,
        use_kernel_mapping,
    )

    if local_path is not None:
        kernel = get_local_kernel(Path(local_path))
        repository = LocalLayerRepository(repo_path=Path(local_path), layer_name=LAYER_NAME)
    else:
        kernel = get_kernel(repo_id, version=version, trust_remote_code=trust_remote_code)
        repository = LayerRepository(
            repo_id=repo_id, layer_name=LAYER_NAME, version=version, trust_remote_code=trust_remote_code
        )

    classes = geglu_mlp_classes(model, kernel.layers.gelu_approximation)
    for cls in classes:
        replace_kernel_forward_from_hub(cls, LAYER_NAME)

    if mode is None:
        mode = Mode.TRAINING if model.training else Mode.INFERENCE
    mapping = {LAYER_NAME: {device_type: repository for device_type in DEVICE_TYPES}}
    with use_kernel_mapping(mapping, inherit_mapping=False):
        kernelize(model, mode=mode, device=device)

    layer_forward = kernel.layers.GeGLUMLP.forward
    swapped = [
        name
        for name, module in model.named_modules()
        if getattr(module.forward, "__func__", None) is layer_forward
    ]
    return KernelizeReport(classes=[cls.__qualname__ for cls in classes], swapped_modules=swapped)

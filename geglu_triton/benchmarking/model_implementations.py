"""The MLP forwards a whole model is measured with, switched on the same model and weights.

  eager    transformers' ``Gemma3MLP.forward``, as the model was built;
  ours     the kernel's ``GeGLUMLP`` swapped in by ``kernels.kernelize``, through
           ``geglu_triton.models.kernelize_geglu_mlps`` on the loaded build, as users do;
  liger    Liger's ``LigerGEGLUMLP`` forward on the same projections;
  compile  ``torch.compile`` (``dynamic=False``) of the MLP's function of its input and
           three weights: one compiled graph per input shape serves every layer.

``ModelForwards`` records each implementation's forward of every MLP once,
then ``use(name)`` installs them (an instance attribute ``forward``, which is
what ``kernelize`` sets); eager removes the attribute again. So the
implementations take turns on one model, and toggling costs nothing on the
GPU. An implementation that cannot run is recorded with the reason.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..models import is_geglu_mlp, kernelize_geglu_mlps
from . import implementations
from .implementations import COMPILE, EAGER, LIGER, OURS, Unavailable
from .workloads import failure_text

#: The implementations of a model-level run, in the order they take turns.
MODEL_IMPLEMENTATIONS = (EAGER, OURS, LIGER, COMPILE)
LABELS = {
    EAGER: "eager",
    OURS: "ours (kernelized)",
    LIGER: "Liger LigerGEGLUMLP",
    COMPILE: "torch.compile (MLP)",
}


def geglu_mlps(model: nn.Module) -> list[nn.Module]:
    return [module for module in model.modules() if is_geglu_mlp(module)]


def _eager(forwards: "ModelForwards") -> list:
    return [None] * len(forwards.mlps)  # None: the class's own forward


def _ours(forwards: "ModelForwards") -> list:
    from kernels import Mode

    mode = Mode.TRAINING if forwards.training else Mode.INFERENCE
    report = kernelize_geglu_mlps(
        forwards.model, local_path=forwards.kernel_dir, mode=mode, device=forwards.device.type
    )
    swapped = [module.__dict__.get("forward") for module in forwards.mlps]
    if len(report.swapped_modules) != len(forwards.mlps) or None in swapped:
        raise RuntimeError(
            f"kernelize swapped {len(report.swapped_modules)} of the model's {len(forwards.mlps)} GeGLU MLPs"
        )
    return swapped


def _liger(forwards: "ModelForwards") -> list:
    device = forwards.device
    liger = [implementations.mlp(LIGER, module, forwards.approximate, None, device) for module in forwards.mlps]
    forwards.keep_alive.extend(liger)
    return [module.forward for module in liger]


def _compiled(forwards: "ModelForwards") -> list:
    approximate = forwards.approximate

    def geglu_mlp(x, gate_weight, up_weight, down_weight):
        return F.linear(F.gelu(F.linear(x, gate_weight), approximate=approximate) * F.linear(x, up_weight), down_weight)

    compiled = implementations.fresh_compile(geglu_mlp, forwards.device)

    def bound(module: nn.Module) -> Callable:
        return lambda x: compiled(x, module.gate_proj.weight, module.up_proj.weight, module.down_proj.weight)

    return [bound(module) for module in forwards.mlps]


#: How each implementation's forwards are made (a test may add a deliberately wrong one).
BUILDERS: dict[str, Callable[["ModelForwards"], list]] = {
    EAGER: _eager,
    OURS: _ours,
    LIGER: _liger,
    COMPILE: _compiled,
}


class ModelForwards:
    """Every implementation's MLP forwards for one model; ``use(name)`` switches the model to one of them."""

    def __init__(
        self,
        model: nn.Module,
        names: tuple[str, ...],
        *,
        kernel_dir: Path,
        approximate: str,
        device: torch.device,
        training: bool,
    ) -> None:
        self.model = model
        self.mlps = geglu_mlps(model)
        self.kernel_dir = kernel_dir
        self.approximate = approximate
        self.device = device
        self.training = training
        self.keep_alive: list = []
        self.forwards: dict[str, list] = {}
        #: Per implementation: {"status": "ok"} or {"status": "skipped"/"failed", "reason": ...}.
        self.status: dict[str, dict] = {}
        for name in names:
            try:
                self.forwards[name] = BUILDERS[name](self)
                self.status[name] = {"status": "ok"}
            except Unavailable as why:
                self.status[name] = {"status": "skipped", "reason": str(why)}
            except Exception as err:
                self.status[name] = {"status": "failed", "reason": failure_text(err)}
            self._install(_eager(self))  # kernelize installs its forwards: undo until asked

    @property
    def available(self) -> tuple[str, ...]:
        return tuple(self.forwards)

    def _install(self, forwards: list) -> None:
        for module, forward in zip(self.mlps, forwards):
            if forward is None:
                module.__dict__.pop("forward", None)
            else:
                module.forward = forward

    def use(self, name: str) -> None:
        self._install(self.forwards[name])

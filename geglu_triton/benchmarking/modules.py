"""The GeGLU MLP in the forms the benchmark and the profile compare.

``GemmaStyleMLP`` is transformers' ``GemmaMLP`` reduced to what it computes,
with the same attribute names (``gate_proj``, ``up_proj``, ``down_proj``,
``act_fn``), so the kernel's ``layers.GeGLUMLP.forward`` runs on it exactly as
``kernelize`` would run it on a Gemma model. The Liger form shares its weights.
"""

from __future__ import annotations

import types
from typing import Callable

import torch
import torch.nn as nn


class GemmaStyleMLP(nn.Module):
    """``down_proj(act_fn(gate_proj(x)) * up_proj(x))`` with ``act_fn = GELU(approximate)``.

    Gemma's projections have no bias; ``bias=True`` gives the variant the
    profile uses to show where a bias add goes.
    """

    def __init__(
        self,
        hidden: int,
        intermediate: int,
        *,
        approximate: str = "tanh",
        bias: bool = False,
        device: torch.device | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        factory = {"bias": bias, "device": device, "dtype": dtype}
        self.gate_proj = nn.Linear(hidden, intermediate, **factory)
        self.up_proj = nn.Linear(hidden, intermediate, **factory)
        self.down_proj = nn.Linear(intermediate, hidden, **factory)
        self.act_fn = nn.GELU(approximate=approximate)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


def fused_forward(module: nn.Module, kernel) -> Callable[[torch.Tensor], torch.Tensor]:
    """The kernel's ``layers.GeGLUMLP.forward`` bound to ``module``, as ``kernelize`` binds it."""
    return types.MethodType(kernel.layers.GeGLUMLP.forward, module)


def liger_mlp(module: GemmaStyleMLP) -> nn.Module:
    """Liger's ``LigerGEGLUMLP`` sharing ``module``'s projections (raises ImportError without Liger).

    Liger computes the tanh GELU only; callers skip it for the exact form.
    """
    from liger_kernel.transformers.geglu import LigerGEGLUMLP

    config = types.SimpleNamespace(
        hidden_size=module.gate_proj.in_features,
        intermediate_size=module.gate_proj.out_features,
        hidden_act="gelu_pytorch_tanh",
        hidden_activation="gelu_pytorch_tanh",
    )
    with torch.device("meta"):  # its own projections are replaced at once: never allocate them
        liger = LigerGEGLUMLP(config)
    # Share the weights (and device and dtype): same numbers, no second copy in memory.
    liger.gate_proj, liger.up_proj, liger.down_proj = module.gate_proj, module.up_proj, module.down_proj
    return liger

"""The same functions in plain PyTorch, for CPU tensors when Triton's interpreter is off.

This is what lets ``kernelize`` run a model on the CPU (and the torch-cpu
variant import without triton). Both directions are the very ops eager
PyTorch runs for ``F.gelu(gate) * up`` and its autograd (MulBackward, then
GeluBackward), so they round where eager rounds, as the Triton kernels do
(triton_kernels.py, "Rounding points").
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F


def forward_into(gate: torch.Tensor, up: torch.Tensor, out: torch.Tensor, approximate: str) -> None:
    torch.mul(F.gelu(gate, approximate=approximate), up, out=out)


def backward_into(
    grad_out: torch.Tensor,
    gate: torch.Tensor,
    up: torch.Tensor,
    grad_gate: torch.Tensor,
    grad_up: torch.Tensor,
    approximate: str,
    out: Optional[torch.Tensor] = None,
) -> None:
    """Both gradients, and with ``out`` the forward's result again (from the same rounded GELU)."""
    activated = F.gelu(gate, approximate=approximate)
    torch.mul(grad_out, activated, out=grad_up)
    grad_gate.copy_(torch.ops.aten.gelu_backward(grad_out * up, gate, approximate=approximate))
    if out is not None:
        torch.mul(activated, up, out=out)

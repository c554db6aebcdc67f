"""The same functions in plain PyTorch, for CPU tensors when Triton's interpreter is off.

This is what lets ``kernelize`` run a model on the CPU (and the torch-cpu
variant import without triton). The forward is eager PyTorch's own
``F.gelu(gate) * up``, so it has eager's rounding points exactly; the
backward keeps fp32 until the final write, like the Triton kernel.
"""

from __future__ import annotations

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
) -> None:
    gate32, up32, grad32 = gate.float(), up.float(), grad_out.float()
    grad_up.copy_(grad32 * F.gelu(gate32, approximate=approximate))
    grad_gate.copy_(torch.ops.aten.gelu_backward(grad32 * up32, gate32, approximate=approximate))

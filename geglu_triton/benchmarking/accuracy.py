"""Float64 references and the tolerances a benchmarked result must meet.

A fast wrong kernel is not a result: every implementation's output in every
cell is compared with a float64 reference computed from the same inputs, by
``||out - ref|| / ||ref||``, and flagged when over its dtype's tolerance.

Tolerances (relative error against float64, per tensor):

- activation forward: two roundings to the storage dtype (GELU, then the
  product, as eager does): a few units of the dtype's unit roundoff;
- activation backward: up to three roundings (eager autograd's);
- MLP: two bf16/fp16 GEMM outputs and the activation, rounded, then a third
  GEMM; gradients go through the same chain backwards.
"""

from __future__ import annotations

import math

import torch

from .grid import dtype_name

FORWARD_REL_TOL = {torch.float32: 1e-6, torch.float16: 1e-3, torch.bfloat16: 8e-3}
BACKWARD_REL_TOL = {torch.float32: 2e-6, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}
MLP_REL_TOL = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 3e-2}
#: Whole models (``bench --models``), against the eager model's own result in the same dtype, not float64:
#: each layer's MLP rounds where its implementation rounds, and the residual stream carries the
#: difference through every later layer, so logits and gradients differ by more than one MLP's output.
MODEL_LOGITS_REL_TOL = {torch.float32: 1e-4, torch.float16: 2e-2, torch.bfloat16: 5e-2}
MODEL_GRADIENT_REL_TOL = {torch.float32: 1e-3, torch.float16: 5e-2, torch.bfloat16: 1e-1}

#: Elements per chunk of a float64 comparison (1 GiB of float64), so that the
#: largest cells are checked in full without a float64 copy of whole tensors.
CHUNK_ELEMENTS = 2**27


def gelu64(x: torch.Tensor, approximate: str) -> torch.Tensor:
    """gelu in float64, from its definition (not through torch's gelu, the thing being compared)."""
    x = x.double()
    if approximate == "tanh":
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def gelu64_derivative(x: torch.Tensor, approximate: str) -> torch.Tensor:
    """d gelu / dx in float64, from the definitions."""
    x = x.double()
    if approximate == "tanh":
        k = math.sqrt(2.0 / math.pi)
        tanh_z = torch.tanh(k * (x + 0.044715 * x**3))
        return 0.5 * (1.0 + tanh_z) + 0.5 * x * (1.0 - tanh_z**2) * k * (1.0 + 3 * 0.044715 * x**2)
    cdf = 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0)))
    pdf = torch.exp(-0.5 * x**2) / math.sqrt(2.0 * math.pi)
    return cdf + x * pdf


class ErrorAccumulator:
    """``||actual - expected|| / ||expected||`` summed over chunks; NaN or Inf in ``actual`` gives NaN."""

    def __init__(self) -> None:
        self._error_sq = 0.0
        self._norm_sq = 0.0
        self._finite = True

    def add(self, actual: torch.Tensor, expected: torch.Tensor) -> None:
        actual = actual.detach().double()
        self._finite = self._finite and bool(torch.isfinite(actual).all())
        self._error_sq += float(((actual - expected) ** 2).sum())
        self._norm_sq += float((expected**2).sum())

    def value(self) -> float:
        if not self._finite:
            return math.nan
        return math.sqrt(self._error_sq) / (math.sqrt(self._norm_sq) if self._norm_sq > 0 else 1.0)


def rel_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    accumulator = ErrorAccumulator()
    accumulator.add(actual, expected.double())
    return accumulator.value()


def _row_chunks(rows: int, cols: int):
    step = max(1, CHUNK_ELEMENTS // max(cols, 1))
    for start in range(0, rows, step):
        yield slice(start, min(rows, start + step))


def activation_errors(
    gate: torch.Tensor,
    up: torch.Tensor,
    approximate: str,
    out: torch.Tensor,
    grad_out: torch.Tensor | None = None,
    grad_gate: torch.Tensor | None = None,
    grad_up: torch.Tensor | None = None,
) -> dict[str, float]:
    """Relative errors of ``out`` (and, given ``grad_out``, both gradients) of gelu(gate) * up.

    The float64 reference is computed chunk by chunk of rows, on the tensors' device.
    """
    names = ["out"] + (["grad_gate", "grad_up"] if grad_out is not None else [])
    accumulators = {name: ErrorAccumulator() for name in names}
    gate2, up2, out2 = (t.reshape(-1, t.shape[-1]) for t in (gate, up, out))
    for rows in _row_chunks(*gate2.shape):
        g64, u64 = gate2[rows].double(), up2[rows].double()
        activated = gelu64(g64, approximate)
        accumulators["out"].add(out2[rows], activated * u64)
        if grad_out is not None:
            d64 = grad_out.reshape(gate2.shape)[rows].double()
            accumulators["grad_up"].add(grad_up.reshape(gate2.shape)[rows], d64 * activated)
            del activated
            accumulators["grad_gate"].add(
                grad_gate.reshape(gate2.shape)[rows], d64 * u64 * gelu64_derivative(g64, approximate)
            )
    return {name: accumulator.value() for name, accumulator in accumulators.items()}


def within_tolerance(errors: dict[str, float], tolerances: dict[str, float]) -> bool:
    """Every error finite and at most its tolerance (NaN never passes)."""
    return all(errors[name] <= tolerances[name] for name in errors)


def activation_tolerances(dtype: torch.dtype) -> dict[str, float]:
    return {"out": FORWARD_REL_TOL[dtype], "grad_gate": BACKWARD_REL_TOL[dtype], "grad_up": BACKWARD_REL_TOL[dtype]}


def as_json() -> dict:
    """The tolerances, for the results file."""
    return {
        "metric": "||out - ref|| / ||ref|| against float64, per output tensor; NaN or Inf never passes",
        "activation_forward": {dtype_name(d): t for d, t in FORWARD_REL_TOL.items()},
        "activation_backward": {dtype_name(d): t for d, t in BACKWARD_REL_TOL.items()},
        "mlp": {dtype_name(d): t for d, t in MLP_REL_TOL.items()},
    }


def model_tolerances_as_json(dtype: torch.dtype) -> dict:
    """The model-level tolerances of ``dtype``, for the results file of ``bench --models``."""
    return {
        "metric": "||x - eager|| / ||eager|| against the eager model's result in the same dtype; NaN never passes",
        "logits": MODEL_LOGITS_REL_TOL[dtype],
        "gradients": MODEL_GRADIENT_REL_TOL[dtype],
        "greedy_tokens": "identical to eager's (bf16 rounding may flip a near-tie: reported, with its position)",
    }


def mlp_reference(
    x: torch.Tensor,
    weights: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    approximate: str,
    grad_out: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """The GeGLU MLP in float64: ``out`` and, given ``grad_out``, the gradients of x and of each weight.

    ``weights`` are (gate_proj, up_proj, down_proj) weights as nn.Linear holds them (no bias).
    """
    backward = grad_out is not None
    x64 = x.detach().double().requires_grad_(backward)
    gate_w, up_w, down_w = (w.detach().double().requires_grad_(backward) for w in weights)
    out = (gelu64(x64 @ gate_w.T, approximate) * (x64 @ up_w.T)) @ down_w.T
    reference = {"out": out.detach()}
    if backward:
        grads = torch.autograd.grad(out, (x64, gate_w, up_w, down_w), grad_out.double())
        reference.update(zip(("grad_x", "grad_gate_proj", "grad_up_proj", "grad_down_proj"), grads))
    return reference

"""Input validation: the one place that says which inputs the kernels accept.

Every public function checks its arguments here before anything is launched,
so a bad input fails with a message that names the problem instead of a
Triton error or, worse, a silently wrong result.
"""

from __future__ import annotations

import torch
import torch.autograd.forward_ad as forward_ad

#: Tensor types whose data the kernels may read as a plain matrix (not a subclass: FakeTensor, DTensor, ...).
PLAIN_TENSOR_TYPES = (torch.Tensor, torch.nn.Parameter)

#: Storage dtypes the kernels load and store (math is always fp32).
SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)

#: The GELU forms, named as in torch.nn.functional.gelu.
APPROXIMATIONS = ("none", "tanh")


def _same_device(a: torch.Tensor, b: torch.Tensor) -> bool:
    """``a.device == b.device``, without building two torch.device objects for GPU tensors (a microsecond each)."""
    if a.is_cuda and b.is_cuda:
        return a.get_device() == b.get_device()
    return a.device == b.device


class UnsupportedTransform(NotImplementedError):
    """A call under forward-mode AD, a torch.func transform or torch.jit.trace, which the kernels do not support."""


_functorch_transforms_active = torch._C._are_functorch_transforms_active
#: ``torch.jit.is_tracing()`` outside TorchScript, without its two Python calls (0.1 us of the check's 0.3).
_jit_tracing = torch._C._is_tracing


def unsupported_transform_active() -> bool:
    """Whether this call runs under forward-mode AD, a torch.func transform or ``torch.jit.trace``
    (``check_no_unsupported_transform``)."""
    return forward_ad._current_level >= 0 or _functorch_transforms_active() or _jit_tracing()


#: Whether a tensor is one of the batched tensors of torch's own vmap, under which autograd runs a backward for
#: ``is_grads_batched=True`` (and ``jacobian(vectorize=True)``); functorch's flag above does not show it. A torch
#: internal, as those above: tests/test_training.py fails if it stops meaning this.
_legacy_batched = torch._C._functorch.is_legacy_batchedtensor


def batched_backward(grad_outputs) -> bool:
    """Whether a backward runs batched: under a torch.func transform, or on gradients batched by torch's own vmap
    (``_legacy_batched``; None skipped). Not forward-mode AD's level or the tracer's flag: a first-order backward
    run inside ``forward_ad.dual_level`` computes what it computes outside it."""
    return _functorch_transforms_active() or any(g is not None and _legacy_batched(g) for g in grad_outputs)


def check_no_unsupported_transform() -> None:
    """Refuse, by name, a call under forward-mode AD (inside ``forward_ad.dual_level``), a torch.func transform
    (vmap, grad, jvp, ...) or ``torch.jit.trace``.

    The kernels read plain tensors' memory: a dual tensor's tangent would be
    dropped (a silently wrong jvp), vmap's batched tensors have no memory to
    read, and the tracer cannot record a Triton launch; the registered ops
    have no forward-AD or vmap rules either. The three flags are torch
    internals that torch reads itself: on every ``autograd.Function.apply``
    (functorch), in ``make_dual`` (forward AD) and in ``torch.jit.is_tracing``;
    tests/test_training.py fails if any stops meaning this. Only eager calls
    ask (``functional._needs_registered_op`` returns first under
    torch.compile, whose graph the tracing flag would break).
    """
    if unsupported_transform_active():
        raise UnsupportedTransform(
            "fused-geglu's functions do not support forward-mode AD, torch.func transforms (vmap, grad, jvp, "
            "jacrev, ...) or torch.jit.trace: use eager PyTorch inside them (a kernelized GeGLU MLP does so by itself)"
        )


def check_approximate(approximate: str) -> None:
    if approximate not in APPROXIMATIONS:
        raise ValueError(f"approximate must be one of {APPROXIMATIONS} (as in torch.nn.functional.gelu), got {approximate!r}")


def _check_tensor(name: str, tensor) -> None:
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
    if tensor.layout is not torch.strided or tensor.is_nested:  # sparse, MKL-DNN, nested: no rows to read
        layout = "nested" if tensor.is_nested else str(tensor.layout).removeprefix("torch.").lstrip("_")
        raise TypeError(f"{name} is a {layout} tensor; GeGLU takes dense (strided) tensors")
    if tensor.dtype not in SUPPORTED_DTYPES:
        supported = ", ".join(str(d) for d in SUPPORTED_DTYPES)
        raise TypeError(f"{name} has dtype {tensor.dtype}; GeGLU supports floating dtypes {supported}")


def check_gate_up(gate: torch.Tensor, up: torch.Tensor, approximate: str) -> None:
    """gate and up: same shape, dtype and device, of a supported dtype."""
    _check_tensor("gate", gate)
    _check_tensor("up", up)
    check_approximate(approximate)
    if gate.shape != up.shape:
        raise ValueError(f"gate and up must have the same shape, got {tuple(gate.shape)} and {tuple(up.shape)}")
    if gate.dtype != up.dtype:
        raise TypeError(f"gate and up must have the same dtype, got {gate.dtype} and {up.dtype}")
    if not _same_device(gate, up):
        raise ValueError(f"gate and up must be on the same device, got {gate.device} and {up.device}")


def check_concat(x: torch.Tensor, approximate: str) -> None:
    """x = [gate | up] along the last dimension, which must therefore be even."""
    _check_tensor("x", x)
    check_approximate(approximate)
    if x.dim() == 0:
        raise ValueError("x must have at least one dimension: its last dimension holds [gate | up]")
    if x.shape[-1] % 2 != 0:
        raise ValueError(
            f"the last dimension of x holds [gate | up] and must be even, got x of shape {tuple(x.shape)}"
        )


def _check_projection_input(x, approximate: str) -> None:
    """The input of a function with projections: a tensor of a supported dtype, with a last dimension."""
    _check_tensor("x", x)
    check_approximate(approximate)
    if x.dim() == 0:
        raise ValueError("x must have at least one dimension: its last dimension is the projections' input")


def _check_weight_layout(name: str, weight, rows: str, cols: str, input_name: str, input) -> None:
    """A projection weight in nn.Linear's layout: 2-D [rows, the input's last dimension], of a supported dtype."""
    _check_tensor(name, weight)
    if weight.dim() != 2 or weight.shape[1] != input.shape[-1]:
        raise ValueError(
            f"{name} must be [{rows}, {input.shape[-1]}] (nn.Linear's layout, {cols} = {input_name}'s last "
            f"dimension), got {tuple(weight.shape)}"
        )


def _check_matches_input(name: str, tensor, input_name: str, input) -> None:
    """A projection's weight or bias has its input's dtype and device."""
    if tensor.dtype != input.dtype:
        raise TypeError(f"{name} must have {input_name}'s dtype {input.dtype}, got {tensor.dtype}")
    if not _same_device(tensor, input):
        raise ValueError(f"{name} must be on {input_name}'s device {input.device}, got {tensor.device}")


def _check_bias(name: str, bias, shape, input_name: str, input) -> None:
    """A projection's bias, None skipped: a supported dtype, ``shape``, the input's dtype and device."""
    if bias is None:
        return
    _check_tensor(name, bias)
    if bias.shape != shape:
        raise ValueError(f"{name} must have shape ({shape[0]},), got {tuple(bias.shape)}")
    _check_matches_input(name, bias, input_name, input)


def _projections_are_well_formed(x, gate_weight, up_weight, approximate: str) -> bool:
    """``check_linear``'s rules for the common call (no biases), tested in one expression.

    The layers call the checks on every forward, where each rule tested on
    its own costs the host a few tenths of a microsecond; this answers True
    only where every rule holds, and False for anything else, bad input
    included, so that the rules one by one then find the problem and name it.
    """
    if not (isinstance(x, torch.Tensor) and isinstance(gate_weight, torch.Tensor) and isinstance(up_weight, torch.Tensor)):
        return False
    dtype, device, strided = x.dtype, x.device, torch.strided
    try:
        weight_shape = gate_weight.shape
        return (
            dtype in SUPPORTED_DTYPES
            and x.layout is strided  # not sparse, MKL-DNN or a jagged nested tensor (_check_tensor names them)
            and gate_weight.layout is strided
            and up_weight.layout is strided
            and approximate in APPROXIMATIONS
            and x.dim() > 0
            and len(weight_shape) == 2
            and x.shape[-1] == weight_shape[1]
            and up_weight.shape == weight_shape
            and gate_weight.dtype == dtype
            and up_weight.dtype == dtype
            and gate_weight.device == device
            and up_weight.device == device
        )
    except RuntimeError:  # a nested tensor of the strided layout has no .shape (cheaper than three is_nested tests)
        return False


def check_linear(x, gate_weight, up_weight, gate_bias, up_bias, approximate: str) -> None:
    """x [..., hidden]; weights [intermediate, hidden] as nn.Linear holds them; biases [intermediate] or None.

    Every tensor has x's dtype and device.
    """
    if gate_bias is None and up_bias is None and _projections_are_well_formed(x, gate_weight, up_weight, approximate):
        return
    _check_projection_input(x, approximate)
    _check_weight_layout("gate_weight", gate_weight, "intermediate", "hidden", "x", x)
    _check_tensor("up_weight", up_weight)
    if up_weight.shape != gate_weight.shape:
        raise ValueError(
            f"up_weight must have gate_weight's shape {tuple(gate_weight.shape)}, got {tuple(up_weight.shape)}"
        )
    _check_matches_input("gate_weight", gate_weight, "x", x)
    _check_matches_input("up_weight", up_weight, "x", x)
    bias_shape = gate_weight.shape[:1]
    _check_bias("gate_bias", gate_bias, bias_shape, "x", x)
    _check_bias("up_bias", up_bias, bias_shape, "x", x)


def mlp_is_well_formed(x, gate_weight, up_weight, down_weight, approximate: str) -> bool:
    """``check_mlp``'s rules for the common call (no biases), tested as ``_projections_are_well_formed`` tests
    ``check_linear``'s: True only where every rule holds."""
    if not (_projections_are_well_formed(x, gate_weight, up_weight, approximate) and isinstance(down_weight, torch.Tensor)):
        return False
    try:
        return (
            down_weight.layout is torch.strided
            and down_weight.dim() == 2
            and down_weight.shape[1] == gate_weight.shape[0]
            and down_weight.dtype == x.dtype
            and down_weight.device == x.device
        )
    except RuntimeError:  # a nested tensor of the strided layout has no .shape
        return False


def check_mlp(x, gate_weight, up_weight, down_weight, gate_bias, up_bias, down_bias, approximate: str) -> None:
    """``check_linear``'s operands, and down_proj's: weight [out, intermediate] (nn.Linear's layout), bias [out] or None.

    Every tensor has x's dtype and device.
    """
    if gate_bias is None and up_bias is None and down_bias is None and mlp_is_well_formed(
        x, gate_weight, up_weight, down_weight, approximate
    ):
        return
    check_linear(x, gate_weight, up_weight, gate_bias, up_bias, approximate)
    _check_tensor("down_weight", down_weight)
    if down_weight.dim() != 2 or down_weight.shape[1] != gate_weight.shape[0]:
        raise ValueError(
            f"down_weight must be [hidden, {gate_weight.shape[0]}] (nn.Linear's layout, its input = gate_weight's "
            f"{gate_weight.shape[0]} rows), got {tuple(down_weight.shape)}"
        )
    _check_matches_input("down_weight", down_weight, "x", x)
    _check_bias("down_bias", down_bias, down_weight.shape[:1], "x", x)


def check_linear_concat(x, gate_up_weight, gate_up_bias, approximate: str) -> None:
    """x [..., hidden]; a fused gate_up_proj: weight [2 * intermediate, hidden] with [gate | up] rows, bias
    [2 * intermediate] or None; x's dtype and device. The halves then pass ``check_linear``.
    """
    _check_projection_input(x, approximate)
    _check_weight_layout("gate_up_weight", gate_up_weight, "2 * intermediate", "hidden", "x", x)
    if gate_up_weight.shape[0] % 2:
        raise ValueError(
            f"gate_up_weight holds [gate | up] rows and needs an even number of them, got {tuple(gate_up_weight.shape)}"
        )
    _check_matches_input("gate_up_weight", gate_up_weight, "x", x)
    _check_bias("gate_up_bias", gate_up_bias, gate_up_weight.shape[:1], "x", x)


def check_down_proj(gate, up, down_weight, down_bias, approximate: str) -> None:
    """gate and up as ``check_gate_up``; down_weight [hidden, intermediate] (nn.Linear's layout), bias [hidden] or None."""
    check_gate_up(gate, up, approximate)
    if gate.dim() == 0:
        raise ValueError("gate must have at least one dimension: its last dimension is down_proj's input")
    _check_weight_layout("down_weight", down_weight, "hidden", "intermediate", "gate", gate)
    _check_matches_input("down_weight", down_weight, "gate", gate)
    _check_bias("down_bias", down_bias, down_weight.shape[:1], "gate", gate)


# The output shapes are tuples, not torch.Size: ``new_empty`` given a torch.Size (as ``x.shape[:-1] + (n,)``
# builds) costs the host about 0.6 us more than given a tuple (H100 and CPU machines, v33), twice per decode
# MLP call.


def concat_output_shape(x: torch.Tensor) -> tuple[int, ...]:
    """The shape of ``geglu_concat(x)``: x's, with its last dimension halved."""
    return (*x.shape[:-1], x.shape[-1] // 2)


def linear_output_shape(x: torch.Tensor, weight: torch.Tensor) -> tuple[int, ...]:
    """The shape of ``F.linear(x, weight)``: x's leading dimensions, then the weight's rows."""
    return (*x.shape[:-1], weight.shape[0])


def check_out(out: torch.Tensor, expected_shape: tuple[int, ...], like: torch.Tensor) -> None:
    """An ``out`` argument must match the result exactly (shape, dtype, device), each element its own memory."""
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"out must be a torch.Tensor, got {type(out).__name__}")
    if out.shape != expected_shape:
        raise ValueError(f"out must have shape {tuple(expected_shape)}, got {tuple(out.shape)}")
    if out.dtype != like.dtype:
        raise TypeError(f"out must have the input's dtype {like.dtype}, got {out.dtype}")
    if not _same_device(out, like):
        raise ValueError(f"out must be on the input's device {like.device}, got {out.device}")
    for dim, (size, stride) in enumerate(zip(out.shape, out.stride())):
        if stride == 0 and size > 1:
            raise ValueError(
                f"out has stride 0 in dimension {dim} (an expanded tensor): its elements share memory and cannot "
                "each be written; pass a tensor with its own memory per element"
            )

"""Layers that ``kernels.kernelize`` swaps into a model.

``kernelize`` replaces a module's ``forward`` with the ``forward`` of these
classes, so they hold no state: no ``__init__``, no helper methods, no class
attributes besides ``has_backward`` and ``can_torch_compile``, and a
``forward`` with the same parameters as the one it replaces. Everything they
need they read from the module they run on (``self``).
"""

from __future__ import annotations

import warnings
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from .checks import PLAIN_TENSOR_TYPES, SUPPORTED_DTYPES, UnsupportedTransform, unsupported_transform_active
from .functional import geglu, geglu_concat, geglu_down_proj, geglu_linear, geglu_mlp

# transformers (5.22+) finds the module it builds in place of a mapped Gemma MLP
# as ``<layer>Layout`` next to the layer: see layouts.py.
from .layouts import GeGLUMLPLayout  # noqa: F401

# The GELU each activation computes: "tanh" or "none" (exact erf). The tanh
# forms of transformers (GELUTanh, NewGELU, FastGELU, AccurateGELU) are the
# same function, written with different roundings.
_GELU_OF_ACTIVATION_CLASS = {
    "GELUTanh": "tanh",
    "PytorchGELUTanh": "tanh",
    "NewGELUActivation": "tanh",
    "FastGELUActivation": "tanh",
    "AccurateGELUActivation": "tanh",
    "GELUActivation": "none",
}
_GELU_OF_ACTIVATION_NAME = {
    "gelu_pytorch_tanh": "tanh",
    "gelu_python_tanh": "tanh",
    "gelu_new": "tanh",
    "gelu_fast": "tanh",
    "gelu_accurate": "tanh",
    "gelu": "none",
    "gelu_python": "none",
}


def _submodule(module: nn.Module, name: str):
    """``module.<name>``, read from ``module._modules`` where it is registered there.

    A layer's forward reads several submodules and parameters per call, and
    each ``nn.Module.__getattr__`` costs about a microsecond of host time at
    decode, where the whole MLP's GPU work takes tens (benchmarks/host_time.py).
    """
    found = module._modules.get(name)
    return found if found is not None else getattr(module, name, None)


def _projections(module: nn.Module) -> tuple:
    """``gate_proj``, ``up_proj`` and ``down_proj``, as ``_submodule`` reads them, in one call."""
    submodules = module._modules
    gate_proj, up_proj, down_proj = submodules.get("gate_proj"), submodules.get("up_proj"), submodules.get("down_proj")
    if gate_proj is None or up_proj is None or down_proj is None:  # not registered as modules: any attribute
        return _submodule(module, "gate_proj"), _submodule(module, "up_proj"), _submodule(module, "down_proj")
    return gate_proj, up_proj, down_proj


def gelu_approximation(module: nn.Module) -> Optional[str]:
    """The GELU form ("tanh" or "none") in which the fused layer computes this MLP now, or None: its own forward.

    None where the activation is not a GELU (``activation_gelu_form``) or is a
    function set on the instance or its class rather than a module (its form unknown here),
    and where the module's forward does more than the GeGLU at this moment: an
    ``act_fn`` with hooks (which the fused kernels would not call; warned of
    once per class, since DeepSpeed ZeRO-3 hooks every module and so unfuses
    every such MLP; a forward bound on it is what ``kernelize`` binds to
    transformers' activations, their own or a Hub kernel's of the same function);
    Gemma 3n's MLP in the layers that set ``activation_sparsity`` (a Gaussian
    top-k of the gate before the GELU), and T5Gemma's while its ``dropout``
    (on the GeGLU output) is in training mode with p > 0 (a ``dropout`` with
    no ``p``, of a rate unknown here, counts as active). Both are read from
    the module's dicts, once: ``nn.Module.__getattr__`` on a missing attribute
    costs a microsecond per call (see ``_submodule``).
    """
    state = module.__dict__
    submodules = state["_modules"]
    act_fn = submodules.get("act_fn")
    if act_fn is None and ("act_fn" in state or hasattr(type(module), "act_fn")):
        return None  # a function, set on the instance or the class, not a module: its own forward
    if act_fn is not None and _is_hooked(act_fn):
        _warn_that_hooks_unfuse(type(module).__name__)
        return None
    dropout = submodules.get("dropout")
    if state.get("activation_sparsity", 0.0) or (
        dropout is not None and dropout.training and getattr(dropout, "p", 1.0)
    ):
        return None
    return _activation_module_form(act_fn) if act_fn is not None else _gelu_form_without_act_fn(module)


# The MLP classes warned of by _warn_that_hooks_unfuse. A set rather than functools.cache: Dynamo warns of every
# cached function it traces, and it traces this one when a compiled model has a hooked act_fn.
_CLASSES_WARNED_OF_HOOKS: set = set()


def _warn_that_hooks_unfuse(mlp_class: str) -> None:
    """Once per MLP class: a hooked activation runs the module's own forward."""
    if mlp_class in _CLASSES_WARNED_OF_HOOKS:
        return
    _CLASSES_WARNED_OF_HOOKS.add(mlp_class)
    warnings.warn(
        f"fused-geglu: a {mlp_class} whose act_fn has hooks runs its own forward, unfused, so that the hooks run "
        "(DeepSpeed ZeRO-3 hooks every module); remove them from act_fn to fuse it",
        RuntimeWarning,
        stacklevel=3,  # the layer's forward
    )


def activation_gelu_form(module: nn.Module) -> Optional[str]:
    """The GELU form of a GeGLU MLP's activation ("tanh" or "none"), or None if it is not a GELU.

    The module's own ``act_fn`` decides (it is what the original forward
    computes). Modules without one (Liger's naming) run Liger's forward,
    which computes the tanh GELU whatever their config names (Liger has no
    exact form), or a forward of their own, read from their config's
    ``hidden_activation`` or ``hidden_act``; an activation named there that
    is not a GELU, or none at all, is None too.
    """
    act_fn = _submodule(module, "act_fn")
    return _activation_module_form(act_fn) if act_fn is not None else _gelu_form_without_act_fn(module)


def _gelu_form_without_act_fn(module: nn.Module) -> Optional[str]:
    """The GELU form of an MLP with no ``act_fn``: Liger's forward's (tanh), else its config's."""
    if type(module).forward.__module__.startswith("liger_kernel."):
        return "tanh"
    config = getattr(module, "config", None)
    name = getattr(config, "hidden_activation", None) or getattr(config, "hidden_act", None)
    return _GELU_OF_ACTIVATION_NAME.get(name)


def _activation_module_form(act_fn) -> Optional[str]:
    """The GELU form an ``act_fn`` computes: ``nn.GELU``'s own (a subclass may compute something else), a
    transformers GELU class's, else None."""
    activation_class = type(act_fn)
    if activation_class is nn.GELU:
        return act_fn.approximate
    if activation_class.__module__.startswith("transformers."):
        return _GELU_OF_ACTIVATION_CLASS.get(activation_class.__name__)
    return None


def _is_hooked(module: nn.Module) -> bool:
    """Whether calling ``module`` runs hooks of its own around its forward (global hooks are not read)."""
    return bool(
        module._forward_hooks or module._forward_pre_hooks or module._backward_hooks or module._backward_pre_hooks
    )


def is_plain_linear(module: nn.Module) -> bool:
    """Whether calling ``module`` computes exactly ``F.linear(x, module.weight, module.bias)``.

    Only then may its weight be read directly: a subclass (quantized, LoRA),
    a forward hook (tensor parallelism) or a forward bound on the instance
    (accelerate's offloading, whose weight stays on the meta device until its
    hook brings it) changes what the call computes, a backward hook must see
    the call's gradients, and a tensor subclass weight (DTensor) is not a
    plain matrix.
    """
    return (
        type(module) is nn.Linear
        and "forward" not in module.__dict__
        and not _is_hooked(module)
        and type(module._parameters.get("weight")) in PLAIN_TENSOR_TYPES
    )


def _unfused_forward(module: nn.Module, x):
    """The module's own (class) forward, which ``kernelize`` replaced on the instance: the call, unfused.

    A ``GeGLUMLP`` called as a module in its own right (or a subclass that
    keeps its forward) has none: a TypeError says so, where calling the
    class's forward would recurse until Python's stack ran out.
    """
    forward = type(module).forward
    if forward is GeGLUMLP.forward:
        raise TypeError(
            f"{type(module).__name__} has no forward of its own to run this call unfused: GeGLUMLP is a kernelize "
            "layer, whose forward kernelize binds to a GeGLU MLP (gate_proj, up_proj, down_proj, a GELU act_fn); "
            "it is not a module to call by itself"
        )
    return forward(module, x)


class GeGLUMLP(nn.Module):
    """``down_proj(gelu(gate_proj(x)) * up_proj(x))`` with the GeGLU fused, and the projections where they can be.

    Replaces the forward of Gemma, Gemma2, Gemma3, Gemma 3n and T5Gemma MLPs (and
    modules with Liger's ``LigerGEGLUMLP`` naming). The GELU form follows the
    module's activation; any other activation (or a hooked one), Gemma 3n's
    sparse layers, T5Gemma's dropout in training, and forward-mode AD,
    torch.func transforms or torch.jit.trace run the module's own (class)
    forward, unfused.

    With three plain ``nn.Linear`` projections the whole MLP is ``geglu_mlp``
    on their weights: for inference one fused GEMM for the first half and, at
    decode, the same GEMM's plain form for the down projection; for training
    (a gradient to compute: grad mode on and a parameter or x requiring it)
    one autograd step for the whole MLP that keeps x, gate and up but not the
    GeGLU output (recomputed by the backward kernel). Projections that are not
    plain (quantized, LoRA, hooked) are called as they are: then only the
    GeGLU is fused, with ``geglu_down_proj`` in grad mode where ``down_proj``
    is plain, and the first half through ``geglu_linear`` where gate and up are. Under ``torch.autocast``
    those functions cast the parameters they are given to the autocast dtype,
    as eager's ``nn.Linear`` casts them.
    """

    has_backward = True
    can_torch_compile = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        approximate = gelu_approximation(self)
        # Another activation, or an input the kernels do not take (float64, as gradcheck runs; not a tensor): the
        # original forward, which kernelize replaced on the instance and the class still has, computes eager's
        # result or raises eager's error. So it does under forward-mode AD, a torch.func transform or
        # torch.jit.trace, which the functions refuse before they launch anything (UnsupportedTransform, below;
        # caught rather than asked for here, so that a call reads those flags once).
        if approximate is None or getattr(x, "dtype", None) not in SUPPORTED_DTYPES:
            return _unfused_forward(self, x)
        gate_proj, up_proj, down_proj = _projections(self)
        plain_projections = is_plain_linear(gate_proj) and is_plain_linear(up_proj)
        plain_down_proj = is_plain_linear(down_proj)
        try:
            # A plain nn.Linear's parameters are read from its _parameters (see _submodule). Under autocast the
            # functions cast what they are given as the projections would cast it (functional._autocast).
            if plain_projections and plain_down_proj:
                gate, up, down = gate_proj._parameters, up_proj._parameters, down_proj._parameters
                operands = (x, gate["weight"], up["weight"], down["weight"], gate["bias"], up["bias"], down["bias"])
                return geglu_mlp(*operands, approximate=approximate)
            # Below, projections are called before a function could refuse the transform: asked first, so that
            # their hooks and random numbers (a LoRA's dropout) run once, in the unfused forward. Not under
            # torch.compile, which cannot trace the tracing flag (checks.check_no_unsupported_transform).
            if not torch.compiler.is_compiling() and unsupported_transform_active():
                return _unfused_forward(self, x)
            if plain_down_proj and torch.is_grad_enabled():
                # Projections that are not plain may hold trainable parameters of their own (LoRA): grad mode
                # decides.
                down = down_proj._parameters
                return geglu_down_proj(gate_proj(x), up_proj(x), down["weight"], down["bias"], approximate=approximate)
            if plain_projections:
                gate, up = gate_proj._parameters, up_proj._parameters
                operands = (x, gate["weight"], up["weight"], gate["bias"], up["bias"])
                return down_proj(geglu_linear(*operands, approximate=approximate))
            hidden = geglu(gate_proj(x), up_proj(x), approximate=approximate)
        except UnsupportedTransform:
            return _unfused_forward(self, x)
        if plain_down_proj:  # what calling it computes, without nn.Module's call machinery (autocast casts in F.linear)
            down = down_proj._parameters
            return F.linear(hidden, down["weight"], down["bias"])
        return down_proj(hidden)


class GeluAndMul(nn.Module):
    """``kernels-community/activation``'s layer: exact GELU of the first half times the second, with backward."""

    has_backward = True
    can_torch_compile = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return geglu_concat(x, approximate="none")


class GeluTanhAndMul(nn.Module):
    """``kernels-community/activation``'s layer: tanh GELU of the first half times the second, with backward."""

    has_backward = True
    can_torch_compile = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return geglu_concat(x, approximate="tanh")

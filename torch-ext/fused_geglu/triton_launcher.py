"""Launching Triton kernels without Triton's per-call dispatch.

``kernel[grid](*args)`` runs Triton's JIT dispatch on every call: it binds the
arguments, derives a specialization key from them, looks the compiled kernel
up, checks the kernel's globals and only then launches. On the H200 machine's
CPU that costs tens of microseconds (benchmarks/host_overhead.py), longer
than the whole GPU work of a decode-sized GeGLU. ``Launcher`` goes through
Triton's dispatch once per specialization, keeps the ``CompiledKernel`` that
it returns, and afterwards launches that compiled kernel directly through its
own runner (``compiled[grid](*args, stream=...)``).

Correctness rests on the key: a compiled kernel may be reused only for
arguments that Triton would have compiled the same way. Triton specializes
each tensor argument on its dtype and on whether its address is 16-byte
aligned, and each integer on its type (i32 or i64) and on whether it is
divisible by 16 (older releases: whether it equals 1). The key here holds all
of those, the constexprs and the launch options: it can only separate more
cases than Triton does (a second cache entry for the same binary), never
fewer.

The direct path is used with Triton releases whose runner takes every bound
argument, constexprs included, in signature order (read in the 3.6 and 3.9
sources); on others, and under TRITON_INTERPRET=1, every call goes through
``kernel[grid]`` as usual.
"""

from __future__ import annotations

import os
from typing import Any

import torch
import triton
from triton.runtime import driver

#: Triton releases from which the compiled kernel's runner takes all bound arguments.
DIRECT_LAUNCH_MIN_TRITON = (3, 4)

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1


def _triton_version() -> tuple[int, int]:
    major, minor = triton.__version__.split(".")[:2]
    return int(major), int(minor)


def direct_launch_supported() -> bool:
    """Whether compiled kernels are launched directly (compiled Triton of a known release)."""
    return os.environ.get("TRITON_INTERPRET") != "1" and _triton_version() >= DIRECT_LAUNCH_MIN_TRITON


def specialization_key(args: tuple) -> tuple:
    """What Triton specializes a compiled kernel on, for these runtime arguments (or more)."""
    key = []
    for arg in args:
        if isinstance(arg, torch.Tensor):
            key.append((arg.dtype, arg.data_ptr() % 16 == 0))
        elif isinstance(arg, int):
            key.append((arg % 16 == 0, arg == 1, _INT32_MIN <= arg <= _INT32_MAX))
        else:
            key.append(arg)
    return tuple(key)


class Launcher:
    """Launches one ``@triton.jit`` kernel, through Triton's dispatch only on a new specialization.

    Call it with the grid, the runtime arguments in signature order (the
    first a tensor, on the device to launch on), and the constexprs and
    launch options (``num_warps``, ``num_stages``) by name. The kernel's
    constexpr parameters must come after all of its runtime ones.
    """

    def __init__(self, kernel: Any) -> None:
        self.kernel = kernel
        self.direct = direct_launch_supported()
        self._compiled: dict[tuple, Any] = {}

    def __call__(self, grid: tuple[int, ...], args: tuple, **constexprs_and_options: Any) -> None:
        """Launch on the device of ``args[0]`` (Triton launches on the current device: make it current)."""
        tensor_device = args[0].device
        if tensor_device.index is not None and tensor_device.index != driver.active.get_current_device():
            with torch.get_device_module(tensor_device).device(tensor_device.index):
                return self(grid, args, **constexprs_and_options)
        if not self.direct:
            self.kernel[grid](*args, **constexprs_and_options)
            return
        device = driver.active.get_current_device()
        key = (device, tuple(constexprs_and_options.items()), specialization_key(args))
        compiled = self._compiled.get(key)
        if compiled is None:
            self._compiled[key] = self.kernel[grid](*args, **constexprs_and_options)
            return
        constexprs = (constexprs_and_options[name] for name in self.kernel.arg_names[len(args) :])
        grid_xyz = grid + (1,) * (3 - len(grid))  # the runner reads all three
        compiled[grid_xyz](*args, *constexprs, stream=driver.active.get_current_stream(device))

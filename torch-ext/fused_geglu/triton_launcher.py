"""Launching Triton kernels without Triton's per-call dispatch.

``kernel[grid](*args)`` runs Triton's JIT dispatch on every call: it binds the
arguments, derives a specialization key from them, looks the compiled kernel
up, checks the kernel's globals and only then launches. On the H200 machine's
CPU that costs about 7 microseconds more than launching the compiled kernel
(benchmarks/host_overhead.py), as long as the whole GPU work of a decode-sized
GeGLU. ``Launcher`` goes through Triton's dispatch once per specialization,
keeps the ``CompiledKernel`` that it returns, and afterwards launches that
compiled kernel itself, with the same call that Triton's dispatch ends in
(``compiled.run(grid, stream, function, metadata, hooks, *args)``).

Correctness rests on the key: a compiled kernel may be reused only for
arguments that Triton would have compiled the same way. Triton specializes
each tensor argument on its dtype and on whether its address is 16-byte
aligned, and each integer on its type (i32 or i64) and on whether it is
divisible by 16 (older releases: whether it equals 1). The key here holds all
of those, the constexprs and the launch options: it can only separate more
cases than Triton does (a second cache entry for the same binary), never
fewer.

The direct path is used with Triton releases whose dispatch ends in that
call, with every bound argument, constexprs included, in signature order
(read in the 3.4, 3.5, 3.6 and 3.9 sources); on others, and under
TRITON_INTERPRET=1, every call goes through ``kernel[grid]`` as usual.
Launch hooks (``triton.knobs.runtime.launch_enter_hook``, used by profilers)
are called as Triton's dispatch calls them; our kernels define no
``launch_metadata`` function, so no hook sees the arguments themselves.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from typing import Any, Optional

import torch
import triton
from triton.runtime import driver

try:
    from triton import knobs
except ImportError:  # before Triton 3.4, which never launches directly (DIRECT_LAUNCH_MIN_TRITON)
    knobs = None

#: Triton releases from which the compiled kernel's runner takes all bound arguments.
DIRECT_LAUNCH_MIN_TRITON = (3, 4)

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1


def _triton_version() -> tuple[int, int]:
    major, minor = triton.__version__.split(".")[:2]
    return int(major), int(minor)


def direct_launch_supported() -> bool:
    """Whether compiled kernels are launched directly (compiled Triton of a known release)."""
    return os.environ.get("TRITON_INTERPRET") != "1" and _triton_version() >= DIRECT_LAUNCH_MIN_TRITON


@functools.lru_cache(maxsize=4096)
def scalar_key(scalars: tuple[int, ...]) -> tuple:
    """What Triton specializes on in these integer arguments: divisibility by 16, equality to 1, width."""
    return tuple((s % 16 == 0, s == 1, _INT32_MIN <= s <= _INT32_MAX) for s in scalars)


def pointer_key(tensors: tuple[torch.Tensor, ...], addresses: list[int]) -> tuple:
    """What Triton specializes on in these pointer arguments: dtype and 16-byte alignment."""
    return tuple([(t.dtype, address % 16 == 0) for t, address in zip(tensors, addresses)])


@dataclass(frozen=True)
class LaunchOptions:
    """A kernel's constexprs (name, value) in signature order and its launch options."""

    constexprs: tuple[tuple[str, Any], ...]
    num_warps: int
    num_stages: Optional[int] = None
    key: tuple = field(init=False, repr=False)
    constexpr_values: tuple = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", (self.constexprs, self.num_warps, self.num_stages))
        object.__setattr__(self, "constexpr_values", tuple(value for _, value in self.constexprs))

    def as_kwargs(self) -> dict[str, Any]:
        kwargs = dict(self.constexprs, num_warps=self.num_warps)
        if self.num_stages is not None:
            kwargs["num_stages"] = self.num_stages
        return kwargs


class Launcher:
    """Launches one ``@triton.jit`` kernel, through Triton's dispatch only on a new specialization.

    The kernel's parameters must be its pointer arguments, then its integer
    arguments, then its constexprs; a call passes them as ``tensors`` (the
    first on the device to launch on), ``scalars`` and ``options``.
    """

    def __init__(self, kernel: Any) -> None:
        self.kernel = kernel
        self.direct = direct_launch_supported()
        self._compiled: dict[tuple, Any] = {}

    def __call__(
        self, grid: tuple[int, ...], tensors: tuple[torch.Tensor, ...], scalars: tuple[int, ...], options: LaunchOptions
    ) -> None:
        # Triton launches on the current device: make the tensors' device current.
        index = tensors[0].get_device()
        if index >= 0 and index != driver.active.get_current_device():
            with torch.get_device_module(tensors[0].device).device(index):
                return self(grid, tensors, scalars, options)
        if not self.direct:
            self.kernel[grid](*tensors, *scalars, **options.as_kwargs())
            return
        addresses = [t.data_ptr() for t in tensors]
        key = (index, options.key, pointer_key(tensors, addresses), scalar_key(scalars))
        compiled = self._compiled.get(key)
        if compiled is None:
            self._compiled[key] = self.kernel[grid](*tensors, *scalars, **options.as_kwargs())
            return
        # CUDA and ROCm launchers take a pointer as a plain integer as it is;
        # given a tensor, they call its data_ptr() and then ask the driver
        # whether the address is device memory (cuPointerGetAttribute), once
        # per pointer and per launch. The addresses were read for the key
        # already. Other backends get the tensors, as Triton's dispatch passes them.
        pointers = addresses if tensors[0].is_cuda else tensors
        args = (*pointers, *scalars, *options.constexpr_values)
        grid_xyz = grid + (1,) * (3 - len(grid))
        stream = driver.active.get_current_stream(index)
        enter_hook = knobs.runtime.launch_enter_hook
        # Without an enter hook, Triton's launch_metadata returns None at once: skip the call.
        metadata = None if enter_hook is None else compiled.launch_metadata(grid_xyz, stream, *args)
        compiled.run(
            *grid_xyz,
            stream,
            compiled.function,
            compiled.packed_metadata,
            metadata,
            enter_hook,
            knobs.runtime.launch_exit_hook,
            *args,
        )

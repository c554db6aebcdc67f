"""Launching Triton kernels without Triton's per-call dispatch, and what happens when Triton cannot compile one.

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
arguments that Triton would have compiled the same way. The key is built by
the function Triton's dispatch itself calls on each argument,
``native_specialize_impl(backend, arg, is_const, specialize, align)``, with the
running backend and each parameter's flags, so it holds whatever that backend
specializes on: dtype, 16-byte alignment, divisibility by 16, int32/int64,
equality to 1 on CUDA; on ROCm also whether a tensor's storage fits in 2 GiB
(buffer ops). Where the backend's tensor specialization is Triton's native
one (CUDA), a tensor's part of the key is read directly: its dtype and its
address's alignment, what that function reads (``tensor_key``).
Add the constexprs and the launch options, and the key separates every case
Triton separates. A launch finds its compiled kernel by its integers as they
are, beside its tensors' part of the key: the integers' own key is built
once per new set of them (a new shape), whose first launch then finds the
compiled kernel of its specialization.

The direct path runs only where it was verified: the CUDA and ROCm backends
(their launchers take pointers as integers) with the Triton releases in
``DIRECT_LAUNCH_TRITON``, whose dispatch was read to end in that call, with
every bound argument, constexprs included, in signature order, and to build
its key with ``native_specialize_impl`` (tests/test_launcher.py checks the
installed release against both). Everywhere else (XPU, other Triton
releases, TRITON_INTERPRET=1) every call goes through ``kernel[grid]``.
Launch hooks (``triton.knobs.runtime.launch_enter_hook``, used by profilers)
are called as Triton's dispatch calls them; our kernels define no
``launch_metadata`` function, so no hook sees the arguments themselves.

A configuration Triton cannot compile or launch on the device (out of shared
memory or registers, a compiler error) raises ``KernelUnavailable``, at once
on later calls with the same configuration, so that callers can take another
path without compiling it again.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Optional

import torch
import triton
from triton.compiler.errors import CompilationError
from triton.runtime import driver
from triton.runtime.errors import OutOfResources, PTXASError

try:
    from triton import knobs
except ImportError:  # Triton before 3.4
    knobs = None
try:
    from triton._C.libtriton import native_specialize_impl
    from triton.compiler import make_backend
except ImportError:  # releases that never launch directly (DIRECT_LAUNCH_TRITON)
    native_specialize_impl = make_backend = None

#: (major, minor) Triton releases whose dispatch the direct path was checked against (3.6: the H200's).
DIRECT_LAUNCH_TRITON = frozenset({(3, 6), (3, 7), (3, 8), (3, 9)})
#: Backends whose launchers the direct path was checked against.
DIRECT_LAUNCH_BACKENDS = frozenset({"cuda", "hip"})

#: Whether ``@triton.jit`` kernels are interpreted on the CPU (TRITON_INTERPRET), read once, as Triton reads it
#: when it decorates them: through its knobs where it has them ("1", "true", "on"), else as "1".
RUNS_INTERPRETED = knobs.runtime.interpret if knobs is not None else os.environ.get("TRITON_INTERPRET") == "1"

#: Launches a launcher remembers by their arguments (one per shape seen, about).
MAX_LAUNCH_KEYS = 4096

#: What Triton raises when a configuration does not compile or load on the device. Compiled, an
#: MLIR pass failure or a driver refusal (too many resources requested) is a RuntimeError; the
#: interpreter compiles nothing, so there a RuntimeError is a bug and propagates.
UNAVAILABLE_ERRORS = (OutOfResources, PTXASError, CompilationError) + (() if RUNS_INTERPRETED else (RuntimeError,))


class KernelUnavailable(RuntimeError):
    """Triton could not compile or launch this kernel configuration on this device."""


def _triton_version() -> tuple[int, int]:
    major, minor = triton.__version__.split(".")[:2]
    return int(major), int(minor)


def _torch_backend() -> Optional[str]:
    """The Triton backend this torch build launches on ("cuda", "hip"), read without touching the device."""
    if torch.version.hip:
        return "hip"
    if torch.version.cuda:
        return "cuda"
    return None


def direct_launch_supported() -> bool:
    """Whether compiled kernels are launched directly: a verified Triton release and backend, compiled."""
    return (
        not RUNS_INTERPRETED
        and _triton_version() in DIRECT_LAUNCH_TRITON
        and _torch_backend() in DIRECT_LAUNCH_BACKENDS
    )


def parameter_flags(kernel: Any) -> tuple[tuple[bool, bool, bool], ...]:
    """(is_const, specialize, align) of each non-constexpr parameter, as Triton's dispatch passes them."""
    return tuple(
        (p.is_const, not p.do_not_specialize, not p.do_not_specialize_on_alignment)
        for p in kernel.params
        if not p.is_constexpr
    )


def tensor_key(backend: Any, native: bool, tensors: tuple, flags: tuple[tuple[bool, bool, bool], ...]) -> tuple:
    """The tensors' addresses, which the launch passes, and what Triton's dispatch specializes them on.

    A backend with native tensor specialization (``native``: its
    ``supports_native_tensor_specialization``, CUDA's) keys a tensor by two
    things, its dtype and whether its address is a multiple of 16, the
    parameter's flags being fixed: the same two, read here with the address,
    separate every case it separates, at a fraction of the cost of asking it
    per tensor. A tensor passed again in the next slot (the launches pass one
    in each pointer slot a kernel will not read: a missing bias) is read once.
    Any other backend (ROCm also keys whether the storage fits in 2 GiB) is
    asked per tensor (``specialization_key``).
    """
    if not native:
        return [t.data_ptr() for t in tensors], specialization_key(backend, tensors, flags)
    pointers, dtypes, aligned = [], [], []
    previous = None
    for tensor in tensors:
        if tensor is not previous:
            previous, address, dtype = tensor, tensor.data_ptr(), tensor.dtype
            is_aligned = address & 15 == 0
        pointers.append(address)
        dtypes.append(dtype)
        aligned.append(is_aligned)
    return pointers, (tuple(dtypes), tuple(aligned))


def specialization_key(backend: Any, args: tuple, flags: tuple[tuple[bool, bool, bool], ...]) -> tuple:
    """What Triton's dispatch specializes these (non-constexpr) arguments on, for this backend.

    An argument that is the argument before it, with the same flags, reuses
    its key: the launches pass one tensor in each pointer slot a kernel will
    not read (a missing bias), and each key costs a call into Triton.
    """
    keys: list = []
    previous = previous_flag = None
    for arg, flag in zip(args, flags):
        keys.append(keys[-1] if arg is previous and flag == previous_flag else native_specialize_impl(backend, arg, *flag))
        previous, previous_flag = arg, flag
    return tuple(keys)


@dataclass(frozen=True, eq=False)
class LaunchOptions:
    """A kernel's constexprs (name, value) in signature order and its launch options.

    Equal when their ``key`` is; the hash is computed once, so that a
    launch's cache lookup does not walk the constexprs on every call.
    """

    constexprs: tuple[tuple[str, Any], ...]
    num_warps: int
    num_stages: Optional[int] = None
    key: tuple = field(init=False, repr=False)
    constexpr_values: tuple = field(init=False, repr=False)

    key_hash: int = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", (self.constexprs, self.num_warps, self.num_stages))
        object.__setattr__(self, "key_hash", hash(self.key))
        object.__setattr__(self, "constexpr_values", tuple(value for _, value in self.constexprs))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LaunchOptions) and self.key == other.key

    def __hash__(self) -> int:
        return self.key_hash

    def as_kwargs(self) -> dict[str, Any]:
        kwargs = dict(self.constexprs, num_warps=self.num_warps)
        if self.num_stages is not None:
            kwargs["num_stages"] = self.num_stages
        return kwargs


class Launcher:
    """Launches one ``@triton.jit`` kernel, through Triton's dispatch only on a new specialization.

    The kernel's parameters must be its pointer arguments, then its integer
    arguments, then its constexprs; a call passes them as ``tensors`` (the
    first on the device to launch on), ``scalars`` (Python ints) and
    ``options``, with a grid of three axes. A direct launch is looked up by those arguments
    themselves: their addresses, dtypes and integers, which is one dictionary
    lookup per launch; a new set of them is matched to its specialization's
    compiled kernel once.
    """

    def __init__(self, kernel: Any) -> None:
        self.kernel = kernel
        self.direct = direct_launch_supported()
        # (device index, options, tensors' key, integer arguments' key) -> the CompiledKernel Triton's dispatch made.
        self._compiled: dict[tuple, Any] = {}
        # (device index, options, integer arguments, tensors' key) -> (run, function, packed metadata, compiled):
        # what a direct launch calls, found by the arguments themselves (many shapes share one compiled kernel).
        self._launches: dict[tuple, tuple] = {}
        self._backends: dict[int, Any] = {}  # device index -> Triton's backend (direct path only)
        # Whether the backend keys tensors as tensor_key reads them (CUDA); set on the first direct launch.
        self._native_tensor_keys = False
        self._tensor_flags = self._scalar_flags = ()  # parameter_flags(kernel), split; set on the first direct launch
        self._unavailable: dict[tuple, str] = {}  # (device index, options.key) -> why it did not compile or launch
        # Whether a launch must make its tensors' device current first: until the first direct launch has
        # counted the devices, then only where there are several (with one, it always is the current one).
        self._several_devices = True

    def __call__(
        self, grid: tuple[int, int, int], tensors: tuple[torch.Tensor, ...], scalars: tuple[int, ...], options: LaunchOptions
    ) -> None:
        if len(grid) != 3:  # the runner takes the three axes as they are: a shorter grid would shift every argument
            raise ValueError(f"{self.kernel.__name__}: a launch's grid has three axes, got {grid}")
        # Triton launches on the current device: make the tensors' device current.
        index = tensors[0].get_device()
        if index >= 0 and self._several_devices and index != driver.active.get_current_device():
            with torch.get_device_module(tensors[0].device).device(index):
                return self(grid, tensors, scalars, options)
        if self._unavailable and (index, options.key) in self._unavailable:
            raise KernelUnavailable(self._unavailable[index, options.key])
        if not self.direct:
            self._dispatch(grid, tensors, scalars, options, index)
            return
        active = driver.active
        backend = self._backends.get(index)
        if backend is None:
            backend = self._start_direct_launches(index, len(tensors), tensors[0].device)
        # CUDA and ROCm launchers take a pointer as a plain integer as it is;
        # given a tensor, they call its data_ptr() and then ask the driver
        # whether the address is device memory (cuPointerGetAttribute), once
        # per pointer and per launch.
        pointers, tensors_key = tensor_key(backend, self._native_tensor_keys, tensors, self._tensor_flags)
        launch = self._launches.get((index, options, scalars, tensors_key))
        if launch is None:
            launch = self._find_compiled(grid, tensors, scalars, options, index, backend, tensors_key)
            if launch is None:  # compiled now, and launched by Triton's dispatch
                return
        run, function, packed_metadata, compiled = launch
        stream = active.get_current_stream(index)
        # The launch hooks (profilers'): Triton 3.6-3.9 keep them in HookChains, empty unless a hook is
        # registered. An empty chain goes as None, as it would call nothing; a hook set in a chain's place is
        # a plain callable (no ``calls``), always called. Where either is called, it gets the launch metadata
        # Triton's dispatch builds for it.
        runtime = knobs.runtime
        enter_hook, exit_hook = runtime.launch_enter_hook, runtime.launch_exit_hook
        if enter_hook is not None and not getattr(enter_hook, "calls", True):
            enter_hook = None
        if exit_hook is not None and not getattr(exit_hook, "calls", True):
            exit_hook = None
        if enter_hook is None and exit_hook is None:
            run(*grid, stream, function, packed_metadata, None, None, None, *pointers, *scalars, *options.constexpr_values)
            return
        args = (*pointers, *scalars, *options.constexpr_values)
        metadata = compiled.launch_metadata(grid, stream, *args)
        run(*grid, stream, function, packed_metadata, metadata, enter_hook, exit_hook, *args)

    def _start_direct_launches(self, index: int, n_tensors: int, device: torch.device) -> Any:
        """Triton's backend for device ``index``, made on the launcher's first direct launch there; the
        kernel's parameter flags and the device count, read on its first direct launch anywhere."""
        backend = self._backends[index] = make_backend(driver.active.get_current_target())
        self._native_tensor_keys = getattr(backend, "supports_native_tensor_specialization", False)
        flags = parameter_flags(self.kernel)
        self._tensor_flags, self._scalar_flags = flags[:n_tensors], flags[n_tensors:]
        self._several_devices = torch.get_device_module(device).device_count() > 1
        return backend

    def _find_compiled(self, grid, tensors, scalars, options, index: int, backend, tensors_key) -> Optional[tuple]:
        """A launch's first call with these arguments: the compiled kernel of their specialization, remembered
        for them (``_launches``), or None where there was none yet and Triton's dispatch compiled and launched it."""
        scalar_key = specialization_key(backend, scalars, self._scalar_flags)
        compiled_key = (index, options, tensors_key, scalar_key)
        compiled = self._compiled.get(compiled_key)
        if compiled is None:
            self._compiled[compiled_key] = self._dispatch(grid, tensors, scalars, options, index)
            return None
        if len(self._launches) >= MAX_LAUNCH_KEYS:  # many shapes seen: start over rather than grow
            self._launches.clear()
        launch = self._launches[index, options, scalars, tensors_key] = (
            compiled.run, compiled.function, compiled.packed_metadata, compiled
        )
        return launch

    def _dispatch(self, grid, tensors, scalars, options: LaunchOptions, index: int) -> Any:
        """Triton's own dispatch (compiling on a new specialization); KernelUnavailable where it cannot."""
        try:
            return self.kernel[grid](*tensors, *scalars, **options.as_kwargs())
        except UNAVAILABLE_ERRORS as error:
            why = f"{self.kernel.__name__} with {options} does not run on device {index}: {type(error).__name__}: {error}"
            self._unavailable[index, options.key] = why
            raise KernelUnavailable(why) from error

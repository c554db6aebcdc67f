"""The direct launcher: Triton's dispatch once per specialization, the compiled kernel's runner after.

A fake JIT function and driver stand in for Triton's (no GPU needed); on the
H200 the same code path runs for real under every kernel test and the bench.
"""

from __future__ import annotations

import contextlib
import inspect
import subprocess
import sys
import types

import pytest
import torch
import triton
import triton.language as tl
from triton import knobs
from triton.backends.compiler import GPUTarget
from triton.compiler import make_backend
from triton.runtime.jit import JITFunction, create_function_from_signature

from child_process import child_env


class FakeCompiledKernel:
    """What ``kernel[grid](...)`` returns: ``run`` records each direct launch as Triton's dispatch makes it."""

    function = "cu-function"
    packed_metadata = "packed-metadata"

    def __init__(self, launches: list) -> None:
        self.launches = launches

    def launch_metadata(self, grid, stream, *args):
        return ("metadata", grid)

    def run(self, grid_x, grid_y, grid_z, stream, function, packed_metadata, metadata, enter_hook, exit_hook, *args):
        assert (function, packed_metadata) == (self.function, self.packed_metadata)
        self.launches.append(((grid_x, grid_y, grid_z), args, stream, metadata, enter_hook, exit_hook))


def _fake_kernel_source(ptr, n, BLOCK: tl.constexpr, FLAG: tl.constexpr):
    pass


class FakeJITFunction:
    """A ``@triton.jit`` kernel(ptr, n, BLOCK: constexpr, FLAG: constexpr) that records Triton-dispatched calls.

    Its parameters are a real JITFunction's (they carry the flags Triton's dispatch specializes with).
    """

    __name__ = "fake_kernel"
    params = JITFunction(_fake_kernel_source).params

    def __init__(self, error: Exception | None = None) -> None:
        self.dispatches: list = []
        self.direct_launches: list = []
        self.error = error

    def __getitem__(self, grid):
        def dispatch(*args, **constexprs_and_options):
            self.dispatches.append((grid, args, constexprs_and_options))
            if self.error is not None:
                raise self.error
            return FakeCompiledKernel(self.direct_launches)

        return dispatch


STREAM = 0xC0FFEE


@pytest.fixture
def launcher_module(kernel, monkeypatch):
    module = kernel.triton_launcher
    device = types.SimpleNamespace(
        get_current_device=lambda: 0,
        get_current_stream=lambda index: STREAM,
        get_current_target=lambda: GPUTarget("cuda", 90, 32),
    )
    monkeypatch.setattr(module, "driver", types.SimpleNamespace(active=device))
    monkeypatch.setattr(module, "knobs", _knobs(enter_hook=None))
    return module


def _knobs(enter_hook):
    return types.SimpleNamespace(runtime=types.SimpleNamespace(launch_enter_hook=enter_hook, launch_exit_hook=None))


def _direct_launcher(module):
    jit = FakeJITFunction()
    launcher = module.Launcher(jit)
    launcher.direct = True  # as on a GPU with a supported Triton
    return jit, launcher


def _options(module, block=16, flag=True, num_warps=4):
    return module.LaunchOptions(constexprs=(("BLOCK", block), ("FLAG", flag)), num_warps=num_warps)


def test_second_call_launches_the_compiled_kernel_directly(launcher_module):
    jit, launch = _direct_launcher(launcher_module)
    buffer = torch.empty(64)
    launch((4, 1, 1), (buffer,), (32,), _options(launcher_module))
    launch((8, 1, 1), (buffer,), (48,), _options(launcher_module))
    assert jit.dispatches == [((4, 1, 1), (buffer, 32), {"BLOCK": 16, "FLAG": True, "num_warps": 4})]
    # Every bound argument, constexprs included, in signature order, pointers as addresses; the grid
    # as three axes. Without a launch hook there is no launch metadata (Triton's would return None).
    assert jit.direct_launches == [((8, 1, 1), (buffer.data_ptr(), 48, 16, True), STREAM, None, None, None)]


class FakeCudaTensor:
    """What the launcher reads of a CUDA (or ROCm) tensor: its device, dtype and address."""

    is_cuda = True
    dtype = torch.float16
    device = torch.device("cuda", 0)

    def __init__(self, address: int) -> None:
        self.address = address

    def get_device(self) -> int:
        return 0

    def data_ptr(self) -> int:
        return self.address


def test_cuda_pointers_travel_as_addresses(launcher_module):
    """CUDA and ROCm launchers take integers as they are (a tensor costs them a driver query per pointer)."""
    jit, launch = _direct_launcher(launcher_module)
    first, second = FakeCudaTensor(0x7F0000000000), FakeCudaTensor(0x7F0000001000)
    launch((4, 1, 1), (first,), (32,), _options(launcher_module))
    launch((4, 1, 1), (second,), (32,), _options(launcher_module))
    assert jit.dispatches[0][1] == (first, 32)  # Triton's own dispatch still sees the tensor
    assert jit.direct_launches[0][1] == (0x7F0000001000, 32, 16, True)


class FakeDeviceModule:
    """``torch.get_device_module``'s answer: ``device_count`` devices, device 0 current, and the indices made
    current (``device``), in order."""

    def __init__(self, device_count: int) -> None:
        self.count = device_count
        self.current = 0
        self.made_current: list[int] = []

    def device_count(self) -> int:
        return self.count

    @contextlib.contextmanager
    def device(self, index: int):
        self.made_current.append(index)
        previous, self.current = self.current, index
        try:
            yield
        finally:
            self.current = previous


class FakeTensorOnDevice(FakeCudaTensor):
    def __init__(self, address: int, index: int) -> None:
        super().__init__(address)
        self.index = index

    def get_device(self) -> int:
        return self.index


@pytest.mark.parametrize("device_count", [1, 2])
def test_every_launch_runs_on_its_tensors_device(launcher_module, monkeypatch, device_count):
    """With several devices each launch makes its tensors' device current (device 1 here, with 0 current), the
    direct ones too; with one, the device is asked for on the first launch only (it is always the current one)."""
    device_module = FakeDeviceModule(device_count)
    monkeypatch.setattr(torch, "get_device_module", lambda device: device_module)
    asked = []
    monkeypatch.setattr(
        launcher_module.driver.active, "get_current_device", lambda: asked.append(1) or device_module.current
    )
    jit, launch = _direct_launcher(launcher_module)
    tensor = FakeTensorOnDevice(0x7F0000000000, index=device_count - 1)
    for _ in range(3):
        launch((4, 1, 1), (tensor,), (32,), _options(launcher_module))
    assert len(jit.dispatches) == 1 and len(jit.direct_launches) == 2
    if device_count == 1:
        assert device_module.made_current == [] and len(asked) == 1
    else:
        assert device_module.made_current == [1, 1, 1]


def test_launch_hooks_get_their_metadata(launcher_module, monkeypatch):
    """With a launch-enter hook set (a profiler), the direct launch passes it, as Triton's dispatch does."""
    hook = object()
    monkeypatch.setattr(launcher_module, "knobs", _knobs(enter_hook=hook))
    jit, launch = _direct_launcher(launcher_module)
    buffer = torch.empty(64)
    for _ in range(2):
        launch((2, 1, 1), (buffer,), (32,), _options(launcher_module))
    expected_args = (buffer.data_ptr(), 32, 16, True)
    assert jit.direct_launches == [((2, 1, 1), expected_args, STREAM, ("metadata", (2, 1, 1)), hook, None)]


@pytest.mark.parametrize(
    "changed_tensors, changed_scalars, changed_options",
    [
        (lambda b: (b[1:],), (32,), {}),  # address no longer 16-byte aligned
        (lambda b: (b.half(),), (32,), {}),  # another dtype
        (lambda b: (b,), (33,), {}),  # not divisible by 16
        (lambda b: (b,), (1,), {}),  # equal to 1
        (lambda b: (b,), (2**31 + 16,), {}),  # past int32
        (lambda b: (b,), (32,), {"block": 32}),  # another constexpr
        (lambda b: (b,), (32,), {"num_warps": 8}),  # another launch option
    ],
    ids=["alignment", "dtype", "divisibility", "one", "int64", "constexpr", "num_warps"],
)
def test_a_new_specialization_goes_through_triton(launcher_module, changed_tensors, changed_scalars, changed_options):
    """After a specialization has launched directly (and so is remembered by its arguments), a call that Triton
    would specialize otherwise still goes through Triton's dispatch."""
    jit, launch = _direct_launcher(launcher_module)
    buffer = torch.empty(64)
    for _ in range(2):
        launch((4, 1, 1), (buffer,), (32,), _options(launcher_module))
    launch((4, 1, 1), changed_tensors(buffer), changed_scalars, _options(launcher_module, **changed_options))
    assert len(jit.dispatches) == 2 and len(jit.direct_launches) == 1


@pytest.mark.parametrize("direct", [True, False])
def test_a_grid_without_three_axes_is_refused(launcher_module, direct):
    """The direct path passes the grid's three axes to Triton's runner as they are: a shorter grid is a caller's
    bug, refused on every call, before anything runs."""
    jit, launch = _direct_launcher(launcher_module)
    launch.direct = direct
    buffer = torch.empty(64)
    for _ in range(2):  # compiled, then (direct) remembered by its arguments
        launch((4, 1, 1), (buffer,), (32,), _options(launcher_module))
    with pytest.raises(ValueError, match="three axes"):
        launch((4,), (buffer,), (32,), _options(launcher_module))
    assert len(jit.dispatches) + len(jit.direct_launches) == 2


def test_without_direct_launch_every_call_goes_through_triton(launcher_module):
    jit = FakeJITFunction()
    launch = launcher_module.Launcher(jit)
    launch.direct = False
    buffer = torch.empty(8)
    for _ in range(3):
        launch((1, 1, 1), (buffer,), (8,), _options(launcher_module))
    assert len(jit.dispatches) == 3 and jit.direct_launches == []


def test_interpreted_kernels_never_launch_directly(launcher_module, monkeypatch):
    monkeypatch.setattr(launcher_module, "RUNS_INTERPRETED", True)
    assert not launcher_module.direct_launch_supported()


@pytest.mark.parametrize("interpret", [None, "0", "1", "true", "on"])
def test_runs_interpreted_is_what_triton_jit_does(build_dir, interpret):
    """RUNS_INTERPRETED says interpreted exactly where @triton.jit gave the kernels an InterpretedFunction
    ("true" and "on" interpret too, with Triton's knobs), read in a fresh process for each setting."""
    code = (
        "import sys, pathlib; from kernels import get_local_kernel;"
        "from triton.runtime.interpreter import InterpretedFunction;"
        "k = get_local_kernel(pathlib.Path(sys.argv[1]));"
        "interpreted = isinstance(k.triton_kernels.geglu_forward_kernel, InterpretedFunction);"
        "print(interpreted, k.triton_launcher.RUNS_INTERPRETED)"
    )
    env = child_env()
    env.pop("TRITON_INTERPRET", None)
    if interpret is not None:
        env["TRITON_INTERPRET"] = interpret
    result = subprocess.run([sys.executable, "-c", code, str(build_dir)], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    interpreted, flag = result.stdout.split()
    assert flag == interpreted, f"TRITON_INTERPRET={interpret}: Triton interprets: {interpreted}, RUNS_INTERPRETED {flag}"


def test_a_configuration_that_does_not_compile_is_unavailable_from_then_on(launcher_module):
    """Triton's OutOfResources on the first call: KernelUnavailable, then at once, without compiling again."""
    jit = FakeJITFunction(error=triton.runtime.errors.OutOfResources(147_456, 101_376, "shared memory"))
    launch = launcher_module.Launcher(jit)
    launch.direct = True
    buffer = torch.empty(64)
    for _ in range(2):
        with pytest.raises(launcher_module.KernelUnavailable, match="OutOfResources"):
            launch((4, 1, 1), (buffer,), (32,), _options(launcher_module))
    assert len(jit.dispatches) == 1
    with pytest.raises(launcher_module.KernelUnavailable):  # another configuration is still tried
        launch((4, 1, 1), (buffer,), (32,), _options(launcher_module, block=32))
    assert len(jit.dispatches) == 2


# --- the key against Triton's own specialization, for each backend, without a device ---------------


def _signature_of_the_test_kernel(a_ptr, b_ptr, n, m, stride, BLOCK: tl.constexpr):
    pass


#: A JITFunction whatever TRITON_INTERPRET says; ``m`` is not specialized on, like geglu_linear_kernel's n_tokens.
TEST_KERNEL = JITFunction(_signature_of_the_test_kernel, do_not_specialize=["m"])

BACKENDS = {"cuda": GPUTarget("cuda", 90, 32), "rocm": GPUTarget("hip", "gfx942", 64)}


def _argument_sets():
    small = torch.empty(256, dtype=torch.bfloat16)
    over_2gib = torch.empty(2**31 + 64, dtype=torch.bfloat16, device="meta")  # ROCm: no 32-bit buffer offsets
    return {
        "aligned": (small, small, 4096, 7, 2048),
        "misaligned": (small[1:], small.half(), 4095, 16, 2048),
        "ones": (small, small, 1, 1, 1),
        "int64": (small, small, 2**31 + 16, 2**31 + 16, -3),
        "over 2 GiB": (over_2gib, small, 4096, 7, 2048),
    }


@pytest.mark.parametrize("backend_name", BACKENDS)
def test_the_key_is_what_triton_specializes_on(launcher_module, backend_name):
    backend = make_backend(BACKENDS[backend_name])
    binder = create_function_from_signature(TEST_KERNEL.signature, TEST_KERNEL.params, backend)
    flags = launcher_module.parameter_flags(TEST_KERNEL)
    for name, args in _argument_sets().items():
        specs = binder(*args, BLOCK=16)[1]
        tritons = [spec for spec, param in zip(specs, TEST_KERNEL.params) if not param.is_constexpr]
        assert list(launcher_module.specialization_key(backend, args, flags)) == tritons, name


def test_rocm_keys_a_tensor_over_2_gib_apart(launcher_module):
    """ROCm compiles 32-bit buffer offsets for tensors within 2 GiB: a larger one must not reuse that binary."""
    sets = _argument_sets()
    flags = launcher_module.parameter_flags(TEST_KERNEL)
    keys = {
        name: [launcher_module.specialization_key(make_backend(target), sets[case], flags) for case in ("aligned", "over 2 GiB")]
        for name, target in BACKENDS.items()
    }
    assert keys["cuda"][0] == keys["cuda"][1]
    assert keys["rocm"][0] != keys["rocm"][1]


def _tensors_to_key():
    """Tensors of every dtype the kernels take, at aligned and unaligned addresses, of two storages and sizes."""
    tensors = []
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        for storage in (torch.empty(256, dtype=dtype), torch.empty(4096, dtype=dtype)):
            tensors += [storage, storage[1:], storage[8:], storage[16:].view(2, -1)]
    tensors.append(torch.empty(2**31 + 64, dtype=torch.bfloat16, device="meta"))  # ROCm keys its size apart
    return tensors


def test_tensor_keys_separate_every_case_triton_separates(launcher_module):
    """Two tensors with one ``tensor_key`` get one key from Triton's own specialization, for any parameter flags.

    On CUDA (native tensor specialization) the key is read from dtypes and addresses; this fails if the
    installed Triton's native specialization starts reading anything else of a tensor. (ROCm has none:
    there ``tensor_key`` is Triton's own key, and the next test checks that it takes that path.)
    """
    backend = make_backend(BACKENDS["cuda"])
    tensors = _tensors_to_key()
    for flags in [(False, True, True), (True, True, True), (False, True, False), (False, False, True)]:
        keys = {}
        for tensor in tensors:
            ours = launcher_module.tensor_key(backend, True, (tensor,), (flags,))[1]
            keys.setdefault(ours, set()).add(launcher_module.specialization_key(backend, (tensor,), (flags,)))
        assert all(len(tritons) == 1 for tritons in keys.values()), (flags, keys)
    assert backend.supports_native_tensor_specialization


def test_rocm_tensor_keys_are_tritons_own(launcher_module, monkeypatch):
    """Without native tensor specialization (ROCm) every tensor is keyed by Triton's specialization, which
    keeps the 2 GiB bit that the CUDA shortcut would drop."""
    backend = make_backend(BACKENDS["rocm"])
    assert not backend.supports_native_tensor_specialization
    asked = []
    monkeypatch.setattr(launcher_module, "specialization_key", lambda *args: asked.append(args) or ("triton's key",))
    tensor = torch.empty(2**31 + 64, dtype=torch.bfloat16, device="meta")
    flags = ((False, True, True),)
    assert launcher_module.tensor_key(backend, False, (tensor,), flags)[1] == ("triton's key",)
    assert asked == [(backend, (tensor,), flags)]


def test_a_tensor_passed_again_is_keyed_as_if_read_again(launcher_module):
    """The launches pass one tensor in several slots (a missing bias's): read once, it gets the addresses and
    the key that reading it in every slot gives."""
    backend = make_backend(BACKENDS["cuda"])
    storage = torch.empty(4096, dtype=torch.float16)
    first, second, third = storage[8:], storage[1:].float(), storage
    flags = ((False, True, True),) * 6
    for tensors in [(first, first, second, third, third, third), (first, second, first, second, third, first)]:
        pointers = [t.data_ptr() for t in tensors]
        read_in_every_slot = (tuple(t.dtype for t in tensors), tuple(address % 16 == 0 for address in pointers))
        assert launcher_module.tensor_key(backend, True, tensors, flags) == (pointers, read_in_every_slot)


def test_launches_remembered_by_their_arguments_are_bounded(launcher_module, monkeypatch):
    """Past MAX_LAUNCH_KEYS argument sets the launcher forgets them and starts over, and still launches directly."""
    monkeypatch.setattr(launcher_module, "MAX_LAUNCH_KEYS", 2)
    jit, launch = _direct_launcher(launcher_module)
    buffer = torch.empty(64)
    sizes = [32, 48, 64, 80, 96]  # one specialization: divisible by 16
    for size in sizes:
        launch((1, 1, 1), (buffer,), (size,), _options(launcher_module))
    assert len(jit.dispatches) == 1 and 1 <= len(launch._launches) <= 2
    assert [args[1] for _, args, *_ in jit.direct_launches] == sizes[1:]


# --- the version and backend gate ---------------------------------------------------------------------


def test_the_gate_admits_only_releases_whose_dispatch_the_launcher_repeats(launcher_module):
    """Fails when the gate admits the installed Triton but its dispatch no longer ends as the direct path does.

    What the direct path relies on, read from the installed release: the dispatch specializes each
    argument with native_specialize_impl and launches with ``kernel.run(grid_0, grid_1, grid_2, stream,
    function, packed_metadata, launch_metadata, enter hook, exit hook, *bound arguments)``.
    """
    from triton.runtime import jit

    run = inspect.getsource(JITFunction.run)
    binder = inspect.getsource(jit.create_function_from_signature)
    repeats = (
        "kernel.run(grid_0, grid_1, grid_2, stream, kernel.function, kernel.packed_metadata, launch_metadata,"
        in run
        and "knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook, *bound_args.values())" in run
        and "specialize_impl(backend, {name}, {is_const}, {specialize}, {align})" in binder
        and "specialize_impl = native_specialize_impl" in binder
    )
    admitted = launcher_module._triton_version() in launcher_module.DIRECT_LAUNCH_TRITON
    assert admitted == repeats, (triton.__version__, admitted, repeats)


@pytest.mark.parametrize(
    "version, cuda, hip, interpreted, direct",
    [
        ("3.6.0", "12.8", None, False, True),
        ("3.9.0", None, "7.0", False, True),
        ("3.9.0", "12.8", None, True, False),  # interpreted
        ("3.5.1", "12.8", None, False, False),  # Python specialization: not checked
        ("3.10.0", "12.8", None, False, False),  # not read yet
        ("4.0.0", "12.8", None, False, False),
        ("3.9.0", None, None, False, False),  # XPU (or CPU) build of torch
    ],
)
def test_direct_launch_gate(launcher_module, monkeypatch, version, cuda, hip, interpreted, direct):
    monkeypatch.setattr(triton, "__version__", version)
    monkeypatch.setattr(torch.version, "cuda", cuda)
    monkeypatch.setattr(torch.version, "hip", hip)
    monkeypatch.setattr(launcher_module, "RUNS_INTERPRETED", interpreted)
    assert launcher_module.direct_launch_supported() is direct


def test_an_exit_hook_alone_gets_the_launch_metadata(launcher_module, monkeypatch):
    """With an empty enter chain and an exit hook, Triton's dispatch builds the launch metadata for the exit hook
    (it returns None only where the enter hook itself is None): so does the direct launch."""
    chains = types.SimpleNamespace(
        runtime=types.SimpleNamespace(launch_enter_hook=knobs.HookChain(), launch_exit_hook=knobs.HookChain())
    )
    exit_hook = lambda metadata: None  # noqa: E731 - a profiler registers one
    chains.runtime.launch_exit_hook.add(exit_hook)
    monkeypatch.setattr(launcher_module, "knobs", chains)
    jit, launch = _direct_launcher(launcher_module)
    buffer = torch.empty(64)
    for _ in range(2):
        launch((2, 1, 1), (buffer,), (32,), _options(launcher_module))
    assert jit.direct_launches[-1][3:] == (("metadata", (2, 1, 1)), None, chains.runtime.launch_exit_hook)


def test_rocm_launches_key_tensors_by_tritons_own_specialization(launcher_module, monkeypatch):
    """On ROCm (no native tensor specialization) every direct launch keys its tensors with Triton's own key,
    which keeps the 2 GiB bit that the CUDA shortcut would drop."""
    monkeypatch.setattr(launcher_module.driver.active, "get_current_target", lambda: GPUTarget("hip", "gfx942", 64))
    asked = []
    real_key = launcher_module.specialization_key
    monkeypatch.setattr(launcher_module, "specialization_key", lambda *args: asked.append(args[1]) or real_key(*args))
    jit, launch = _direct_launcher(launcher_module)
    buffer = torch.empty(64)
    for _ in range(3):
        launch((2, 1, 1), (buffer,), (32,), _options(launcher_module))
    assert not launch._native_tensor_keys
    assert [args[0] is buffer for args in asked if isinstance(args[0], torch.Tensor)] == [True] * 3
    assert len(jit.direct_launches) == 2


def test_empty_launch_hook_chains_are_not_called(launcher_module, monkeypatch):
    """Triton 3.6-3.9 hold launch hooks in HookChains: empty ones go as None, with no metadata built for them."""
    chains = types.SimpleNamespace(
        runtime=types.SimpleNamespace(launch_enter_hook=knobs.HookChain(), launch_exit_hook=knobs.HookChain())
    )
    monkeypatch.setattr(launcher_module, "knobs", chains)
    jit, launch = _direct_launcher(launcher_module)
    buffer = torch.empty(64)
    for _ in range(2):
        launch((2, 1, 1), (buffer,), (32,), _options(launcher_module))
    assert jit.direct_launches[-1][3:] == (None, None, None)
    hook = lambda metadata: None  # noqa: E731 - a profiler registers one
    chains.runtime.launch_enter_hook.add(hook)
    launch((2, 1, 1), (buffer,), (32,), _options(launcher_module))
    assert jit.direct_launches[-1][3:] == (("metadata", (2, 1, 1)), chains.runtime.launch_enter_hook, None)

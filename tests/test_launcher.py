"""The direct launcher: Triton's dispatch once per specialization, the compiled kernel's runner after.

A fake JIT function and driver stand in for Triton's (no GPU needed); on the
H200 the same code path runs for real under every kernel test and the bench.
"""

from __future__ import annotations

import types

import pytest
import torch


class FakeCompiledKernel:
    """What ``kernel[grid](...)`` returns: its runner records each direct launch."""

    def __init__(self, launches: list) -> None:
        self.launches = launches

    def __getitem__(self, grid):
        def runner(*args, stream=None):
            self.launches.append((grid, args, stream))

        return runner


class FakeJITFunction:
    """A ``@triton.jit`` kernel(ptr, n, BLOCK: constexpr, FLAG: constexpr) that records Triton-dispatched calls."""

    arg_names = ["ptr", "n", "BLOCK", "FLAG"]

    def __init__(self) -> None:
        self.dispatches: list = []
        self.direct_launches: list = []

    def __getitem__(self, grid):
        def dispatch(*args, **constexprs_and_options):
            self.dispatches.append((grid, args, constexprs_and_options))
            return FakeCompiledKernel(self.direct_launches)

        return dispatch


STREAM = 0xC0FFEE


@pytest.fixture
def launcher_module(kernel, monkeypatch):
    module = kernel.triton_launcher
    device = types.SimpleNamespace(get_current_device=lambda: 0, get_current_stream=lambda index: STREAM)
    monkeypatch.setattr(module, "driver", types.SimpleNamespace(active=device))
    return module


def _direct_launcher(module):
    jit = FakeJITFunction()
    launcher = module.Launcher(jit)
    launcher.direct = True  # as on a GPU with a supported Triton
    return jit, launcher


def test_second_call_launches_the_compiled_kernel_directly(launcher_module):
    jit, launch = _direct_launcher(launcher_module)
    buffer = torch.empty(64)
    launch((4,), (buffer, 32), BLOCK=16, FLAG=True, num_warps=4)
    launch((8,), (buffer, 48), BLOCK=16, FLAG=True, num_warps=4)
    assert [d[0] for d in jit.dispatches] == [(4,)]
    # Every bound argument, constexprs included, in signature order; the grid as three axes.
    assert jit.direct_launches == [((8, 1, 1), (buffer, 48, 16, True), STREAM)]


@pytest.mark.parametrize(
    "changed_args, changed_options",
    [
        (lambda b: (b[1:], 32), {}),  # address no longer 16-byte aligned
        (lambda b: (b.half(), 32), {}),  # another dtype
        (lambda b: (b, 33), {}),  # not divisible by 16
        (lambda b: (b, 1), {}),  # equal to 1
        (lambda b: (b, 2**31 + 16), {}),  # past int32
        (lambda b: (b, 32), {"BLOCK": 32}),  # another constexpr
        (lambda b: (b, 32), {"num_warps": 8}),  # another launch option
    ],
    ids=["alignment", "dtype", "divisibility", "one", "int64", "constexpr", "num_warps"],
)
def test_a_new_specialization_goes_through_triton(launcher_module, changed_args, changed_options):
    jit, launch = _direct_launcher(launcher_module)
    buffer = torch.empty(64)
    options = {"BLOCK": 16, "FLAG": True, "num_warps": 4}
    launch((4,), (buffer, 32), **options)
    launch((4,), changed_args(buffer), **{**options, **changed_options})
    assert len(jit.dispatches) == 2 and jit.direct_launches == []


def test_without_direct_launch_every_call_goes_through_triton(launcher_module):
    jit = FakeJITFunction()
    launch = launcher_module.Launcher(jit)
    launch.direct = False
    buffer = torch.empty(8)
    for _ in range(3):
        launch((1,), (buffer, 8), BLOCK=8, FLAG=False)
    assert len(jit.dispatches) == 3 and jit.direct_launches == []


def test_interpreted_kernels_never_launch_directly(launcher_module, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert not launcher_module.direct_launch_supported()

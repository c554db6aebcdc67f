"""fused-geglu benchmarks for ``kernels benchmark`` (on a download of the version branch: see the card).

Three benchmarks, one per API: ``geglu(gate, up)``, ``geglu_concat(x)`` and the
``kernels-community/activation`` drop-ins ``gelu_and_mul(out, x)`` /
``gelu_tanh_and_mul(out, x)``. Each has one workload per size and GELU form,
named ``<form>_<size>`` (``tanh_prefill``, ``exact_decode``, ...). A workload
times one forward call of the loaded kernel; its ``verify_`` returns eager
PyTorch's ``F.gelu(gate, approximate) * up`` on the same inputs, which the
runner both times (its reference time) and compares with the kernel's output.

The runner compares with ``torch.allclose(out, ref, atol=1e-2)``. The kernel
rounds like eager, so outputs match eager's bit for bit but for rare one-ulp
differences; in bfloat16 one ulp exceeds 1e-2 for |out| >= 2, in float16 not
below 16, so the workloads run in float16 (as kernels-community/activation's do).

On a CPU (a CPU-only runner, or the tests of this repository under Triton's
interpreter) every size shrinks to a smoke size: at most 4 tokens and
1/128 of the width (16384 -> 128, 4231 -> 33, still odd). Only ``self.kernel``
and torch are used.
"""

import torch
import torch.nn.functional as F
from kernels.benchmark import Benchmark

DTYPE = torch.float16
#: Size name -> (tokens, intermediate): a decode step, a prefill, and an odd width.
SIZES = {"decode": (16, 16384), "prefill": (4096, 16384), "odd_width": (1024, 4231)}
#: Workload name prefix -> torch's name of the GELU form.
GELU_FORMS = {"tanh": "tanh", "exact": "none"}
CPU_MAX_TOKENS = 4
CPU_WIDTH_DIVISOR = 128


def _shape(device, size):
    tokens, intermediate = SIZES[size]
    if device == "cpu":
        return min(tokens, CPU_MAX_TOKENS), max(1, intermediate // CPU_WIDTH_DIVISOR)
    return tokens, intermediate


def _eager_geglu(gate, up, approximate):
    return F.gelu(gate, approximate=approximate) * up


def _with_workloads(cls):
    """Add ``setup_/benchmark_/verify_<form>_<size>`` for every size and GELU form to ``cls``.

    ``cls`` provides ``prepare(tokens, intermediate)`` (draw inputs into self),
    ``run()`` (one kernel call, result in ``self.out``) and ``reference()``.
    """
    for size in SIZES:
        for form, approximate in GELU_FORMS.items():
            name = f"{form}_{size}"

            def setup(self, size=size, approximate=approximate):
                self.approximate = approximate
                self.prepare(*_shape(self.device, size))

            setattr(cls, f"setup_{name}", setup)
            setattr(cls, f"benchmark_{name}", lambda self: self.run())
            setattr(cls, f"verify_{name}", lambda self: self.reference())
    return cls


@_with_workloads
class GegluBenchmark(Benchmark):
    """``kernel.geglu(gate, up, approximate=...)``: gate and up as separate tensors."""

    seed = 0

    def prepare(self, tokens, intermediate):
        self.gate = torch.randn(tokens, intermediate, device=self.device, dtype=DTYPE)
        self.up = torch.randn(tokens, intermediate, device=self.device, dtype=DTYPE)

    def run(self):
        self.out = self.kernel.geglu(self.gate, self.up, approximate=self.approximate)

    def reference(self):
        return _eager_geglu(self.gate, self.up, self.approximate)


@_with_workloads
class GegluConcatBenchmark(Benchmark):
    """``kernel.geglu_concat(x, approximate=...)``: x = [gate | up], a fused gate_up projection."""

    seed = 0

    def prepare(self, tokens, intermediate):
        self.x = torch.randn(tokens, 2 * intermediate, device=self.device, dtype=DTYPE)

    def run(self):
        self.out = self.kernel.geglu_concat(self.x, approximate=self.approximate)

    def reference(self):
        gate, up = self.x.chunk(2, dim=-1)
        return _eager_geglu(gate, up, self.approximate)


@_with_workloads
class GeluAndMulBenchmark(Benchmark):
    """``gelu_and_mul(out, x)`` (exact) and ``gelu_tanh_and_mul(out, x)``: kernels-community/activation's API."""

    seed = 0

    def prepare(self, tokens, intermediate):
        self.x = torch.randn(tokens, 2 * intermediate, device=self.device, dtype=DTYPE)
        self.out = torch.empty(tokens, intermediate, device=self.device, dtype=DTYPE)

    def run(self):
        into = self.kernel.gelu_tanh_and_mul if self.approximate == "tanh" else self.kernel.gelu_and_mul
        into(self.out, self.x)

    def reference(self):
        gate, up = self.x.chunk(2, dim=-1)
        return _eager_geglu(gate, up, self.approximate)

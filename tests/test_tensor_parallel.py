"""Tensor parallelism: the kernelized GeGLUMLP on sharded weights, 2 processes over gloo.

The plan transformers' ``tp_plan`` uses for Gemma MLPs: ``gate_proj`` and
``up_proj`` column-wise (each rank holds a slice of the intermediate
dimension), ``down_proj`` row-wise (the matching slice of its input), and an
all-reduce of ``down_proj``'s partial outputs. GeGLU is elementwise over the
intermediate dimension, so the fused layer runs unchanged on each rank's
shard; only the all-reduce, which the plan places after ``down_proj``, joins
the ranks. Outputs and every gradient must match the unsharded MLP.
"""

from __future__ import annotations

import os
import socket
import sys
import types

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

WORLD_SIZE = 2
HIDDEN, INTERMEDIATE = 24, 2 * 36
REL_TOL = 1e-5


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class GemmaStyleMLP(torch.nn.Module):
    def __init__(self, hidden: int, intermediate: int, bias: bool):
        super().__init__()
        self.gate_proj = torch.nn.Linear(hidden, intermediate, bias=bias)
        self.up_proj = torch.nn.Linear(hidden, intermediate, bias=bias)
        self.down_proj = torch.nn.Linear(intermediate, hidden, bias=bias)
        self.act_fn = torch.nn.GELU(approximate="tanh")

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).norm() / b.norm()).item()


def _rank_main(rank: int, port: int, build_dir: str, bias: bool) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=WORLD_SIZE)
    try:
        from pathlib import Path

        from kernels import get_local_kernel

        kernel = get_local_kernel(Path(build_dir))
        torch.manual_seed(0)  # every rank builds the same full MLP and input
        full = GemmaStyleMLP(HIDDEN, INTERMEDIATE, bias)
        x = torch.randn(3, 5, HIDDEN, requires_grad=True)
        expected = full(x)
        expected.sum().backward()

        shard = INTERMEDIATE // WORLD_SIZE
        cols = slice(rank * shard, (rank + 1) * shard)
        local = GemmaStyleMLP(HIDDEN, shard, bias)
        with torch.no_grad():
            for name in ("gate_proj", "up_proj"):  # column-wise: output features
                getattr(local, name).weight.copy_(getattr(full, name).weight[cols])
                if bias:
                    getattr(local, name).bias.copy_(getattr(full, name).bias[cols])
            local.down_proj.weight.copy_(full.down_proj.weight[:, cols])  # row-wise: input features
            if bias:  # the bias of a row-wise layer is added once, after the all-reduce
                local.down_proj.bias.copy_(full.down_proj.bias if rank == 0 else torch.zeros(HIDDEN))
        local.forward = types.MethodType(kernel.layers.GeGLUMLP.forward, local)

        x_local = x.detach().clone().requires_grad_()
        partial = local(x_local)
        out = partial.clone()
        dist.all_reduce(out)
        assert _rel(out, expected) <= REL_TOL, "sharded forward differs"

        # The all-reduce's backward hands every rank the full output gradient.
        partial.backward(torch.ones_like(partial))
        grad_x = x_local.grad.clone()
        dist.all_reduce(grad_x)  # the column-parallel input gradient is reduced too
        assert _rel(grad_x, x.grad) <= REL_TOL, "input gradient differs"
        for name in ("gate_proj", "up_proj"):
            assert _rel(getattr(local, name).weight.grad, getattr(full, name).weight.grad[cols]) <= REL_TOL, name
        assert _rel(local.down_proj.weight.grad, full.down_proj.weight.grad[:, cols]) <= REL_TOL
        if bias:
            for name in ("gate_proj", "up_proj"):
                assert _rel(getattr(local, name).bias.grad, getattr(full, name).bias.grad[cols]) <= REL_TOL, name
            # Every rank's down_proj bias sees the full output gradient; rank 0's is the one added.
            assert _rel(local.down_proj.bias.grad, full.down_proj.bias.grad) <= REL_TOL
    finally:
        dist.destroy_process_group()


@pytest.mark.skipif(sys.platform == "win32", reason="gloo over loopback")
@pytest.mark.parametrize("bias", [False, True])
def test_sharded_geglu_mlp_matches_the_unsharded_one(build_dir, bias):
    mp.start_processes(
        _rank_main, args=(_free_port(), str(build_dir), bias), nprocs=WORLD_SIZE, join=True, start_method="spawn"
    )

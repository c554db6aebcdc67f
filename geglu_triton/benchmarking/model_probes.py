"""What the whole-model probes of ``benchmarks/`` (``prefill_profile.py``, ``decode_probe.py``) share.

Their options (the kernel build, the output, the Gemma3 size, the device) and
the model they probe: a Gemma3 text model of that size with all its layers
and random weights, whose MLPs switch between eager's forward and ours
(kernelized), or other implementations, as ``bench --models`` switches them.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from . import model_grid
from .implementations import EAGER, OURS
from .model_implementations import ModelForwards


def probe_parser(description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--kernel-dir", type=Path, required=True, help="a build (python -m geglu_triton build)")
    parser.add_argument("--out", type=Path, required=True, help="the JSON file to write")
    parser.add_argument("--size", default="1b", choices=list(model_grid.GEMMA3_SIZES), help="Gemma3 size")
    parser.add_argument("--device", default="cuda", help="cpu runs it as a smoke test")
    return parser


def probe_model(
    args: argparse.Namespace, names: tuple[str, ...] = (EAGER, OURS)
) -> tuple[torch.nn.Module, ModelForwards, torch.device]:
    """The model of ``args.size`` on ``args.device``, its MLP forwards of the implementations ``names`` (names of
    ``model_implementations.BUILDERS``; eager's and ours unless given), and the device."""
    device = torch.device(args.device)
    size = model_grid.GEMMA3_SIZES[args.size]
    model = model_grid.build_model(size, size.layers, device)
    forwards = ModelForwards(
        model,
        names,
        kernel_dir=args.kernel_dir.resolve(),
        approximate=model_grid.APPROXIMATE,
        device=device,
        training=False,
    )
    return model, forwards, device

"""The machine a run measures, the libraries it ran with, and the kernel it loads.

The kernel is loaded as users load it: built into a directory with
``geglu_triton.build.build_variants`` and imported with
``kernels.get_local_kernel``, or taken from an existing build (``--kernel-dir``).
"""

from __future__ import annotations

import atexit
import datetime
import importlib.metadata
import platform
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import torch

from .. import REPO_ROOT, layout
from ..errors import UsageError, UserError, make_directory


def benchmark_device() -> torch.device:
    """The first CUDA (or ROCm) GPU when there is one, else the CPU."""
    return torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"CPU ({platform.processor() or platform.machine()})"


def device_slug(device: torch.device) -> str:
    """A file-name form of the device: ``nvidia-h200``, or ``cpu``."""
    if device.type != "cuda":
        return "cpu"
    return re.sub(r"[^a-z0-9]+", "-", device_name(device).lower()).strip("-")


def utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def default_results_dir(device: torch.device) -> Path:
    """``<UTC date>-<device slug>/`` in the current directory: a run never writes into the package's tree.

    Results that belong to the repository are written there on purpose, with
    ``--out benchmarks/results/<date>-<device>`` (or by running from ``benchmarks/results``).
    """
    return Path.cwd() / f"{utc_now():%Y-%m-%d}-{device_slug(device)}"


def output_directory(out: Path | None, kernel_dir: Path | None, device: torch.device) -> Path:
    """Where a benchmark writes (``--out``, else ``default_results_dir``), made and checked once the kernel is loaded,
    before any measurement.

    Never inside the build it measures (``--kernel-dir``): a results file in a
    variant is a file its digest does not record, and the build would fail
    every later check and load.
    """
    out_dir = out or default_results_dir(device)
    # --kernel-dir may name one variant (load_local_kernel takes it): of a build, which is then the one to keep
    # clear, or on its own, whose digests cover its own files only.
    build = None if kernel_dir is None else Path(kernel_dir).resolve()
    if build is not None and layout.is_one_variant(build):
        build = layout.build_of_variant(build) or build
    if build is not None and out_dir.resolve().is_relative_to(build):
        named = f"--out {out_dir}" if out else f"the default results directory {out_dir} (in the current directory)"
        raise UsageError(
            f"{named} is inside the build {build} (--kernel-dir {kernel_dir}): results written there would become "
            "files of the build, which then fails its digest check; choose another --out"
        )
    make_directory(out_dir, "the output directory")
    return out_dir


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def versions() -> dict[str, str | None]:
    """Versions of everything whose behaviour the numbers depend on (None: not installed)."""
    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "hip": getattr(torch.version, "hip", None),
        "triton": triton_version,
        "kernels": _version("kernels"),
        "liger_kernel": _version("liger_kernel") or _version("liger-kernel"),
        "transformers": _version("transformers"),
        "huggingface_hub": _version("huggingface_hub"),
    }


def kernel_path(kernel, device) -> str:
    """What runs a kernelized MLP on ``device``: compiled Triton kernels, the interpreted ones, or PyTorch."""
    if device.type != "cpu":
        return f"the Triton kernels, compiled for {device.type}"
    launcher = getattr(kernel, "triton_launcher", None)  # absent where triton is not installed
    if launcher is not None and launcher.RUNS_INTERPRETED:
        return "the Triton kernels under Triton's interpreter (TRITON_INTERPRET)"
    return "the PyTorch fallback (TRITON_INTERPRET=1 runs the Triton kernels on the CPU)"


def run_meta(device: torch.device, loaded: "LoadedKernel", timer_method: str, compile_backend: str) -> dict:
    """The results file's ``meta``: when, where, with which libraries and kernel build, timed how."""
    return {
        "date_utc": utc_now().isoformat(timespec="seconds"),
        "device": device.type,
        "device_name": device_name(device),
        "device_slug": device_slug(device),
        "device_properties": device_properties(device),
        "versions": versions(),
        "kernel": {
            "build_dir": str(loaded.build_dir),
            "module": loaded.module.__name__,
            "runs": kernel_path(loaded.module, device),
        },
        "argv": sys.argv,
        "timer": timer_method,
        "compile_backend": compile_backend,
        "complete": False,
        "elapsed_s": None,
    }


def device_properties(device: torch.device) -> dict:
    if device.type != "cuda":
        return {"type": "cpu"}
    props = torch.cuda.get_device_properties(device)
    return {
        "type": "cuda",
        "multiprocessors": props.multi_processor_count,
        "memory_bytes": props.total_memory,
        "l2_cache_bytes": getattr(props, "L2_cache_size", None),
        "capability": f"{props.major}.{props.minor}",
    }


@dataclass
class LoadedKernel:
    """The kernel module and the build directory it was loaded from.

    A temporary build (``load_kernel(None)``) stays on disk until ``close()`` or
    the process's exit, not until this object is collected: the module keeps
    reading its directory (lazy imports; the interpreter re-reads the Triton
    kernels' source), so a caller that keeps only ``.module`` must not lose it.
    """

    module: ModuleType
    build_dir: Path
    temporary: bool = False

    def close(self) -> None:
        if self.temporary:
            shutil.rmtree(self.build_dir, ignore_errors=True)
            self.temporary = False


def load_kernel(kernel_dir: Path | None) -> LoadedKernel:
    """The built kernel from ``kernel_dir``, or built from this checkout into a temporary directory."""
    from geglu_triton.buildinfo import TORCH_EXT_DIR
    from geglu_triton.models import KernelLoadError, load_local_kernel

    temporary = kernel_dir is None
    if temporary:
        from geglu_triton.build import build_variants

        kernel_dir = Path(tempfile.mkdtemp(prefix="fused-geglu-bench-build-"))
        atexit.register(shutil.rmtree, kernel_dir, ignore_errors=True)
        build_variants(kernel_dir)
    kernel_dir = Path(kernel_dir).resolve()
    # The kernel's sources (kernel-builder's layout, torch-ext/<package>), told without reading build.toml, which
    # a --kernel-dir build does not need.
    if not temporary and kernel_dir.is_relative_to((REPO_ROOT / TORCH_EXT_DIR).resolve()):
        raise UsageError(
            f"--kernel-dir {kernel_dir} is the kernel's source, not a build: build one with "
            "`python -m geglu_triton build --out DIR` and pass that DIR"
        )
    if not kernel_dir.is_dir():
        raise UsageError(
            f"--kernel-dir {kernel_dir} is not a directory (build one with `python -m geglu_triton build`)"
        )
    try:
        module = load_local_kernel(kernel_dir)
    except KernelLoadError as error:  # the user's --kernel-dir, or this checkout's own build
        if temporary:
            raise UserError(f"this checkout's build: {error}") from error
        raise UsageError(f"--kernel-dir: {error}") from error
    return LoadedKernel(module=module, build_dir=kernel_dir, temporary=temporary)

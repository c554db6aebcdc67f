"""Toolkit around the fused-geglu kernel: build, check, publish, a local Hub, bench, profile, demo."""

from pathlib import Path

__version__ = "0.1.0"

#: The repository root (the directory holding build.toml and torch-ext/).
REPO_ROOT = Path(__file__).resolve().parent.parent

"""scripts/pins_satisfied.py: when scripts/env.sh may skip pip (the installed versions match the pins)."""

from __future__ import annotations

import importlib.metadata
import runpy
import subprocess
import sys
from pathlib import Path

from geglu_triton import REPO_ROOT

SCRIPT = REPO_ROOT / "scripts" / "pins_satisfied.py"
pins = runpy.run_path(str(SCRIPT))


def requirements(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "requirements.txt"
    path.write_text("# pins\n" + "\n".join(lines) + "\n")
    return path


def test_pins_matching_the_installed_versions_are_met(tmp_path):
    kernels, pytest_version = importlib.metadata.version("kernels"), importlib.metadata.version("pytest")
    path = requirements(tmp_path, f"kernels=={kernels}", f"pytest=={pytest_version}  # the runner", "")
    assert pins["unmet_requirement"](path) is None


def test_a_different_or_missing_pin_is_unmet(tmp_path):
    assert pins["unmet_requirement"](requirements(tmp_path, "kernels==0.0.1")) == (
        f"kernels {importlib.metadata.version('kernels')} is installed, kernels==0.0.1 is pinned"
    )
    assert "is not installed" in pins["unmet_requirement"](requirements(tmp_path, "no-such-distribution==1.0"))


def test_the_project_must_be_an_editable_install_of_this_directory(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "no-such-distribution"\nversion = "1.0"\n')
    assert pins["unmet_editable_install"](tmp_path) == "no-such-distribution is not installed"


def test_the_script_names_the_first_unmet_pin_in_one_line(tmp_path):
    result = subprocess.run(
        [sys.executable, str(SCRIPT), str(requirements(tmp_path)), "0.0.1+cpu", str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 1
    assert result.stdout == f"torch {importlib.metadata.version('torch')} is installed, torch==0.0.1+cpu is pinned\n"

"""How tests start other Python processes: the running interpreter, with this process's import path.

On a GPU box the packages the image lacks travel as wheels installed under a
directory on ``PYTHONPATH`` (scripts/env.sh), and console scripts such as
``kernels`` or ``hf`` are not beside ``sys.executable``. So a child process
gets this checkout in front of the inherited ``PYTHONPATH`` (never in its
place), and a console script is run as ``sys.executable -c`` on the entry
point its distribution declares.
"""

from __future__ import annotations

import importlib.metadata
import os
import sys

from geglu_triton import REPO_ROOT


def child_env(**overrides: str) -> dict[str, str]:
    """This process's environment, this checkout first on PYTHONPATH, then ``overrides``."""
    inherited = os.environ.get("PYTHONPATH")
    python_path = os.pathsep.join([str(REPO_ROOT), *([inherited] if inherited else [])])
    return {**os.environ, "PYTHONPATH": python_path, **overrides}


def console_script(name: str) -> list[str]:
    """The command that runs console script ``name`` with this interpreter (no PATH lookup)."""
    (entry_point,) = importlib.metadata.entry_points(group="console_scripts", name=name)
    module, function = entry_point.value.split(":")
    return [sys.executable, "-c", f"import sys; from {module} import {function}; sys.exit({function}())"]

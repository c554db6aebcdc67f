"""Whether this interpreter already has what scripts/env.sh would install; exit 0 if so, 1 if not.

Usage: python scripts/pins_satisfied.py REQUIREMENTS TORCH_PIN PROJECT_DIR

- every requirement of REQUIREMENTS (read from the file, one per line, ``#``
  comments allowed) is installed at a version its specifier accepts;
- torch is installed at exactly TORCH_PIN (``2.13.0+cpu``: the CPU build);
- the project at PROJECT_DIR is installed in editable mode from that very
  directory, at the version its pyproject.toml declares.

The first unmet condition is printed, so that env.sh can say why it runs pip.
Needs only the standard library, plus ``packaging`` to read specifiers (a
requirement that cannot be checked counts as unmet).
"""

from __future__ import annotations

import importlib.metadata
import json
import re
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:
    tomllib = None


def _installed(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def unmet_requirement(requirements: Path) -> str | None:
    """The first line of ``requirements`` this interpreter does not satisfy, with why; None if all are."""
    try:
        from packaging.requirements import InvalidRequirement, Requirement
    except ImportError:
        return "packaging is not installed, so the pins cannot be checked"
    for raw in requirements.read_text(encoding="utf-8").splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            return f"{line!r} is not a plain requirement"
        if requirement.marker is not None and not requirement.marker.evaluate():
            continue
        installed = _installed(requirement.name)
        if installed is None:
            return f"{requirement.name} is not installed ({line})"
        if not requirement.specifier.contains(installed, prereleases=True):
            return f"{requirement.name} {installed} is installed, {line} is pinned"
    return None


def unmet_editable_install(project: Path) -> str | None:
    """Why the project is not installed in editable mode from ``project`` at its current version; None if it is."""
    pyproject = project / "pyproject.toml"
    if tomllib is None:
        return "Python < 3.11 cannot read pyproject.toml without tomli"
    declared = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    try:
        distribution = importlib.metadata.distribution(declared["name"])
    except importlib.metadata.PackageNotFoundError:
        return f"{declared['name']} is not installed"
    direct_url = json.loads(distribution.read_text("direct_url.json") or "{}")
    if not direct_url.get("dir_info", {}).get("editable"):
        return f"{declared['name']} is not an editable install"
    if direct_url.get("url") != project.resolve().as_uri():
        return f"{declared['name']} is installed from {direct_url.get('url')}, not from {project.resolve().as_uri()}"
    if distribution.version != declared["version"]:
        return f"{declared['name']} {distribution.version} is installed, pyproject.toml declares {declared['version']}"
    return None


def main(argv: list[str]) -> int:
    requirements, torch_pin, project = Path(argv[0]), argv[1], Path(argv[2])
    torch = _installed("torch")
    checks = (
        lambda: None if torch == torch_pin else f"torch {torch or '(none)'} is installed, torch=={torch_pin} is pinned",
        lambda: unmet_requirement(requirements),
        lambda: unmet_editable_install(project),
    )
    for check in checks:  # in order, up to the first unmet one
        reason = check()
        if reason is not None:
            print(re.sub(r"\s+", " ", reason))
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""What a build is made from: the kernel's build.toml and the git state of its source.

build.toml is parsed and validated by kernels-data (``kernels._rust.Build``),
exactly as kernel-builder does, so a file that kernel-builder would reject
(unknown keys, a bad name, an unknown backend, a malformed ``upstream`` or
``source`` URL) is rejected here too. The fields that ``Build`` does not
expose to Python (name, version, license, upstream, source, hub repo-id,
pyext, python-depends) are then read from the same file with tomllib.
The ``[torch-noarch]`` table is looked for first, with tomllib, so that a
source of another kind of kernel is told so rather than given the parser's
message about its framework enum.

Some fields are checked further than ``Build.open`` does, so that a mistake
fails the build with a message instead of giving a wrong one:

- ``backends`` lists at least one backend, each once;
- ``pyext`` lists extensions without dots, ``"py"`` among them (without it the
  package's modules, ``__init__.py`` first, would not be built);
- ``cuda_capabilities`` are compute capabilities in the forms kernel-builder
  writes and kernels' loader parses: ``"8.0"``, with an architecture-specific
  ``a`` or family-specific ``f`` suffix (``"9.0a"``, ``"10.0f"``), optionally
  ``+PTX`` (``"9.0+PTX"``); ``rocm_archs`` are ``gfx`` processor names without
  feature flags (``"gfx942"``, ``"gfx90a"``), the form kernels compares the
  device's name with. Neither list may be empty: leaving the key out is what
  means every architecture.

``python-depends`` entries are checked the way kernel-builder checks them at
build time, which ``Build.open`` does not: each name of ``[general]`` must be
one of the general dependencies of kernels' ``python_depends.json``, each name
of ``[general.<backend>]`` one of that backend's.

The source identity follows kernel-builder outside Nix: the unique id of the
ops namespace is the first 7 hex digits of the git tree of ``HEAD``, plus
``_dirty`` when tracked files have uncommitted changes (untracked files and
submodules do not count). The provenance records the ``HEAD`` commit and that
dirty flag.

Without a git revision (not a git repository, a repository without a commit,
or no git installed) kernel-builder falls back to a random id. We fall back to
a content id instead, so that a build stays reproducible: the first 7 hex
digits of a SHA-256 over build.toml and the package files, with ``nogit_`` in
front so it can never be mistaken for a tree id. Such a build has no kernel
provenance (its source revision is unknown): ``build`` warns about it and
``publish`` refuses it unless told otherwise.
"""

from __future__ import annotations

import hashlib
import importlib.resources
import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from kernels._rust import Build

if sys.version_info >= (3, 11):
    import tomllib
else:  # kernels depends on tomli before Python 3.11
    import tomli as tomllib

from . import layout
from .errors import UserError

BUILD_TOML = "build.toml"
#: The python-depends names kernels (and kernel-builder) know, shipped inside the kernels package.
PYTHON_DEPENDS_RESOURCE = ("kernels", "python_depends.json")
TORCH_EXT_DIR = "torch-ext"
NOARCH_TABLE = "torch-noarch"
DEFAULT_PYEXT = ("py", "pyi")
#: The extension of the package's modules, which ``pyext`` must include.
PYTHON_EXT = "py"
#: [torch-noarch] key -> (backend, pattern of an entry, what an entry is, examples).
ARCH_KEYS = {
    "cuda_capabilities": (
        "cuda",
        re.compile(r"[0-9]+\.[0-9]+[af]?(\+PTX)?"),
        "a CUDA compute capability",
        '"8.0", "9.0a", "10.0f", "9.0+PTX"',
    ),
    "rocm_archs": ("rocm", re.compile(r"gfx[0-9a-f]+"), "a ROCm processor name", '"gfx942", "gfx90a"'),
}
_SHORT_ID_LENGTH = 7


class ConfigError(UserError, ValueError):
    """build.toml is missing, invalid, or lacks a field the toolkit needs."""


@dataclass(frozen=True)
class KernelConfig:
    """The parts of build.toml that building and publishing use."""

    root: Path
    name: str  # kebab-case, as in build.toml and metadata.json: "fused-geglu"
    version: int
    license: str
    upstream: str | None  # [general] upstream: the kernel code's original repository
    source: str | None  # [general] source: the kernel-builder formatted source repository
    backends: tuple[str, ...]  # lower-case, in build.toml order: ("cpu", "cuda", ...)
    repo_id: str | None  # [general.hub] repo-id
    pyext: tuple[str, ...]  # extensions copied from the package, without dots
    python_depends: dict[str, tuple[str, ...]]  # backend -> [general] plus [general.<backend>] python-depends
    archs: dict[str, tuple[str, ...]]  # backend -> the archs [torch-noarch] restricts it to, if any

    @property
    def module_name(self) -> str:
        """The Python name of the kernel: dashes become underscores."""
        return self.name.replace("-", "_")

    @property
    def package_dir(self) -> Path:
        """The kernel's Python package in the source tree: ``torch-ext/<module>``."""
        return self.root / TORCH_EXT_DIR / self.module_name


@dataclass(frozen=True)
class GitState:
    """The git state of a working tree: its ``HEAD`` commit and tree, and whether tracked files changed."""

    commit: str
    tree: str
    dirty: bool


@dataclass(frozen=True)
class SourceIdentity:
    """What names a build of the source: the ops-namespace unique id and the kernel's git state."""

    unique_id: str
    git: GitState | None  # None outside a git repository


def known_python_depends() -> tuple[frozenset[str], dict[str, frozenset[str]]]:
    """The python-depends names kernels accepts: (general ones, backend -> that backend's own)."""
    package, resource = PYTHON_DEPENDS_RESOURCE
    known = json.loads(importlib.resources.files(package).joinpath(resource).read_text(encoding="utf-8"))
    return frozenset(known["general"]), {backend: frozenset(names) for backend, names in known["backends"].items()}


def _check_python_depends(toml_path: Path, general: dict, backends: tuple[str, ...]) -> None:
    """Reject a python-depends name kernels does not know, as kernel-builder does at build time."""
    general_known, backend_known = known_python_depends()
    tables = [("[general]", general.get("python-depends", []), general_known)]
    for backend in backends:
        names = general.get(backend, {}).get("python-depends", [])
        tables.append((f"[general.{backend}]", names, backend_known.get(backend, frozenset())))
    for table, names, known in tables:
        unknown = [name for name in names if name not in known]
        if unknown:
            accepted = ", ".join(sorted(known)) or "none"
            raise ConfigError(
                f"{toml_path}: unknown python-depends {unknown[0]!r} in {table}; kernels accepts there: {accepted} "
                "(others must be installed by the user, not declared)"
            )


def _check_backends(toml_path: Path, backends: tuple[str, ...]) -> None:
    """Reject an empty list (a build of no variant) and a backend listed twice, which Build.open accepts."""
    if not backends:
        raise ConfigError(f"{toml_path}: [general] backends is empty: list the backends to build, e.g. [\"cuda\", \"cpu\"]")
    repeated = sorted({backend for backend in backends if backends.count(backend) > 1})
    if repeated:
        raise ConfigError(f"{toml_path}: [general] backends lists {', '.join(map(repr, repeated))} more than once")


def _check_noarch(toml_path: Path, noarch: dict, backends: tuple[str, ...]) -> None:
    """Reject a ``pyext``, ``cuda_capabilities`` or ``rocm_archs`` that Build.open accepts but cannot build right."""
    pyext = noarch.get("pyext", DEFAULT_PYEXT)
    for ext in pyext:
        if not ext or "." in ext:
            raise ConfigError(
                f"{toml_path}: [{NOARCH_TABLE}] pyext entry {ext!r} is not an extension: write extensions without "
                f'dots, e.g. "{PYTHON_EXT}", "json"'
            )
    if PYTHON_EXT not in pyext:
        raise ConfigError(
            f'{toml_path}: [{NOARCH_TABLE}] pyext {list(pyext)} lacks "{PYTHON_EXT}": the package\'s Python modules '
            "would not be built"
        )
    for key, (backend, pattern, what, examples) in ARCH_KEYS.items():
        archs = noarch.get(key)
        if archs is None:
            continue
        if not archs:
            raise ConfigError(
                f"{toml_path}: [{NOARCH_TABLE}] {key} is empty; leave it out to support every architecture"
            )
        for arch in archs:
            if not pattern.fullmatch(arch):
                raise ConfigError(
                    f"{toml_path}: [{NOARCH_TABLE}] {key} entry {arch!r} is not {what} (e.g. {examples})"
                )
        if backend not in backends:
            raise ConfigError(
                f"{toml_path}: [{NOARCH_TABLE}] {key} is given, but {backend!r} is not in [general] backends: "
                "no variant would use it"
            )


def read_config(root: Path) -> KernelConfig:
    """Read and validate ``root/build.toml``; a ConfigError names what is wrong."""
    toml_path = root / BUILD_TOML
    if not toml_path.is_file():
        found = "not a file" if toml_path.exists() else "no build.toml"
        raise ConfigError(f"{toml_path}: {found} (is {root} a kernel source directory?)")
    try:
        with toml_path.open("rb") as f:
            raw = tomllib.load(f)
    except (OSError, ValueError) as err:  # unreadable, not UTF-8, not TOML
        raise ConfigError(f"{toml_path}: not a readable TOML file: {err}") from err
    if NOARCH_TABLE not in raw:
        raise ConfigError(f"{toml_path}: no [{NOARCH_TABLE}] table; this toolkit builds noarch (Triton) kernels only")
    try:
        build = Build.open(root)
    except ValueError as err:
        raise ConfigError(f"build.toml rejected by kernels-data: {err}") from err

    with_kernel_depends = [str(b) for b in build.general.backends if build.all_kernel_depends(b)]
    if with_kernel_depends:
        raise ConfigError(
            f"{toml_path}: kernel-depends (for {', '.join(with_kernel_depends)}) is not supported by this toolkit"
        )

    # Build.open has validated every field read below: present where required, well typed.
    general, noarch = raw["general"], raw[NOARCH_TABLE]
    backends = tuple(str(backend) for backend in build.general.backends)
    _check_backends(toml_path, backends)
    _check_noarch(toml_path, noarch, backends)
    _check_python_depends(toml_path, general, backends)
    return KernelConfig(
        root=root,
        name=general["name"],
        version=general["version"],
        license=general["license"],
        upstream=general.get("upstream"),
        source=general.get("source"),
        backends=backends,
        repo_id=general.get("hub", {}).get("repo-id"),
        pyext=tuple(noarch.get("pyext", DEFAULT_PYEXT)),
        python_depends={
            backend: tuple(general.get("python-depends", []))
            + tuple(general.get(backend, {}).get("python-depends", []))
            for backend in backends
        },
        archs={backend: tuple(noarch[key]) for key, (backend, *_) in ARCH_KEYS.items() if key in noarch},
    )


def _git(root: Path, *args: str) -> str:
    result = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True)
    return result.stdout.strip()


def git_state(root: Path) -> GitState | None:
    """The git state of the repository containing ``root``; None without a revision to name.

    None when ``root`` is not in a git work tree, when the repository has no
    commit yet, or when git is not installed. Raises RuntimeError when git
    fails on a repository that has a ``HEAD`` commit (a corrupt one).
    """
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--verify", "--quiet", "HEAD"], capture_output=True, text=True
        )
    except FileNotFoundError:
        return None
    if head.returncode != 0:
        return None
    try:
        tree = _git(root, "rev-parse", "HEAD^{tree}")
        status = _git(root, "status", "--porcelain", "--untracked-files=no", "--ignore-submodules=all")
    except subprocess.CalledProcessError as err:
        raise RuntimeError(f"git failed in {root}: {err.stderr.strip() or err}") from err
    return GitState(commit=head.stdout.strip(), tree=tree, dirty=bool(status))


def _content_id(config: KernelConfig) -> str:
    """The no-git fallback id: a hash over build.toml and the package files, names included."""
    digest = hashlib.sha256((config.root / BUILD_TOML).read_bytes())
    for relpath in layout.package_source_files(config.package_dir, config.pyext):
        digest.update(relpath.encode() + b"\0" + (config.package_dir / relpath).read_bytes())
    return "nogit_" + digest.hexdigest()[:_SHORT_ID_LENGTH]


def source_identity(config: KernelConfig) -> SourceIdentity:
    """The unique id and git state of the kernel source (see the module docstring)."""
    git = git_state(config.root)
    if git is None:
        return SourceIdentity(unique_id=_content_id(config), git=None)
    unique_id = git.tree[:_SHORT_ID_LENGTH] + ("_dirty" if git.dirty else "")
    return SourceIdentity(unique_id=unique_id, git=git)

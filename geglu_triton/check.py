"""``python -m geglu_triton check [DIR]``: validate a build the way kernel-builder's hooks do.

What is checked, per variant directory of the build:

- layout: one ``torch-<backend>`` directory for each backend of build.toml and
  no other directory; each has a flat ``__init__.py`` and the generated
  ``_ops.py``; no bytecode (``__pycache__``, ``*.pyc``) and no symbolic link
  (a broken one is named as such): kernel-builder's output never holds any
  (see ``layout``);
- metadata.json: kernels-data parses it; it has a ``kernels-minver``; ``name``,
  ``version``, ``upstream`` and ``source`` are those of build.toml;
  ``backend.type`` is the backend the directory is named for; ``id`` is the
  namespace that the variant's ``_ops.py`` gives that backend;
- digest: kernels-data's ``Digest.hash_variant`` of the files validates
  against the digest metadata.json records;
- op registrations: kernel-builder's torch-ops check, exactly: every ``.py``
  file is UTF-8 text (as the check reads it) and valid Python, and in each, a
  decorator of a top-level function or class that is a call with at least one
  positional argument, to a function named (bare or as the last
  attribute: ``torch.library.custom_op``, ``op.register_fake``) ``custom_op``,
  ``triton_op``, ``register_kernel``, ``register_fake``, ``register_vmap`` or
  ``register_torch_dispatch``, must take a call to ``add_op_namespace_prefix``
  (bare or as an attribute) as its first argument. Decorators without a call
  (``@op.register_fake``) name no op, and are not checked;
- import: ``kernels.get_local_kernel(<build>)`` imports it, in a subprocess so
  that a broken build cannot disturb the caller. kernels picks the variant of
  this machine's torch (``torch-cpu`` on a CPU-only torch). It runs last, and
  only when everything else passed: a build with static violations would only
  add a traceback to the report.
"""

from __future__ import annotations

import argparse
import ast
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from kernels._rust import Digest, DigestValidationError, Metadata

from . import REPO_ROOT, layout
from .buildinfo import KernelConfig, read_config
from .ops_module import op_namespace, read_ops_identity
from .errors import UsageError, directory_to_read

OP_REGISTRATION_DECORATORS = frozenset(
    {"custom_op", "triton_op", "register_kernel", "register_fake", "register_vmap", "register_torch_dispatch"}
)
NAMESPACE_PREFIX_FUNCTION = "add_op_namespace_prefix"
IMPORT_TIMEOUT_S = 300
_IMPORT_REPORT_LINES = 15


@dataclass(frozen=True)
class Violation:
    """One way a build fails a check: which check, where (relative to the build directory), and what."""

    check: str  # "layout", "metadata", "digest", "ops", "import"
    where: str
    message: str

    def __str__(self) -> str:
        return f"[{self.check}] {self.where}: {self.message}"


def _called_name(call: ast.Call) -> str | None:
    """The name a call calls: ``f`` for ``f(...)``, ``f`` for ``a.b.f(...)``."""
    if isinstance(call.func, ast.Name):
        return call.func.id
    if isinstance(call.func, ast.Attribute):
        return call.func.attr
    return None


def unprefixed_registrations(source: str, filename: str) -> list[tuple[int, str]]:
    """Top-level op registrations of a module whose op name is not ``add_op_namespace_prefix(...)``.

    Returns (line, description) pairs; raises SyntaxError for invalid Python.
    """
    kinds = {ast.FunctionDef: "function", ast.AsyncFunctionDef: "async function", ast.ClassDef: "class"}
    found = []
    for node in ast.parse(source, filename=filename).body:
        if type(node) not in kinds:
            continue
        for decorator in node.decorator_list:
            if not (
                isinstance(decorator, ast.Call)
                and decorator.args
                and _called_name(decorator) in OP_REGISTRATION_DECORATORS
            ):
                continue
            first = decorator.args[0]
            if not (isinstance(first, ast.Call) and _called_name(first) == NAMESPACE_PREFIX_FUNCTION):
                found.append(
                    (
                        decorator.lineno,
                        f"{kinds[type(node)]} {node.name}: @{_called_name(decorator)}(...) must take "
                        f"{NAMESPACE_PREFIX_FUNCTION}(...) as its first argument",
                    )
                )
    return found


def _check_layout(variant: Path, where: str) -> list[Violation]:
    violations = [
        Violation("layout", f"{where}/{required}", "missing")
        for required in (layout.INIT_FILE, layout.OPS_FILE)
        if not (variant / required).is_file()
    ]
    violations += [
        Violation("layout", f"{where}/{path}", "Python bytecode must not be part of a build")
        for path in layout.bytecode_paths(variant)
    ]
    for path in layout.symlinks(variant):
        target = os.readlink(variant / path)
        if (variant / path).exists():
            message = f"a symbolic link (to {target}); a build holds plain files"
        else:
            message = f"a broken symbolic link (to {target})"
        violations.append(Violation("layout", f"{where}/{path}", message))
    return violations


def _check_metadata(variant: Path, where: str, backend: str, config: KernelConfig) -> list[Violation]:
    metadata_path = variant / layout.METADATA_FILE
    try:
        metadata = Metadata.read_from_file(metadata_path)
    except ValueError as err:
        return [Violation("metadata", f"{where}/{layout.METADATA_FILE}", f"kernels-data cannot parse it: {err}")]
    except OSError as err:  # not allowed to read it
        return [Violation("metadata", f"{where}/{layout.METADATA_FILE}", f"kernels-data cannot read it: {err}")]

    def disagreement(field: str, found: object, expected: object, source: str) -> Violation:
        return Violation(
            "metadata", f"{where}/{layout.METADATA_FILE}", f"{field} is {found!r}, {source} says {expected!r}"
        )

    violations = []
    if str(metadata.name) != config.name:
        violations.append(disagreement("name", str(metadata.name), config.name, "build.toml"))
    if metadata.version != config.version:
        violations.append(disagreement("version", metadata.version, config.version, "build.toml"))
    if metadata.kernels_minver is None:
        violations.append(
            Violation("metadata", f"{where}/{layout.METADATA_FILE}", "no kernels-minver (kernel-builder writes it)")
        )
    from_build_toml = {"upstream": (metadata.upstream, config.upstream), "source": (metadata.source, config.source)}
    for field, (found, expected) in from_build_toml.items():
        if found != expected:
            violations.append(disagreement(field, found, expected, "build.toml"))
    if str(metadata.backend.backend_type) != backend:
        violations.append(
            disagreement("backend.type", str(metadata.backend.backend_type), backend, "the directory name")
        )
    if (variant / layout.OPS_FILE).is_file():
        try:
            module_name, unique_id = read_ops_identity(variant / layout.OPS_FILE)
        except UnicodeDecodeError:
            pass  # not UTF-8 text: the op-registration check reports it
        except ValueError as err:
            violations.append(Violation("layout", f"{where}/{layout.OPS_FILE}", str(err)))
        else:
            namespace = op_namespace(module_name, backend, unique_id)
            if metadata.id != namespace:
                violations.append(disagreement("id", metadata.id, namespace, f"{layout.OPS_FILE} (for {backend})"))

    return violations + digest_violations(variant, where, metadata)


def digest_violations(variant: Path, where: str, metadata: Metadata) -> list[Violation]:
    """Where the variant's files differ from what its metadata's digest records (edited after the build)."""
    if metadata.digest is None:
        return [Violation("digest", f"{where}/{layout.METADATA_FILE}", "no digest")]
    try:
        metadata.digest.validate(Digest.hash_variant(metadata.digest.algorithm, variant))
    except DigestValidationError as err:
        return [Violation("digest", where, str(v)) for v in err.violations]
    except OSError as err:  # a link it cannot follow (the layout check reports it), a file it may not read
        return [Violation("digest", where, f"kernels-data cannot hash the files: {err}")]
    return []


def _check_op_registrations(variant: Path, where: str) -> list[Violation]:
    violations = []
    for relpath in layout.shipped_files(variant):
        if not layout.is_python_module(relpath):
            continue
        try:
            source = layout.read_python_module(variant / relpath)
        except ValueError as err:
            violations.append(Violation("ops", f"{where}/{relpath}", str(err)))
            continue
        try:
            found = unprefixed_registrations(source, relpath)
        except SyntaxError as err:
            violations.append(Violation("ops", f"{where}/{relpath}", f"not valid Python: {err}"))
            continue
        violations += [Violation("ops", f"{where}/{relpath}:{line}", message) for line, message in found]
    return violations


def check_import(build_dir: Path) -> list[Violation]:
    """Import the build with ``kernels.get_local_kernel`` in a fresh interpreter."""
    script = "import sys; from pathlib import Path; import kernels; kernels.get_local_kernel(Path(sys.argv[1]))"
    # No bytecode: the import must leave the build as it found it.
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    try:
        result = subprocess.run(
            [sys.executable, "-c", script, str(build_dir)],
            capture_output=True,
            text=True,
            env=env,
            timeout=IMPORT_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return [Violation("import", ".", f"kernels.get_local_kernel did not return within {IMPORT_TIMEOUT_S} s")]
    if result.returncode == 0:
        return []
    tail = "\n    ".join(result.stderr.strip().splitlines()[-_IMPORT_REPORT_LINES:])
    return [Violation("import", ".", f"kernels.get_local_kernel fails (exit {result.returncode}):\n    {tail}")]


def check_build(build_dir: Path, *, source_root: Path = REPO_ROOT, import_check: bool = True) -> list[Violation]:
    """Every violation of the build in ``build_dir`` against the kernel source at ``source_root``.

    An empty list means the build passes. Raises ConfigError when the source's
    build.toml is unusable (there is then nothing to check against).
    """
    build_dir = Path(build_dir)
    config = read_config(Path(source_root))
    if not build_dir.is_dir():
        return [Violation("layout", str(build_dir), "not a directory" if build_dir.exists() else "no such directory")]

    expected = {layout.variant_dir_name(backend): backend for backend in config.backends}
    violations = [
        Violation("layout", entry.name, f"not a variant of a backend in build.toml ({', '.join(expected)})")
        for entry in sorted(build_dir.iterdir())
        if entry.is_dir() and entry.name not in expected
    ]
    for name, backend in expected.items():
        variant = build_dir / name
        if not (variant / layout.METADATA_FILE).is_file():
            violations.append(
                Violation("layout", name, f"missing: no variant with {layout.METADATA_FILE} for {backend}")
            )
            continue
        violations += _check_layout(variant, name)
        violations += _check_metadata(variant, name, backend, config)
        violations += _check_op_registrations(variant, name)

    if import_check and not violations:
        violations += check_import(build_dir)
    return violations


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "build_dir", nargs="?", type=directory_to_read, default=REPO_ROOT / "build", help="the build (default: build/)"
    )


def run(args: argparse.Namespace) -> int:
    variant_given = layout.variant_given_for_build(args.build_dir, "check")
    if variant_given:
        raise UsageError(variant_given)
    violations = check_build(args.build_dir)
    if not violations:
        print(f"{args.build_dir}: the build passes every check")
        return 0
    print(f"{args.build_dir}: {len(violations)} violation(s)")
    for violation in violations:
        print(f"  {violation}")
    return 1

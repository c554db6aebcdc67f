"""``python -m geglu_triton build``: the prebuilt variants of the noarch (Triton) kernel.

Produces what kernel-builder's noarch build produces, for each backend of
build.toml, in ``<out>/torch-<backend>/``:

- the package files of ``torch-ext/<module>/`` (build.toml's ``pyext``
  extensions, ``py`` and ``pyi`` by default), flat, subdirectories kept,
  bytecode never (see ``layout.package_source_files``);
- the generated ``_ops.py`` (see ``ops_module``);
- ``metadata.json``, with the op namespace of the backend as ``id`` and the
  digest of the files above.

The source must pass kernel-builder's layout hook first: ``torch-ext/<module>/__init__.py``
exists and ``torch-ext/<module>/<module>`` does not. Its Python modules must be
UTF-8 text: kernel-builder's hooks read them so, and ``check`` would reject a
build with another (see ``layout``).

The same source gives the same bytes: files are copied verbatim, JSON is
written with sorted keys, and nothing depends on time or on the machine. Each
variant directory is emptied before it is written, and variant directories of
backends no longer in build.toml are removed, so no stale file survives.
Each metadata.json is read back with kernels-data and its digest validated
against the files on disk before the build counts as done.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from kernels._rust import Digest, DigestAlgorithm, DigestValidationError, Metadata

from . import REPO_ROOT, __version__, layout
from .buildinfo import KernelConfig, SourceIdentity, git_state, read_config, source_identity
from .errors import UserError, check_not_dangling, directory_to_write, file_error
from .ops_module import op_namespace, render_ops_module

#: How our builds name their builder in metadata.json's provenance: this toolkit, not kernel-builder.
BUILDER_VERSION = f"geglu-triton {__version__}"
#: metadata.json's ``kernels-minver``: the oldest kernels release that loads the build. kernel-builder
#: derives it from the features a build uses: 0.14.0 (its KERNELS_VERSION_BASELINE), 0.17.0 with
#: kernel-depends, which this toolkit refuses (buildinfo.read_config).
KERNELS_MINVER = "0.14.0"


class BuildError(UserError):
    """The source cannot be built, or the build does not validate; the message says why."""


def check_source_layout(config: KernelConfig) -> None:
    """kernel-builder's layout hook on the kernel package; raises BuildError when it fails."""
    package = config.package_dir
    if not (package / layout.INIT_FILE).is_file():
        raise BuildError(f"{package}: the kernel package must contain {layout.INIT_FILE}")
    nested = package / config.module_name
    if nested.exists():
        raise BuildError(
            f"{nested}: the kernel package must not contain a {config.module_name!r} file or directory "
            "(the old nested layout); put its files directly in the package"
        )


def check_source_modules(config: KernelConfig, files: list[str]) -> None:
    """Refuse a broken symbolic link in the package and one to a directory (the build would leave their files out
    silently: a directory walk does not follow links), and a module of ``files`` (relative to the package) that
    is not UTF-8 text; raises BuildError."""
    for relpath in layout.symlinks(config.package_dir):
        path = config.package_dir / relpath
        if not path.exists():
            raise BuildError(f"{path}: a broken symbolic link; the build would leave it out")
        if path.is_dir():
            raise BuildError(f"{path}: a symbolic link to a directory; the build would leave its files out")
    for relpath in filter(layout.is_python_module, files):
        path = config.package_dir / relpath
        try:
            layout.read_python_module(path)
        except ValueError as err:
            raise BuildError(f"{path}: {err}; kernel-builder reads Python modules as UTF-8, save it so") from None


def write_json(path: Path, data: dict) -> None:
    """Write JSON the one deterministic way: sorted keys, two-space indent, final newline."""
    path.write_text(json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")


def _git_provenance(root: Path) -> dict:
    """``{"commit", "dirty"}`` of the repository at ``root``, or {} outside git."""
    git = git_state(root)
    return {} if git is None else {"commit": git.commit, "dirty": git.dirty}


def variant_metadata(
    config: KernelConfig, backend: str, identity: SourceIdentity, builder: dict, digest: dict[str, str]
) -> dict:
    """metadata.json of one variant, as kernel-builder's ``Metadata::for_backend`` fills it.

    ``python-depends`` lists only what build.toml declares: Triton is not one
    of the names kernels accepts (python_depends.json); it comes with torch on
    the GPU backends, and the CPU variant runs without it. ``upstream`` and
    ``source`` appear when build.toml sets them, as kernel-builder writes them.
    """
    backend_info = {"type": backend}
    if backend in config.archs:
        backend_info["archs"] = list(config.archs[backend])
    provenance = {"kernel-builder": builder}
    if identity.git is not None:
        provenance["kernel"] = {"commit": identity.git.commit, "dirty": identity.git.dirty}
    optional = {key: value for key, value in (("upstream", config.upstream), ("source", config.source)) if value}
    return {
        "name": config.name,
        "id": op_namespace(config.module_name, backend, identity.unique_id),
        "version": config.version,
        "kernels-minver": KERNELS_MINVER,
        "license": config.license,
        **optional,
        "python-depends": list(config.python_depends[backend]),
        "kernel-depends": [],
        "backend": backend_info,
        "digest": {"algorithm": layout.DIGEST_ALGORITHM, "files": digest},
        "provenance": provenance,
    }


def validate_written_variant(variant: Path) -> Metadata:
    """Read a variant's metadata.json back with kernels-data and validate its digest against the files."""
    metadata_path = variant / layout.METADATA_FILE
    try:
        metadata = Metadata.read_from_file(metadata_path)
    except ValueError as err:
        raise BuildError(f"{metadata_path}: kernels-data cannot read what we wrote: {err}") from err
    try:
        metadata.digest.validate(Digest.hash_variant(DigestAlgorithm.SHA256, variant))
    except DigestValidationError as err:
        problems = "; ".join(str(v) for v in err.violations)
        raise BuildError(f"{variant}: the digest we wrote does not match the files: {problems}") from err
    return metadata


def _write_variant(variant: Path, config: KernelConfig, files: list[str], ops_source: str) -> None:
    if variant.exists():
        shutil.rmtree(variant)
    for relpath in files:
        target = variant / relpath
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(config.package_dir / relpath, target)
    (variant / layout.OPS_FILE).write_text(ops_source, encoding="utf-8")


def _remove_stale_variants(out_dir: Path, expected: set[str]) -> None:
    """Remove variant directories of backends that build.toml no longer lists."""
    for variant in layout.discover_variants(out_dir):
        if variant.name.startswith(layout.VARIANT_PREFIX) and variant.name not in expected:
            shutil.rmtree(variant)


def build_variants(out_dir: Path, source_root: Path = REPO_ROOT) -> list[Path]:
    """Build every backend variant of the kernel at ``source_root`` into ``out_dir``; returns their dirs.

    Raises ConfigError for a bad build.toml, BuildError for a source that
    fails kernel-builder's layout hook or a build that does not validate.
    """
    out_dir = Path(out_dir)
    config = read_config(Path(source_root))
    check_source_layout(config)
    identity = source_identity(config)
    builder = {"version": BUILDER_VERSION, **_git_provenance(REPO_ROOT)}
    files = layout.package_source_files(config.package_dir, config.pyext)
    check_source_modules(config, files)
    ops_source = render_ops_module(config.module_name, identity.unique_id)

    if out_dir.resolve().is_relative_to(config.package_dir.resolve()):  # the next build would package this one
        raise BuildError(f"the build cannot go inside the kernel's source {config.package_dir}: choose another --out")
    names = {backend: layout.variant_dir_name(backend) for backend in config.backends}
    variants = []
    check_not_dangling(out_dir, "--out")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        _remove_stale_variants(out_dir, set(names.values()))
        for backend, name in names.items():
            variant = out_dir / name
            _write_variant(variant, config, files, ops_source)
            metadata = variant_metadata(config, backend, identity, builder, layout.digest_files(variant))
            write_json(variant / layout.METADATA_FILE, metadata)
            validate_written_variant(variant)
            variants.append(variant)
    except OSError as err:  # not writable, not a directory, disk full
        raise BuildError(f"cannot write the build into {out_dir}: {file_error(err)}") from err
    return variants


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--out",
        type=directory_to_write,
        default=REPO_ROOT / "build",
        help="output directory (default: build/ in the repository)",
    )


def run(args: argparse.Namespace) -> int:
    variants = build_variants(args.out)
    for variant in variants:
        metadata = Metadata.read_from_file(variant / layout.METADATA_FILE)
        files = len(metadata.digest.files)
        print(f"  {variant.name:<12} id {metadata.id}  ({files} files)")
    provenance = metadata.provenance.kernel
    if provenance is None:
        print(
            "warning: no git revision for the source (not a git repository, no commit yet, or no git): the build "
            "has no source revision; `publish` refuses such a build unless --allow-dirty",
            file=sys.stderr,
        )
    elif provenance.dirty:
        print(
            "warning: built from uncommitted changes (the id ends in _dirty); `publish` refuses such a build "
            "unless --allow-dirty",
            file=sys.stderr,
        )
    print(f"built {metadata.name} version {metadata.version}: {len(variants)} variants in {args.out}")
    return 0

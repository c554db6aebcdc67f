"""The build (``geglu_triton.build``) and its checks (``geglu_triton.check``)."""

from __future__ import annotations

import compileall
import json
import re
import shutil
from pathlib import Path

import pytest
from huggingface_hub import HfApi
from kernel_sources import copy_kernel_source, git, redigest
from kernels._rust import Digest, DigestAlgorithm, Metadata

from geglu_triton import layout
from geglu_triton.build import KERNELS_MINVER, BuildError, build_variants
from geglu_triton.buildinfo import ConfigError, read_config
from geglu_triton.check import check_build
from geglu_triton.publish import PublishError, publish

BACKENDS = ("cpu", "cuda", "rocm", "xpu")


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    """A clean, committed copy of the kernel source."""
    return copy_kernel_source(tmp_path_factory.mktemp("source"))


@pytest.fixture(scope="module")
def good_build(source, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("good-build")
    build_variants(out, source)
    return out


@pytest.fixture
def broken(good_build, tmp_path) -> Path:
    """A copy of the good build, for a test to break."""
    return Path(shutil.copytree(good_build, tmp_path / "build"))


def metadata_of(variant: Path) -> Metadata:
    return Metadata.read_from_file(variant / layout.METADATA_FILE)


def test_every_backend_has_a_complete_variant(good_build, source):
    package = read_config(source).package_dir
    package_files = sorted(p.relative_to(package).as_posix() for p in package.rglob("*.py") if p.name != "_ops.py")
    assert sorted(p.name for p in good_build.iterdir()) == [f"torch-{b}" for b in BACKENDS]
    for backend in BACKENDS:
        variant = good_build / f"torch-{backend}"
        files = layout.shipped_files(variant)
        assert files == sorted([*package_files, "_ops.py", "metadata.json"])


def test_metadata_parses_with_kernels_data_and_names_the_backend_namespace(good_build):
    for backend in BACKENDS:
        metadata = metadata_of(good_build / f"torch-{backend}")
        assert str(metadata.name) == "fused-geglu"
        assert metadata.version == 1
        assert str(metadata.backend.backend_type) == backend
        assert metadata.id.startswith(f"_fused_geglu_{backend}_")
        assert metadata.python_depends == []
        assert metadata.provenance.kernel.dirty is False
        assert str(metadata.kernels_minver) == KERNELS_MINVER
        assert metadata.upstream is None and metadata.source is None  # build.toml sets neither


def test_digest_validates_against_the_files(good_build):
    for variant in layout.discover_variants(good_build):
        expected = metadata_of(variant).digest
        expected.validate(Digest.hash_variant(DigestAlgorithm.SHA256, variant))
        assert "metadata.json" not in expected.files


def test_the_same_source_builds_the_same_bytes(source, good_build, tmp_path):
    build_variants(tmp_path, source)
    for variant in layout.discover_variants(good_build):
        for relpath in layout.shipped_files(variant):
            assert (tmp_path / variant.name / relpath).read_bytes() == (variant / relpath).read_bytes(), relpath


def test_rebuilding_leaves_no_stale_file(source, tmp_path):
    build_variants(tmp_path, source)
    (tmp_path / "torch-cpu" / "stale.py").write_text("")
    (tmp_path / "torch-metal").mkdir()
    (tmp_path / "torch-metal" / "metadata.json").write_text("{}")
    build_variants(tmp_path, source)
    assert not (tmp_path / "torch-cpu" / "stale.py").exists()
    assert not (tmp_path / "torch-metal").exists()


def test_uncommitted_changes_to_tracked_files_make_the_id_dirty(tmp_path):
    source = copy_kernel_source(tmp_path / "source")
    (source / "untracked.txt").write_text("untracked files do not count\n")
    clean = metadata_of(build_variants(tmp_path / "clean", source)[0])
    assert not clean.id.endswith("_dirty")

    layers = source / "torch-ext" / "fused_geglu" / "layers.py"
    layers.write_text(layers.read_text() + "# an uncommitted change\n")
    dirty = metadata_of(build_variants(tmp_path / "dirty", source)[0])
    assert dirty.id == clean.id + "_dirty"
    assert dirty.provenance.kernel.dirty is True
    assert dirty.provenance.kernel.commit == clean.provenance.kernel.commit


def test_bytecode_in_the_source_never_reaches_the_build(tmp_path):
    source = copy_kernel_source(tmp_path / "source")
    package = source / "torch-ext" / "fused_geglu"
    assert compileall.compile_dir(package, quiet=1, force=True)  # what importing the package leaves behind
    (package / "stray.pyc").write_bytes(b"")
    build_variants(tmp_path / "build", source)
    assert layout.bytecode_paths(tmp_path / "build") == []


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda package: (package / "__init__.py").unlink(), "must contain __init__.py"),
        (lambda package: (package / "fused_geglu").mkdir(), "must not contain a 'fused_geglu'"),
    ],
    ids=["no __init__.py", "nested module directory"],
)
def test_the_layout_hook_refuses_a_bad_package(tmp_path, damage, message):
    source = copy_kernel_source(tmp_path / "source")
    damage(source / "torch-ext" / "fused_geglu")
    with pytest.raises(BuildError, match=message):
        build_variants(tmp_path / "build", source)


def test_check_passes_a_good_build_and_imports_it(good_build, source):
    assert check_build(good_build, source_root=source) == []
    assert layout.bytecode_paths(good_build) == []  # the import left no bytecode behind


def violations_of(build: Path, source: Path) -> list[str]:
    return [str(v) for v in check_build(build, source_root=source, import_check=False)]


def test_check_says_what_is_at_the_path_when_it_is_not_a_build_directory(tmp_path, source):
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    assert violations_of(a_file, source) == [f"[layout] {a_file}: not a directory"]
    assert violations_of(tmp_path / "missing", source) == [f"[layout] {tmp_path / 'missing'}: no such directory"]


def test_check_reports_a_wrong_digest(broken, source):
    (broken / "torch-cuda" / "ops.py").write_text("# changed after the build\n")
    assert any(
        v.startswith("[digest] torch-cuda: File hash mismatch for ops.py") for v in violations_of(broken, source)
    )


def test_check_reports_a_metadata_file_it_may_not_read(broken, source, monkeypatch):
    """kernels-data's OSError names no file, and was 'unexpected OSError' (a file without read permission: as
    root, which reads any file, the refusal is simulated)."""
    import geglu_triton.check as check_module

    class Unreadable:
        @staticmethod
        def read_from_file(path):
            raise OSError(f"Failed to open `{path}`: Permission denied (os error 13)")

    monkeypatch.setattr(check_module, "Metadata", Unreadable)
    assert any(
        v.startswith("[metadata] torch-cpu/metadata.json: kernels-data cannot read it: Failed to open")
        for v in violations_of(broken, source)
    )


def test_check_reports_a_missing_ops_module(broken, source):
    (broken / "torch-rocm" / "_ops.py").unlink()
    assert "[layout] torch-rocm/_ops.py: missing" in violations_of(broken, source)


def test_check_reports_a_registration_without_the_namespace_prefix(broken, source):
    init = broken / "torch-cpu" / "layers.py"
    init.write_text(
        init.read_text() + '\n\n@torch.library.custom_op("fused_geglu::rogue", mutates_args=())\n'
        "def rogue(x: torch.Tensor) -> torch.Tensor:\n    return x\n"
    )
    found = violations_of(broken, source)
    assert any(v.startswith("[ops] torch-cpu/layers.py:") and "function rogue: @custom_op(...)" in v for v in found), (
        found
    )


def test_check_reports_a_version_that_disagrees_with_build_toml(broken, source):
    path = broken / "torch-xpu" / "metadata.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "version": 2}))
    assert "[metadata] torch-xpu/metadata.json: version is 2, build.toml says 1" in violations_of(broken, source)


def test_check_reports_metadata_without_kernels_minver_or_with_another_upstream(broken, source):
    path = broken / "torch-cpu" / "metadata.json"
    metadata = {key: value for key, value in json.loads(path.read_text()).items() if key != "kernels-minver"}
    path.write_text(json.dumps({**metadata, "upstream": "https://github.com/example/elsewhere"}))
    messages = [v.message for v in check_build(broken, source_root=source, import_check=False)]
    assert "no kernels-minver (kernel-builder writes it)" in messages
    assert "upstream is 'https://github.com/example/elsewhere', build.toml says None" in messages


def test_check_reports_bytecode(broken, source):
    (broken / "torch-cpu" / "__pycache__").mkdir()
    assert "[layout] torch-cpu/__pycache__: Python bytecode must not be part of a build" in violations_of(
        broken, source
    )


def test_check_reports_an_id_that_is_not_the_ops_namespace(broken, source):
    path = broken / "torch-cpu" / "metadata.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "id": "_fused_geglu_cpu_0000000"}))
    assert any(
        v.startswith("[metadata] torch-cpu/metadata.json: id is '_fused_geglu_cpu_0000000'")
        for v in violations_of(broken, source)
    )


def test_check_reports_a_build_that_does_not_import(broken, source, tmp_path):
    # A broken package, with its digest made to match: only the import can tell.
    for variant in layout.discover_variants(broken):
        (variant / "__init__.py").write_text("raise ImportError('deliberately broken')\n")
        redigest(variant)
    [violation] = check_build(broken, source_root=source)
    assert violation.check == "import" and "deliberately broken" in violation.message


@pytest.mark.parametrize("has_repository", [False, True], ids=["no repository", "repository without a commit"])
def test_without_a_git_revision_the_id_is_a_content_hash(source, tmp_path, has_repository):
    plain = Path(shutil.copytree(source, tmp_path / "plain", ignore=shutil.ignore_patterns(".git")))
    if has_repository:
        git(plain, "init", "-q")
    first = metadata_of(build_variants(tmp_path / "first", plain)[0])
    again = metadata_of(build_variants(tmp_path / "again", plain)[0])
    assert first.id.startswith("_fused_geglu_cpu_nogit_") and first.id == again.id
    assert first.provenance.kernel is None


# --- metadata.json fields that build.toml controls ---------------------------------

UPSTREAM = "https://github.com/example/fused-geglu-upstream"
SOURCE = "https://github.com/example/fused-geglu"


def tiny_source(root: Path, general: str = "", tables: str = "") -> Path:
    """A minimal noarch kernel source (build.toml and an __init__.py) for metadata tests."""
    (root / "torch-ext" / "tiny_kernel").mkdir(parents=True)
    (root / "torch-ext" / "tiny_kernel" / "__init__.py").write_text("__all__ = []\n")
    (root / "build.toml").write_text(
        '[general]\nname = "tiny-kernel"\nversion = 1\nedition = 5\nlicense = "Apache-2.0"\n'
        f'backends = ["cpu", "cuda"]\n{general}\n{tables}\n[torch-noarch]\n'
    )
    return root


def test_upstream_and_source_are_written_when_set(tmp_path):
    source = tiny_source(tmp_path / "source", f'upstream = "{UPSTREAM}"\nsource = "{SOURCE}"')
    for variant in build_variants(tmp_path / "build", source):
        metadata = metadata_of(variant)
        assert (metadata.upstream, metadata.source) == (UPSTREAM, SOURCE)
        assert str(metadata.kernels_minver) == KERNELS_MINVER
        metadata.digest.validate(Digest.hash_variant(DigestAlgorithm.SHA256, variant))


def test_known_python_depends_go_to_their_backends(tmp_path):
    source = tiny_source(
        tmp_path / "source", 'python-depends = ["einops"]', '[general.cuda]\npython-depends = ["nvidia-cutlass-dsl"]\n'
    )
    build = tmp_path / "build"
    build_variants(build, source)
    assert metadata_of(build / "torch-cpu").python_depends == ["einops"]
    assert metadata_of(build / "torch-cuda").python_depends == ["einops", "nvidia-cutlass-dsl"]


@pytest.mark.parametrize(
    ("general", "tables", "message"),
    [
        ('python-depends = ["numpy"]', "", r"unknown python-depends 'numpy' in \[general\]; kernels accepts there: e"),
        ("", '[general.cuda]\npython-depends = ["einops"]\n', r"'einops' in \[general.cuda\]; .*nvidia-cutlass-dsl"),
    ],
)
def test_unknown_python_depends_are_refused_at_build_time(tmp_path, general, tables, message):
    source = tiny_source(tmp_path / "source", general, tables)
    with pytest.raises(ConfigError, match=message):
        build_variants(tmp_path / "build", source)
    assert not (tmp_path / "build").exists()


# --- files a build must not hold: check reports them, publish refuses them ---------


def not_utf8(name: str):
    def damage(variant: Path) -> None:
        (variant / name).write_bytes(b"# caf\xe9 in Latin-1\n")
        redigest(variant)

    return damage


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        (not_utf8("_ops.py"), "[ops] torch-cpu/_ops.py: not UTF-8 text (byte 0xe9 at offset 5)"),
        (not_utf8("extra.py"), "[ops] torch-cpu/extra.py: not UTF-8 text (byte 0xe9 at offset 5)"),
        (
            lambda variant: (variant / "dangling.py").symlink_to("nowhere.py"),
            "[layout] torch-cpu/dangling.py: a broken symbolic link (to nowhere.py)",
        ),
        (
            lambda variant: (variant / "alias.py").symlink_to("layers.py"),
            "[layout] torch-cpu/alias.py: a symbolic link (to layers.py); a build holds plain files",
        ),
    ],
    ids=["_ops.py not UTF-8", "a module not UTF-8", "broken symlink", "symlink"],
)
def test_check_reports_and_publish_refuses_a_file_a_build_must_not_hold(broken, source, damage, expected):
    damage(broken / "torch-cpu")
    found = violations_of(broken, source)
    assert found[0] == expected, found
    if "symbolic link" not in expected:
        assert found == [expected]
    with pytest.raises(PublishError, match=re.escape(f"it fails `check` ({expected}")):
        publish(broken, "org/fused-geglu", api=HfApi(endpoint="http://127.0.0.1:9"), source_root=source, dry_run=True)


@pytest.mark.parametrize("target", ["missing.py", "a directory"])
def test_build_refuses_a_symbolic_link_whose_files_it_would_leave_out(tmp_path, target):
    source = copy_kernel_source(tmp_path / "source")
    link = source / "torch-ext" / "fused_geglu" / "helpers"
    if target == "a directory":
        (tmp_path / "elsewhere").mkdir()
        (tmp_path / "elsewhere" / "helper.py").write_text("VALUE = 1\n")
        link.symlink_to(tmp_path / "elsewhere", target_is_directory=True)
        expected = "a symbolic link to a directory; the build would leave its files out"
    else:
        link.symlink_to(target)
        expected = "a broken symbolic link; the build would leave it out"
    with pytest.raises(BuildError, match=re.escape(f"{link}: {expected}")):
        build_variants(tmp_path / "build", source)
    assert not (tmp_path / "build").exists()


def test_build_refuses_a_module_that_is_not_utf8(tmp_path):
    source = copy_kernel_source(tmp_path / "source")
    module = source / "torch-ext" / "fused_geglu" / "latin1.py"
    module.write_bytes(b"# -*- coding: latin-1 -*-\n# caf\xe9\n")
    with pytest.raises(BuildError, match=re.escape(f"{module}: not UTF-8 text (byte 0xe9 at offset 31)")):
        build_variants(tmp_path / "build", source)
    assert not (tmp_path / "build").exists()


# --- build.toml mistakes that kernels-data accepts or reports unclearly -----------------


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda toml: toml.replace("[torch-noarch]\n", ""), r"no \[torch-noarch\] table; this toolkit builds noarch"),
        (lambda toml: toml + "[[[\n", "build.toml: not a readable TOML file: "),
        (lambda toml: toml + "pyext = []\n", r'pyext \[\] lacks "py": the package\'s Python modules would not'),
        (lambda toml: toml + 'pyext = ["json"]\n', r"pyext \['json'\] lacks \"py\""),
        (lambda toml: toml + 'pyext = [""]\n', "pyext entry '' is not an extension: write extensions without dots"),
        (lambda toml: toml + 'pyext = [".py"]\n', "pyext entry '.py' is not an extension"),
        (
            lambda toml: toml + 'cuda_capabilities = ["banana"]\n',
            r"cuda_capabilities entry 'banana' is not a CUDA compute capability \(e.g. \"8.0\", \"9.0a\"",
        ),
        (lambda toml: toml + 'cuda_capabilities = ["sm_90"]\n', "cuda_capabilities entry 'sm_90' is not a CUDA"),
        (lambda toml: toml + "cuda_capabilities = []\n", "cuda_capabilities is empty; leave it out"),
        (lambda toml: toml + 'rocm_archs = ["gfx90a:xnack-"]\n', "rocm_archs entry 'gfx90a:xnack-' is not a ROCm"),
        (
            lambda toml: toml.replace('"cpu", "cuda"]', '"cpu"]') + 'cuda_capabilities = ["9.0"]\n',
            "cuda_capabilities is given, but 'cuda' is not in \\[general\\] backends: no variant would use it",
        ),
        (
            lambda toml: toml.replace('backends = ["cpu", "cuda"]', 'backends = ["cuda", "cpu", "cuda"]'),
            r"\[general\] backends lists 'cuda' more than once",
        ),
        (
            lambda toml: toml.replace('backends = ["cpu", "cuda"]', "backends = []"),
            r"\[general\] backends is empty: list the backends to build",
        ),
    ],
    ids=[
        "no torch-noarch",
        "not TOML",
        "empty pyext",
        "pyext without py",
        "empty extension",
        "dotted extension",
        "bad capability",
        "sm capability",
        "empty capabilities",
        "rocm feature flags",
        "capabilities without the backend",
        "backend twice",
        "no backend",  # was 'unexpected UnboundLocalError', after deleting the variants already in --out
    ],
)
def test_build_toml_mistakes_are_refused_with_what_is_wrong(tmp_path, edit, message):
    source = tiny_source(tmp_path / "source")
    toml = source / "build.toml"
    toml.write_text(edit(toml.read_text()))
    with pytest.raises(ConfigError, match=message) as raised:
        build_variants(tmp_path / "build", source)
    assert str(raised.value).startswith(f"{toml}: ")
    assert not (tmp_path / "build").exists()


def test_a_build_toml_that_is_missing_or_not_a_file_is_named_as_such(tmp_path):
    source = tiny_source(tmp_path / "source")
    toml = source / "build.toml"
    toml.unlink()
    with pytest.raises(ConfigError, match=re.escape(f"{toml}: no build.toml (is {source} a kernel source directory?)")):
        read_config(source)
    toml.mkdir()  # was reported as missing too
    with pytest.raises(ConfigError, match=re.escape(f"{toml}: not a file (is {source} a kernel source directory?)")):
        read_config(source)


def test_a_build_inside_the_kernel_source_is_refused(tmp_path):
    """The first build succeeded, leaving variants in the package, which the next build packaged in turn."""
    source = tiny_source(tmp_path / "source")
    package = read_config(source).package_dir
    with pytest.raises(BuildError, match=re.escape(f"the build cannot go inside the kernel's source {package}")):
        build_variants(package / "build", source)
    assert not (package / "build").exists()


def test_every_capability_form_kernels_parses_reaches_the_metadata(tmp_path):
    source = tiny_source(tmp_path / "source")
    toml = source / "build.toml"
    toml.write_text(toml.read_text() + 'cuda_capabilities = ["8.0", "9.0a", "10.0f", "12.0+PTX"]\n')
    build_variants(tmp_path / "build", source)
    assert metadata_of(tmp_path / "build" / "torch-cuda").backend.archs == ["8.0", "9.0a", "10.0f", "12.0+PTX"]
    assert metadata_of(tmp_path / "build" / "torch-cpu").backend.archs is None


def test_an_out_that_is_a_dangling_symbolic_link_is_named(source, tmp_path):
    """mkdir said only "File exists" of a link to a directory that does not exist."""
    link = tmp_path / "out"
    link.symlink_to(tmp_path / "nowhere")
    from geglu_triton.errors import UserError

    with pytest.raises(UserError, match=re.escape(f"--out {link} is a symbolic link to {tmp_path / 'nowhere'}, which does not exist")):
        build_variants(link, source_root=source)


def test_a_full_device_is_reported_by_its_reason_not_by_the_file_copied():
    """A full disk during the build was blamed on the kernel source file being copied."""
    import errno

    from geglu_triton.errors import file_error

    full = OSError(errno.ENOSPC, "No space left on device", "/repo/torch-ext/fused_geglu/functional.py")
    assert file_error(full) == "No space left on device"
    copying = OSError(errno.ENOSPC, "No space left on device", "/repo/src.py", None, "/build/torch-cpu/src.py")
    assert file_error(copying) == "/build/torch-cpu/src.py: No space left on device"  # the destination, as shutil names it
    missing = OSError(errno.ENOENT, "No such file or directory", "/build/torch-cpu")
    assert file_error(missing) == "/build/torch-cpu: No such file or directory"

"""Temporary copies of this kernel's source, as fresh git repositories, for build and publish tests; builds
edited by a test.

A copy holds the checkout's current files (tracked and untracked, not ignored),
committed in a new repository: it is clean, whatever the state of the
checkout, and tests can change it (a version, a file) without touching the
checkout.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

from geglu_triton import REPO_ROOT, layout

_GIT_IDENTITY = ("-c", "user.name=tests", "-c", "user.email=tests@localhost")


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *_GIT_IDENTITY, "-C", str(repo), *args], capture_output=True, text=True, check=True
    ).stdout


def commit_all(repo: Path, message: str) -> None:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--allow-empty", "-m", message)


def set_version(repo: Path, version: int) -> None:
    """Rewrite ``version = N`` in the copy's build.toml."""
    toml = repo / "build.toml"
    toml.write_text(re.sub(r"(?m)^version = \d+$", f"version = {version}", toml.read_text(), count=1))


def copy_kernel_source(dest: Path, *, version: int | None = None, label: str | None = None) -> Path:
    """A committed copy of the source at ``dest``; with ``version``, its build.toml says that version.

    ``label`` is written to a ``SOURCE_LABEL`` file: copies with different
    labels have different git trees, hence different op namespaces, so that
    their builds can be loaded side by side in one process.
    """
    listed = git(REPO_ROOT, "ls-files", "-z", "--cached", "--others", "--exclude-standard").split("\0")
    for relpath in filter(None, listed):
        source = REPO_ROOT / relpath
        if source.is_file():
            (dest / relpath).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, dest / relpath)
    if version is not None:
        set_version(dest, version)
    if label is not None:
        (dest / "SOURCE_LABEL").write_text(label + "\n")
    git(dest, "init", "-q")
    commit_all(dest, "snapshot of the kernel source")
    return dest


def redigest(variant: Path) -> None:
    """Make a variant's recorded digest match its files again, after a test changed them."""
    path = variant / layout.METADATA_FILE
    data = json.loads(path.read_text())
    data["digest"]["files"] = layout.digest_files(variant)
    path.write_text(json.dumps(data))

"""What the card and README promise about the ``kernels`` command line, run against the local Hub.

- The card's benchmark commands (download the version branch as a kernel
  repository, then ``kernels benchmark ./<dir>``) run our benchmarks/benchmark.py.
- kernels 0.17.2's own ``kernels benchmark <repo> --version N`` cannot: it asks
  for a *model* repository, and the Hub (like the local one) answers 404 for a
  kernel repository there. Pinned, so that a kernels release that fixes it
  shows up here and the card can go back to the one-line command.
- The lockfile flow (``kernels lock``, ``kernels download``, ``load_kernel``)
  fails with kernels 0.17.2 and huggingface_hub 2.4: ``load_kernel`` asks the
  cache for the whole locked snapshot, ``kernels download`` fetched ``build/``
  only, and the version branch also holds ``.gitattributes`` (every Hub
  repository has one) and ``benchmarks/``. Pinned, with the workaround
  README gives: download the whole locked revision.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from huggingface_hub import HfApi
from huggingface_hub.errors import IncompleteSnapshotError, RepositoryNotFoundError
from kernels._rust import KernelLocks

from geglu_triton import REPO_ROOT
from geglu_triton.publish import publish
from child_process import console_script

REPO = "org/kernels-cli"


def kernels_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """The `kernels` command in a fresh interpreter, as a user runs it."""
    return subprocess.run([*console_script("kernels"), *args], cwd=cwd, capture_output=True, text=True, timeout=600)


def kernels_cli_here(monkeypatch, *args: str) -> None:
    """The `kernels` command's main() in this process (no interpreter start-up: seconds saved)."""
    from kernels.cli import main

    monkeypatch.setattr(sys, "argv", ["kernels", *args])
    main()


@pytest.fixture(scope="module")
def published(build_dir, hub) -> str:
    """This checkout's build and benchmark scripts, published as version 1 of REPO."""
    api = HfApi(endpoint=hub.endpoint, token=os.environ["HF_TOKEN"])
    publish(
        build_dir, REPO, api=api, source_root=REPO_ROOT, allow_dirty=True, import_check=False, echo=lambda _: None
    )
    return Path(api.hf_hub_download(REPO, "README.md", repo_type="kernel")).read_text()


def test_the_card_benchmark_commands_run_our_benchmarks(published, tmp_path):
    pytest.importorskip("tabulate", reason="`kernels benchmark` needs kernels[benchmark]: requirements-dev.txt")
    block = re.search(r"## Benchmarks\n.*?```bash\n(.*?)```", published, re.S).group(1)
    download, benchmark = [shlex.split(line) for line in block.strip().splitlines()]
    assert download[:2] == ["hf", "download"] and benchmark[:2] == ["kernels", "benchmark"]
    subprocess.run([*console_script("hf"), *download[1:]], cwd=tmp_path, check=True, capture_output=True, timeout=300)
    # The card's command, with the fewest timed calls.
    result = kernels_cli(*benchmark[1:], "--iterations", "1", "--warmup", "1", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    for workload in ("tanh_decode", "exact_odd_width"):  # kernels prints its report on stderr
        assert workload in result.stderr, result.stderr[-2000:]


def test_kernels_benchmark_by_repo_id_asks_for_a_model_repository(published, monkeypatch):
    """kernels 0.17.2 downloads `org/repo` with repo_type model: a kernel repository is not found there."""
    pytest.importorskip("tabulate", reason="`kernels benchmark` needs kernels[benchmark]: requirements-dev.txt")
    with pytest.raises(RepositoryNotFoundError, match=f"/api/models/{REPO}/revision/v1"):
        kernels_cli_here(monkeypatch, "benchmark", REPO, "--version", "1")


def test_the_lockfile_flow_needs_the_whole_locked_snapshot(published, tmp_path, monkeypatch):
    from kernels import load_kernel

    project = f'[project]\nname = "uses-kernel"\n\n[tool.kernels.dependencies]\n"{REPO}" = 1\n'
    (tmp_path / "pyproject.toml").write_text(project)
    kernels_cli_here(monkeypatch, "lock", str(tmp_path))
    kernels_cli_here(monkeypatch, "download", str(tmp_path), "--all-variants")
    lockfile = tmp_path / "kernels.lock"
    ((_, lock),) = KernelLocks.from_json(lockfile.read_text()).items()

    with pytest.raises(FileNotFoundError) as failure:
        load_kernel(REPO, lockfile=lockfile)
    incomplete = failure.value.__cause__
    assert isinstance(incomplete, IncompleteSnapshotError), repr(incomplete)
    assert ".gitattributes" in str(incomplete) and "benchmarks/benchmark.py" in str(incomplete)

    # README's workaround: the whole locked revision in the cache
    # (hf download REPO --repo-type kernel --revision <commit>).
    HfApi().snapshot_download(REPO, repo_type="kernel", revision=lock.commit)
    kernel = load_kernel(REPO, lockfile=lockfile)
    assert callable(kernel.geglu)
    assert json.loads(lockfile.read_text())  # the lockfile kernels wrote is plain JSON, to commit with a project

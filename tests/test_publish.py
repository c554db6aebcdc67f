"""Publishing (``geglu_triton.publish``) to the local Hub, and loading back with ``kernels``.

Each test publishes to its own repository of the session's local Hub (the
``hub`` fixture), except the ones about ``org/fused-geglu``, which build on
each other in file order: v1, then v2 next to it.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
from pathlib import Path

import huggingface_hub
import pytest
from huggingface_hub import CommitOperationAdd, HfApi
from hub_helpers import variant_for_this_torch
from kernel_sources import commit_all, copy_kernel_source
from packaging.version import Version

from geglu_triton import layout
from geglu_triton import publish as publish_module
from geglu_triton.build import build_variants
from geglu_triton.publish import MIN_HUGGINGFACE_HUB, BranchPlan, PublishError, _Hub, publish
from child_process import child_env, console_script

REPO = "org/fused-geglu"

pytestmark = pytest.mark.skipif(
    Version(huggingface_hub.__version__) < MIN_HUGGINGFACE_HUB,
    reason=f"huggingface_hub {huggingface_hub.__version__} cannot commit to kernel repositories",
)


@pytest.fixture(scope="module")
def api(hub) -> HfApi:
    return HfApi(endpoint=hub.endpoint, token=os.environ["HF_TOKEN"])


def build_copy(tmp: Path, *, version: int = 1, label: str | None = None) -> tuple[Path, Path]:
    """(source, build) of a clean copy of the kernel source."""
    source = copy_kernel_source(tmp / "source", version=version, label=label)
    build = tmp / "build"
    build_variants(build, source)
    return source, build


@pytest.fixture(scope="module")
def v1(tmp_path_factory) -> tuple[Path, Path]:
    return build_copy(tmp_path_factory.mktemp("v1"))


@pytest.fixture(scope="module")
def v2(tmp_path_factory) -> tuple[Path, Path]:
    return build_copy(tmp_path_factory.mktemp("v2"), version=2)


def quiet(_line: str) -> None:
    pass


def publish_quietly(build_and_source: tuple[Path, Path], repo_id: str, api: HfApi, **options):
    source, build = build_and_source
    # The import check is test_build's; here get_kernel imports what matters.
    return publish(build, repo_id, api=api, source_root=source, echo=quiet, import_check=False, **options)


def refs(api: HfApi, repo_id: str) -> dict[str, str]:
    return {b.name: b.target_commit for b in api.list_repo_refs(repo_id, repo_type="kernel").branches}


def files(api: HfApi, repo_id: str, revision: str) -> set[str]:
    return set(api.list_repo_files(repo_id, revision=revision, repo_type="kernel"))


def module_id(build: Path) -> str:
    return json.loads((build / variant_for_this_torch() / "metadata.json").read_text())["id"]


# --- org/fused-geglu: v1, then v2 -------------------------------------------


def test_published_kernel_loads_with_get_kernel(v1, api):
    from kernels import get_kernel

    report = publish_quietly(v1, REPO, api)
    assert report.version_branch == "v1" and set(report.commits) == {"v1", "main"}
    kernel = get_kernel(REPO, version=1)
    assert kernel.__name__ == module_id(v1[1])
    assert callable(kernel.geglu) and hasattr(kernel.layers, "GeGLUMLP")
    assert files(api, REPO, "main") >= {"README.md"}
    assert not any(layout.is_bytecode(path) for path in files(api, REPO, "v1"))


def test_the_card_is_on_main(v1, api):
    readme = api.hf_hub_download(REPO, "README.md", repo_type="kernel", revision="main")
    card = Path(readme).read_text()
    assert card.startswith("---\nlibrary_name: kernels\n")
    assert f'get_kernel("{REPO}", version=1)' in card
    assert 'replace_kernel_forward_from_hub(Gemma3MLP, "GeGLUMLP")' in card


def test_publishing_the_same_build_again_commits_nothing(v1, api):
    before = refs(api, REPO)
    report = publish_quietly(v1, REPO, api)
    assert not report.changed and report.commits == {}
    assert refs(api, REPO) == before


def test_v2_is_published_next_to_v1(v1, v2, api, caplog):
    from kernels import get_kernel

    v1_head = refs(api, REPO)["v1"]
    publish_quietly(v2, REPO, api)
    assert refs(api, REPO)["v1"] == v1_head  # other version branches are never touched
    assert get_kernel(REPO, version=2).__name__ == module_id(v2[1])
    with caplog.at_level(logging.WARNING, logger="kernels"):
        assert get_kernel(REPO, version=1).__name__ == module_id(v1[1])
    assert "version 2 is available" in caplog.text


def test_kernels_versions_lists_both(v1, v2, api):
    for build in (v1, v2):  # already published by the tests above, when they ran: then nothing is committed
        publish_quietly(build, REPO, api)
    result = subprocess.run(
        [*console_script("kernels"), "versions", REPO],
        capture_output=True,
        text=True,
        env=child_env(HF_ENDPOINT=api.endpoint),
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Version 1:" in result.stdout and "Version 2:" in result.stdout


# --- trust ------------------------------------------------------------------


def test_a_kernel_of_an_untrusted_org_needs_trust_remote_code(api, tmp_path):
    from kernels import get_kernel

    stranger = build_copy(tmp_path, label="stranger")  # its own op namespace, to load next to org's
    publish_quietly(stranger, "stranger/fused-geglu", api)
    with pytest.raises(ValueError, match="'stranger/fused-geglu' is not from a trusted publisher"):
        get_kernel("stranger/fused-geglu", version=1)
    assert get_kernel("stranger/fused-geglu", version=1, trust_remote_code=True).__name__ == module_id(stranger[1])


# --- stale files ------------------------------------------------------------


def test_on_an_existing_branch_only_stale_files_of_the_uploaded_variants_go(api, tmp_path):
    repo = "org/stale-existing"
    source, build = build_copy(tmp_path)
    helper = source / "torch-ext" / "fused_geglu" / "old_helper.py"
    helper.write_text("# only in the first upload\n")
    commit_all(source, "add a helper")
    build_variants(build, source)
    publish_quietly((source, build), repo, api)
    keep = ["build/torch-legacy/keep.py", "notes/keep.md"]
    api.create_commit(
        repo,
        [CommitOperationAdd(path, b"keep\n") for path in keep],
        commit_message="files outside the variants",
        revision="v1",
        repo_type="kernel",
    )

    helper.unlink()
    commit_all(source, "drop the helper")
    build_variants(build, source)
    report = publish_quietly((source, build), repo, api)
    [plan] = [p for p in report.plans if p.branch == "v1"]
    assert sorted(plan.deletions) == [f"build/torch-{b}/old_helper.py" for b in ("cpu", "cuda", "rocm", "xpu")]
    remote = files(api, repo, "v1")
    assert not any(path.endswith("old_helper.py") for path in remote)
    assert set(keep) <= remote


def test_a_new_branch_drops_the_build_and_benchmarks_it_inherits(v1, api):
    repo = "org/stale-new-branch"
    api.create_repo(repo, repo_type="kernel")
    inherited = ["build/torch-cpu/inherited.py", "build/torch-old/old.py", "benchmarks/old.py", "notes.md"]
    api.create_commit(
        repo,
        [CommitOperationAdd(path, b"inherited\n") for path in inherited],
        commit_message="files on main",
        repo_type="kernel",
    )
    publish_quietly(v1, repo, api)
    remote = files(api, repo, "v1")
    assert "notes.md" in remote and not remote & set(inherited[:3])
    assert set(inherited) <= files(api, repo, "main")  # main keeps them


def test_benchmark_scripts_go_to_the_version_branch(api, tmp_path):
    repo = "org/with-benchmarks"
    source = copy_kernel_source(tmp_path / "source")
    (source / "benchmarks").mkdir(exist_ok=True)
    (source / "benchmarks" / "benchmark_geglu.py").write_text("# a benchmark\n")
    (source / "benchmarks" / "helper.py").write_text("# not a benchmark script\n")
    commit_all(source, "benchmarks")
    build_variants(tmp_path / "build", source)
    publish_quietly((source, tmp_path / "build"), repo, api)
    remote = files(api, repo, "v1")
    assert "benchmarks/benchmark_geglu.py" in remote and "benchmarks/helper.py" not in remote
    card = Path(api.hf_hub_download(repo, "README.md", repo_type="kernel")).read_text()
    assert f"hf download {repo} --repo-type kernel --revision v1" in card and "kernels benchmark ./" in card


def test_commits_hold_at_most_the_batch_size(v1, api, monkeypatch):
    monkeypatch.setattr(publish_module, "COMMIT_BATCH_SIZE", 10)
    report = publish_quietly(v1, "org/in-batches", api)
    uploads = len([p for p in report.plans if p.branch == "v1"][0].uploads)
    assert len(report.commits["v1"]) == -(-uploads // 10)


@pytest.mark.parametrize("is_new, failing_batch, partial", [(True, 1, True), (False, 2, True), (False, 1, False)])
def test_a_commit_cut_off_says_whether_the_branch_may_hold_part_of_the_build(is_new, failing_batch, partial):
    """A new branch, or one that some batches reached, may now hold part of the build: say so, and that
    publishing again repairs it; a first batch refused on an existing branch changed nothing."""
    import httpx2
    from huggingface_hub import CommitInfo

    class CutOffApi:
        endpoint, token = "http://127.0.0.1:9", "hf_token"

        def __init__(self):
            self.batches = 0

        def create_commit(self, repo_id, operations, **_):
            self.batches += 1
            if self.batches == failing_batch:
                raise httpx2.ReadError("[Errno 104] Connection reset by peer")
            url = f"https://huggingface.co/kernels/{repo_id}/commit/c{self.batches}"
            return CommitInfo(commit_url=url, commit_message="", commit_description="", oid=f"c{self.batches}")

    plan = BranchPlan(branch="v1", is_new=is_new, uploads={f"build/torch-cpu/f{i}.py": b"" for i in range(1500)})
    with pytest.raises(PublishError) as caught:
        _Hub(CutOffApi(), "org/k").commit(plan, message="m", create_pr=False, echo=quiet)
    message = str(caught.value)
    assert message.startswith("cannot commit to 'v1' of org/k: ") and "Connection reset by peer" in message
    assert message.endswith("'v1' may hold part of this build: run publish again") == partial


def test_a_variant_directory_given_as_the_build_names_its_parent(v1, api):
    _, build = v1
    variant = build / variant_for_this_torch()
    with pytest.raises(PublishError, match=f"is one build variant; pass the build directory that holds the variants: --build {build}$"):
        publish(variant, "org/k", api=api, echo=quiet, import_check=False)


def test_later_batches_of_a_pull_request_go_to_its_ref():
    class RecordingApi:
        """Stands in for HfApi.create_commit (the local Hub has no pull requests)."""

        def __init__(self):
            self.calls = []

        def create_commit(self, repo_id, operations, *, revision, create_pr, **_):
            from huggingface_hub import CommitInfo

            self.calls.append((revision, create_pr, len(operations)))
            url = f"https://huggingface.co/kernels/{repo_id}/commit/c{len(self.calls)}"
            pr_url = f"https://huggingface.co/kernels/{repo_id}/discussions/7" if create_pr else None
            return CommitInfo(
                commit_url=url, commit_message="", commit_description="", oid=f"c{len(self.calls)}", pr_url=pr_url
            )

    plan = BranchPlan(branch="v1", is_new=False, uploads={f"build/torch-cpu/f{i}.py": b"" for i in range(2500)})
    recording = RecordingApi()
    oids, pr_url = _Hub(recording, "org/k").commit(plan, message="m", create_pr=True, echo=quiet)
    assert recording.calls == [("v1", True, 1000), ("refs/pr/7", False, 1000), ("refs/pr/7", False, 500)]
    assert oids == ["c1", "c2", "c3"] and pr_url.endswith("/discussions/7")


# --- what publish refuses or leaves alone -------------------------------------


def test_dry_run_changes_nothing(v1, v2, api):
    report = publish_quietly(v1, "org/dry-run", api, dry_run=True)
    assert report.dry_run and report.changed and not api.repo_exists("org/dry-run", repo_type="kernel")

    before = refs(api, REPO)
    report = publish_quietly(v2, REPO, api, dry_run=True)
    assert refs(api, REPO) == before and report.commits == {}


def test_a_dirty_build_is_refused_unless_allowed(api, tmp_path):
    source = copy_kernel_source(tmp_path / "source")
    (source / "build.toml").write_text((source / "build.toml").read_text() + "\n")
    build_variants(tmp_path / "build", source)
    with pytest.raises(PublishError, match="uncommitted changes .*--allow-dirty"):
        publish_quietly((source, tmp_path / "build"), "org/dirty", api)
    assert not api.repo_exists("org/dirty", repo_type="kernel")
    publish_quietly((source, tmp_path / "build"), "org/dirty", api, allow_dirty=True)
    assert "v1" in refs(api, "org/dirty")


def test_a_build_failing_check_is_refused(v1, api, tmp_path):
    source, build = v1
    broken = Path(shutil.copytree(build, tmp_path / "build"))
    (broken / "torch-cpu" / "ops.py").write_text("# changed after the build\n")
    with pytest.raises(PublishError, match=r"fails `check` \(\[digest\] torch-cpu: File hash mismatch for ops.py"):
        publish_quietly((source, broken), "org/failing-check", api)


def test_variants_disagreeing_on_the_version_are_refused(v1, api, tmp_path):
    source, build = v1
    mixed = Path(shutil.copytree(build, tmp_path / "build"))
    path = mixed / "torch-xpu" / "metadata.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "version": 2}))
    with pytest.raises(PublishError, match=r"disagree on the kernel version \(torch-cpu: 1, .*torch-xpu: 2\)"):
        publish_quietly((source, mixed), "org/mixed-versions", api)


def test_a_refused_token_gets_a_clear_error(v1, hub):
    wrong = HfApi(endpoint=hub.endpoint, token="hf_not_the_token")
    with pytest.raises(PublishError, match=r"cannot create the kernel repository org/forbidden: POST .*403 Forbidden") as err:
        publish_quietly(v1, "org/forbidden", wrong)
    message = str(err.value)
    assert "\n" not in message and "started with" in message
    assert "huggingface.co" not in message  # the approval advice is for huggingface.co only

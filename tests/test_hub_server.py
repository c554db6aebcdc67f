"""The local Hub server, exercised through the real huggingface_hub and kernels clients.

Most tests share the session ``hub`` fixture (conftest.py: HF_ENDPOINT, trusted org "org",
token from HF_TOKEN) and each uses its own repository. Tests that need other settings (small
limits, a restart) start their own LocalHub and talk to it with ``HfApi(endpoint=...)``.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from hub_helpers import file_line, git_blob_id, header_line, http, ndjson, variant_for_this_torch, write_tiny_variant
from huggingface_hub import CommitOperationAdd, CommitOperationDelete, HfApi
from huggingface_hub.errors import (
    HfHubHTTPError,
    RemoteEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.file_download import get_hf_file_metadata, hf_hub_url

from geglu_triton.hub.background import LocalHub
from geglu_triton.hub.server import HubLimits
from geglu_triton.hub.storage import InvalidPath, Repository, validate_repo_path
from child_process import child_env, console_script

TOKEN = os.environ["HF_TOKEN"]  # conftest sets it to the session hub's token


@pytest.fixture
def api(hub) -> HfApi:
    return HfApi()


@pytest.fixture
def repo_id(api, request) -> str:
    """A fresh kernel repository in the trusted org, named after the test."""
    name = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower())[:80].strip("-")
    api.create_repo(f"org/{name}", repo_type="kernel")
    return f"org/{name}"


@pytest.fixture(scope="module")
def refusals_repo(hub) -> str:
    """One repository shared by the tests of refused requests, which must leave it unchanged."""
    HfApi().create_repo("org/refusals", repo_type="kernel")
    return "org/refusals"


def _kernel_git_dir(hub: LocalHub, repo_id: str) -> Path:
    return hub.data_dir / "repos" / "kernel" / f"{repo_id}.git"


def _head(api: HfApi, repo_id: str, branch: str) -> str:
    refs = api.list_repo_refs(repo_id, repo_type="kernel")
    return next(ref.target_commit for ref in refs.branches if ref.name == branch)


def _commit_url(hub: LocalHub, repo_id: str, revision: str = "main") -> str:
    return f"{hub.endpoint}/api/kernels/{repo_id}/commit/{revision}"


# -- repositories and branches ---------------------------------------------------------------------


def test_create_repo_starts_main_with_an_initial_commit(api, hub):
    url = api.create_repo("org/created", repo_type="kernel")
    assert (url.repo_type, url.repo_id, str(url)) == ("kernel", "org/created", f"{hub.endpoint}/kernels/org/created")
    [main] = api.list_repo_refs("org/created", repo_type="kernel").branches
    assert main.name == "main" and main.ref == "refs/heads/main"
    assert [entry.path for entry in api.list_repo_tree("org/created", repo_type="kernel")] == [".gitattributes"]

    with pytest.raises(HfHubHTTPError) as conflict:
        api.create_repo("org/created", repo_type="kernel")
    assert conflict.value.response.status_code == 409
    assert api.create_repo("org/created", repo_type="kernel", exist_ok=True).repo_id == "org/created"


def test_create_repo_rejects_bad_names_and_types(hub):
    bad_name = http(
        "POST",
        f"{hub.endpoint}/api/repos/create",
        token=TOKEN,
        body=b'{"name": "a..b", "organization": "org", "type": "kernel"}',
    )
    assert bad_name.status == 400 and "invalid repository name 'a..b'" in bad_name.json()["error"]
    dataset = http(
        "POST",
        f"{hub.endpoint}/api/repos/create",
        token=TOKEN,
        body=b'{"name": "d", "organization": "org", "type": "dataset"}',
    )
    assert dataset.status == 400 and "'dataset' is not supported" in dataset.json()["error"]


def test_repositories_without_organization_belong_to_the_local_user(api):
    assert api.whoami()["name"] == "local-user"
    assert api.create_repo("solo", repo_type="kernel").repo_id == "local-user/solo"
    with pytest.raises(HfHubHTTPError) as invalid:
        HfApi(token="wrong").whoami()
    assert invalid.value.response.status_code == 401


def test_branches_create_conflict_and_delete(api, repo_id):
    main = _head(api, repo_id, "main")
    api.create_branch(repo_id, branch="v1", repo_type="kernel")
    assert _head(api, repo_id, "v1") == main
    with pytest.raises(HfHubHTTPError) as conflict:
        api.create_branch(repo_id, branch="v1", repo_type="kernel")
    assert conflict.value.response.status_code == 409
    api.create_branch(repo_id, branch="v1", repo_type="kernel", exist_ok=True)

    api.create_branch(repo_id, branch="from-commit", revision=main, repo_type="kernel")
    api.delete_branch(repo_id, branch="from-commit", repo_type="kernel")
    assert [ref.name for ref in api.list_repo_refs(repo_id, repo_type="kernel").branches] == ["main", "v1"]

    with pytest.raises(HfHubHTTPError, match="cannot be deleted"):
        api.delete_branch(repo_id, branch="main", repo_type="kernel")
    with pytest.raises(RevisionNotFoundError):
        api.create_branch(repo_id, branch="v2", revision="no-such-branch", repo_type="kernel")
    with pytest.raises(HfHubHTTPError, match="invalid branch name"):
        api.create_branch(repo_id, branch="bad..name", repo_type="kernel")


# -- uploading and reading -------------------------------------------------------------------------


def test_upload_list_and_download(api, hub, repo_id, tmp_path):
    variant = write_tiny_variant(tmp_path, name="upload-list-download", module_id="_hub_test_upload_list")
    (tmp_path / "README.md").write_text("# tiny kernel\n")
    api.create_branch(repo_id, branch="v1", repo_type="kernel")
    info = api.upload_folder(
        folder_path=tmp_path, repo_id=repo_id, repo_type="kernel", revision="v1", commit_message="Upload v1"
    )
    assert _head(api, repo_id, "v1") == info.oid
    assert info.commit_url == f"{hub.endpoint}/kernels/{repo_id}/commit/{info.oid}"

    [folder] = api.list_repo_tree(repo_id, path_in_repo="build", repo_type="kernel", revision="v1")
    assert (type(folder).__name__, folder.path) == ("RepoFolder", f"build/{variant.name}")
    files = {
        entry.path: entry for entry in api.list_repo_tree(repo_id, repo_type="kernel", revision="v1", recursive=True)
    }
    init = (variant / "__init__.py").read_bytes()
    assert files[f"build/{variant.name}/__init__.py"].blob_id == git_blob_id(init)
    assert files[f"build/{variant.name}/__init__.py"].size == len(init)
    assert {"README.md", ".gitattributes", "build", f"build/{variant.name}", f"build/{variant.name}/metadata.json"} <= files.keys()
    # kernels lists a version's variants with the ref name, percent-encoded as one segment.
    assert [
        e.path for e in api.list_repo_tree(repo_id, path_in_repo="build", repo_type="kernel", revision="refs/heads/v1")
    ] == [f"build/{variant.name}"]
    expanded = next(
        iter(
            api.list_repo_tree(repo_id, path_in_repo=f"build/{variant.name}", repo_type="kernel", revision="v1", expand=True)
        )
    )
    assert expanded.last_commit.oid == info.oid and expanded.last_commit.title == "Upload v1"

    downloaded = api.hf_hub_download(repo_id, f"build/{variant.name}/__init__.py", repo_type="kernel", revision="v1")
    assert Path(downloaded).read_bytes() == init
    metadata = get_hf_file_metadata(
        hf_hub_url(repo_id, f"build/{variant.name}/__init__.py", repo_type="kernel", revision="v1")
    )
    assert (metadata.commit_hash, metadata.etag, metadata.size) == (info.oid, git_blob_id(init), len(init))

    snapshot = Path(
        api.snapshot_download(repo_id, repo_type="kernel", revision="v1", allow_patterns=[f"build/{variant.name}/*"])
    )
    assert sorted(p.relative_to(snapshot).as_posix() for p in snapshot.rglob("*") if p.is_file()) == [
        f"build/{variant.name}/__init__.py",
        f"build/{variant.name}/metadata.json",
    ]
    assert api.kernel_info(repo_id, revision="v1").sha == info.oid
    assert api.repo_info(repo_id, repo_type="kernel").sha == _head(api, repo_id, "main")
    paths = api.get_paths_info(repo_id, ["README.md", "build", "missing.txt"], repo_type="kernel", revision="v1")
    assert [(type(p).__name__, p.path) for p in paths] == [("RepoFile", "README.md"), ("RepoFolder", "build")]

    log = subprocess.run(
        ["git", "-C", str(_kernel_git_dir(hub, repo_id)), "log", "--format=%H %s", "v1"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.splitlines()
    assert log == [f"{info.oid} Upload v1", f"{_head(api, repo_id, 'main')} initial commit"]


def test_commit_operations_parent_commit_and_identical_reupload(api, hub, repo_id):
    first = api.create_commit(
        repo_id,
        [
            CommitOperationAdd("a.txt", b"a"),
            CommitOperationAdd("dir/b.txt", b"b"),
            CommitOperationAdd("dir/c.txt", b"c"),
        ],
        commit_message="add files",
        repo_type="kernel",
    )
    second = api.create_commit(
        repo_id,
        [CommitOperationDelete("a.txt"), CommitOperationDelete("dir/"), CommitOperationAdd("new.txt", b"new")],
        commit_message="delete and add",
        repo_type="kernel",
        parent_commit=first.oid,
    )
    assert sorted(e.path for e in api.list_repo_tree(repo_id, repo_type="kernel", recursive=True)) == [
        ".gitattributes",
        "new.txt",
    ]

    # Identical content: huggingface_hub compares preupload oids and sends no commit at all.
    same = api.create_commit(
        repo_id, [CommitOperationAdd("new.txt", b"new")], commit_message="same", repo_type="kernel"
    )
    assert same.oid == second.oid == _head(api, repo_id, "main")

    with pytest.raises(HfHubHTTPError) as stale:
        api.create_commit(
            repo_id,
            [CommitOperationAdd("x.txt", b"x")],
            commit_message="stale",
            repo_type="kernel",
            parent_commit=first.oid,
        )
    assert stale.value.response.status_code == 412
    with pytest.raises(RemoteEntryNotFoundError, match="doesn't exist"):
        api.create_commit(
            repo_id, [CommitOperationDelete("missing.txt")], commit_message="delete missing", repo_type="kernel"
        )

    # A commit without operations is recorded as an empty commit; the tree is unchanged.
    empty = http("POST", _commit_url(hub, repo_id), token=TOKEN, body=ndjson(header_line("empty")))
    assert empty.status == 200 and empty.json()["pullRequestUrl"] is None
    assert _head(api, repo_id, "main") == empty.json()["commitOid"] != second.oid
    assert [e.path for e in api.list_repo_tree(repo_id, repo_type="kernel", recursive=True)] == [
        ".gitattributes",
        "new.txt",
    ]


def test_file_and_folder_may_not_share_a_path(hub, repo_id):
    clash = http(
        "POST",
        _commit_url(hub, repo_id),
        token=TOKEN,
        body=ndjson(header_line(), file_line("a", b"1"), file_line("a/b", b"2")),
    )
    assert clash.status == 400 and "'a' would be both a file and a folder" in clash.json()["error"]


def test_concurrent_commits_are_serialized(api, repo_id):
    errors = []

    def commit(index: int) -> None:
        try:
            api.create_commit(
                repo_id,
                [CommitOperationAdd(f"f{index}.txt", b"%d" % index)],
                commit_message=f"c{index}",
                repo_type="kernel",
            )
        except Exception as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=commit, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert sorted(e.path for e in api.list_repo_tree(repo_id, repo_type="kernel")) == [
        ".gitattributes",
        "f0.txt",
        "f1.txt",
        "f2.txt",
        "f3.txt",
    ]


def test_tree_listing_pages_with_link_header(tmp_path):
    limits = HubLimits(tree_page_size=2, expanded_tree_page_size=1)
    with LocalHub(tmp_path / "data", limits=limits) as paging_hub:
        api = HfApi(endpoint=paging_hub.endpoint, token=False)
        api.create_repo("org/paged", repo_type="kernel")
        api.create_commit(
            "org/paged",
            [CommitOperationAdd(f"dir/f{i}.txt", b"%d" % i) for i in range(5)],
            commit_message="five",
            repo_type="kernel",
        )
        listed = [e.path for e in api.list_repo_tree("org/paged", path_in_repo="dir", repo_type="kernel")]
        assert listed == [f"dir/f{i}.txt" for i in range(5)]
        assert len(list(api.list_repo_tree("org/paged", repo_type="kernel", recursive=True, expand=True))) == 7

        first_page = http("GET", f"{paging_hub.endpoint}/api/kernels/org/paged/tree/main/dir")
        assert [e["path"] for e in first_page.json()] == ["dir/f0.txt", "dir/f1.txt"]
        head = api.list_repo_refs("org/paged", repo_type="kernel").branches[0].target_commit
        next_url = f"{paging_hub.endpoint}/api/kernels/org/paged/tree/{head}/dir?recursive=false&expand=false&cursor=2"
        assert first_page.headers["link"] == f'<{next_url}>; rel="next"'
        assert http("GET", f"{paging_hub.endpoint}/api/kernels/org/paged/tree/main?cursor=x").status == 400


def test_model_repositories_share_the_routes(api):
    api.create_repo("org/tiny-model", repo_type="model")
    api.upload_file(path_or_fileobj=b"{}", path_in_repo="config.json", repo_id="org/tiny-model")
    assert Path(api.hf_hub_download("org/tiny-model", "config.json")).read_bytes() == b"{}"
    assert [s.rfilename for s in api.model_info("org/tiny-model").siblings] == [".gitattributes", "config.json"]


# -- kernels ---------------------------------------------------------------------------------------


def _publish_tiny_kernel(api: HfApi, repo_id: str, root: Path, module_id: str) -> None:
    from kernels._rust import Metadata

    api.create_repo(repo_id, repo_type="kernel", exist_ok=True)
    api.create_branch(repo_id, branch="v1", repo_type="kernel", exist_ok=True)
    variant = write_tiny_variant(root, name=repo_id.split("/")[1], module_id=module_id)
    assert Metadata.read_from_file(str(variant / "metadata.json")).version == 1
    api.upload_folder(
        folder_path=root / "build",
        path_in_repo="build",
        repo_id=repo_id,
        repo_type="kernel",
        revision="v1",
        commit_message="Build v1",
    )


def test_get_kernel_and_versions_cli_from_a_trusted_org(api, hub, tmp_path):
    from kernels import get_kernel

    _publish_tiny_kernel(api, "org/tiny-trusted", tmp_path, "_hub_test_tiny_trusted")
    kernel = get_kernel("org/tiny-trusted", version=1)
    assert kernel.greet() == "hello from tiny-trusted"

    versions = subprocess.run(
        [*console_script("kernels"), "versions", "org/tiny-trusted"],
        capture_output=True,
        text=True,
        timeout=120,
        env=child_env(),
    )
    assert versions.returncode == 0, versions.stderr
    assert "Version 1:" in versions.stdout and variant_for_this_torch() in versions.stdout


def test_untrusted_org_needs_trust_remote_code(api, hub, tmp_path):
    from kernels import get_kernel

    _publish_tiny_kernel(api, "elsewhere/tiny-untrusted", tmp_path, "_hub_test_tiny_untrusted")
    with pytest.raises(ValueError, match="not from a trusted publisher"):
        get_kernel("elsewhere/tiny-untrusted", version=1)
    assert (
        get_kernel("elsewhere/tiny-untrusted", version=1, trust_remote_code=True).greet() == "hello from tiny-untrusted"
    )

    assert http("GET", f"{hub.endpoint}/api/organizations/org/overview").json()["trustedKernelPublisher"] is True
    assert http("GET", f"{hub.endpoint}/api/organizations/elsewhere/overview").json()["trustedKernelPublisher"] is False
    assert http("GET", f"{hub.endpoint}/api/organizations/nobody/overview").status == 404


def test_repository_and_organization_names_ignore_case_as_on_the_hub(api, hub, tmp_path):
    from kernels import get_kernel

    _publish_tiny_kernel(api, "org/tiny-cased", tmp_path, "_hub_test_tiny_cased")
    # The trust check asks for the organization as the user spelled it.
    assert get_kernel("ORG/Tiny-Cased", version=1).greet() == "hello from tiny-cased"
    assert http("GET", f"{hub.endpoint}/api/organizations/Org/overview").json()["trustedKernelPublisher"] is True
    assert [branch.name for branch in api.list_repo_refs("Org/TINY-cased", repo_type="kernel").branches] == [
        "main",
        "v1",
    ]

    # Any spelling finds a repository, which keeps the one it was created with, and conflicts with it.
    api.create_repo("org/Mixed-Name", repo_type="kernel")
    assert api.repo_info("ORG/mixed-name", repo_type="kernel").id == "org/Mixed-Name"
    with pytest.raises(HfHubHTTPError) as conflict:
        api.create_repo("Org/MIXED-NAME", repo_type="kernel")
    assert conflict.value.response.status_code == 409 and "org/Mixed-Name already exists" in str(conflict.value)
    # A new repository joins its namespace as first spelled.
    assert api.create_repo("ORG/second-name", repo_type="kernel").repo_id == "org/second-name"
    assert _kernel_git_dir(hub, "org/second-name").is_dir()


# -- durability ------------------------------------------------------------------------------------


def test_restart_on_the_same_data_keeps_everything(tmp_path):
    data = tmp_path / "data"
    with LocalHub(data) as first:
        api = HfApi(endpoint=first.endpoint, token=False)
        api.create_repo("org/durable", repo_type="kernel", private=True)
        api.create_branch("org/durable", branch="v1", repo_type="kernel")
        commit = api.upload_file(
            path_or_fileobj=b"kept", path_in_repo="kept.txt", repo_id="org/durable", repo_type="kernel", revision="v1"
        )
        refs = api.list_repo_refs("org/durable", repo_type="kernel")
    with LocalHub(data) as second:
        api = HfApi(endpoint=second.endpoint, token=False)
        assert api.list_repo_refs("org/durable", repo_type="kernel") == refs
        assert api.kernel_info("org/durable", revision="v1").private is True
        url = hf_hub_url("org/durable", "kept.txt", repo_type="kernel", revision=commit.oid, endpoint=second.endpoint)
        assert http("GET", url).body == b"kept"


def test_an_error_with_several_lines_is_reported_once_on_one_line(api, repo_id, monkeypatch):
    """git's stderr quoted in a 500 has newlines: the header escaped them and the body did not, so huggingface_hub,
    which reports both where they differ, printed the reason twice, once with a literal \\x0a."""
    def failing(*args, **kwargs):
        raise OSError("git failed:\nfatal: bad object caf\u00e9\n")

    monkeypatch.setattr(Repository, "_move_ref", failing)
    with pytest.raises(HfHubHTTPError) as failed:
        api.create_commit(repo_id, [CommitOperationAdd("x.txt", b"x")], commit_message="fails", repo_type="kernel")
    reason = failed.value.server_message
    assert "git failed: fatal: bad object caf\\xe9" in reason and "\n" not in reason, reason
    assert failed.value.response.headers["X-Error-Message"] == failed.value.response.json()["error"] == reason


def test_interrupted_commit_leaves_the_previous_state(api, hub, repo_id, monkeypatch):
    before = _head(api, repo_id, "main")

    def crash(*args, **kwargs):
        raise OSError("simulated crash before the branch update")

    monkeypatch.setattr(Repository, "_move_ref", crash)
    with pytest.raises(HfHubHTTPError) as failed:
        api.create_commit(
            repo_id, [CommitOperationAdd("lost.txt", b"lost")], commit_message="interrupted", repo_type="kernel"
        )
    assert failed.value.response.status_code == 500
    assert "simulated crash" in failed.value.response.headers["X-Error-Message"]  # the Hub's error shape
    monkeypatch.undo()

    assert _head(api, repo_id, "main") == before
    assert [e.path for e in api.list_repo_tree(repo_id, repo_type="kernel")] == [".gitattributes"]
    subprocess.run(
        ["git", f"--git-dir={_kernel_git_dir(hub, repo_id)}", "fsck", "--no-dangling"], check=True, capture_output=True
    )
    retried = api.create_commit(
        repo_id, [CommitOperationAdd("lost.txt", b"lost")], commit_message="retried", repo_type="kernel"
    )
    assert _head(api, repo_id, "main") == retried.oid


# -- refusals --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path, problem",
    [
        ("../x", "'..' segment"),
        ("a/../../x", "'..' segment"),
        ("/etc/passwd", "absolute path"),
        ("C:/Windows/x", "absolute path"),
        (".git/config", "'.git' segment"),
        ("sub/.GIT/hooks/post-update", "'.git' segment"),
        ("a\\b", "backslash"),
        ("a//b", "empty segment"),
        ("dir/", "empty segment"),
        ("a\nb", "control character"),
        ("x" * 300, "longer than 255 bytes"),
    ],
)
def test_unsafe_paths_are_refused(api, hub, refusals_repo, path, problem):
    repo_id = refusals_repo
    before = _head(api, repo_id, "main")
    response = http("POST", _commit_url(hub, repo_id), token=TOKEN, body=ndjson(header_line(), file_line(path, b"x")))
    assert response.status == 400
    assert problem in response.json()["error"]
    assert _head(api, repo_id, "main") == before
    assert sorted(p.name for p in hub.data_dir.iterdir()) == ["repos", "server.lock", "tmp"]


def test_path_validation_accepts_ordinary_paths():
    for path in (
        "README.md",
        "build/torch-cpu/__init__.py",
        ".gitattributes",
        "a.git/b",
        "dir/.github/x",
        "ünïcode.txt",
    ):
        assert validate_repo_path(path) == path
    with pytest.raises(InvalidPath, match="empty path"):
        validate_repo_path("")


def test_unsafe_paths_are_refused_on_reads(hub, repo_id):
    response = http("GET", f"{hub.endpoint}/kernels/{repo_id}/resolve/main/..%2F..%2Fetc%2Fpasswd")
    assert response.status == 400 and "'..' segment" in response.json()["error"]


@pytest.mark.parametrize(
    "body, problem",
    [
        (b"not json\n", "line 1: malformed NDJSON"),
        (b'["key", "header"]\n', "line 1: each NDJSON line must be an object"),
        (ndjson(file_line("a.txt", b"a")), "line 1: the first line must be the 'header'"),
        (ndjson(header_line(), header_line()), "line 2: only the first line may be a 'header'"),
        (ndjson(header_line(), {"key": "copyFile", "value": {}}), "line 2 (copyFile): unknown key 'copyFile'"),
        (
            ndjson(header_line(), {"key": "lfsFile", "value": {"path": "w.bin", "algo": "sha256", "oid": "0" * 64}}),
            "LFS files are not supported",
        ),
        (ndjson(header_line(), {"key": "file", "value": {"path": "a.txt"}}), "'content' must be a non-empty string"),
        (
            ndjson(header_line(), {"key": "file", "value": {"path": "a.txt", "content": "!!!", "encoding": "base64"}}),
            "not valid base64",
        ),
        (
            ndjson(header_line(), {"key": "file", "value": {"path": "a.txt", "content": "YQ==", "encoding": "rot13"}}),
            "unsupported encoding",
        ),
        (ndjson({"key": "header", "value": {"summary": ""}}), "'summary' must be a non-empty string"),
        (ndjson(header_line(parentCommit="not-a-sha")), "not a (possibly abbreviated) commit id"),
        (b"", "empty commit body"),
    ],
)
def test_malformed_commits_are_refused(api, hub, refusals_repo, body, problem):
    repo_id = refusals_repo
    before = _head(api, repo_id, "main")
    response = http(
        "POST", _commit_url(hub, repo_id), token=TOKEN, body=body, headers={"Content-Type": "application/x-ndjson"}
    )
    assert response.status == 400
    assert problem in response.json()["error"]
    assert _head(api, repo_id, "main") == before


def test_oversized_bodies_are_refused(tmp_path):
    with LocalHub(tmp_path / "data", limits=HubLimits(max_commit_bytes=1024)) as small_hub:
        api = HfApi(endpoint=small_hub.endpoint, token=False)
        api.create_repo("org/small", repo_type="kernel")
        commit_url = f"{small_hub.endpoint}/api/kernels/org/small/commit/main"
        big = ndjson(header_line(), file_line("big.bin", b"x" * 2048))
        declared = http("POST", commit_url, body=big)
        assert declared.status == 413 and "at most 1024 bytes" in declared.json()["error"]
        streamed = http("POST", commit_url, body=iter([big[:512], big[512:]]))  # chunked: no Content-Length
        assert streamed.status == 413
        with pytest.raises(HfHubHTTPError) as refused:
            api.upload_file(
                path_or_fileobj=b"x" * 2048, path_in_repo="big.bin", repo_id="org/small", repo_type="kernel"
            )
        assert refused.value.response.status_code == 413
        assert [e.path for e in api.list_repo_tree("org/small", repo_type="kernel")] == [".gitattributes"]


def test_writes_need_the_token_and_reads_do_not(hub, repo_id):
    create = b'{"name": "no-token", "organization": "org", "type": "kernel"}'
    assert http("POST", f"{hub.endpoint}/api/repos/create", body=create).status == 401
    assert http("POST", f"{hub.endpoint}/api/repos/create", body=create, token="wrong").status == 403
    assert http("POST", _commit_url(hub, repo_id), body=ndjson(header_line())).status == 401
    assert http("POST", f"{hub.endpoint}/api/kernels/{repo_id}/branch/v9", body=b"{}", token="wrong").status == 403
    with pytest.raises(HfHubHTTPError) as forbidden:
        HfApi(token="wrong").create_repo("org/wrong-token", repo_type="kernel")
    assert forbidden.value.response.status_code == 403

    assert http("GET", f"{hub.endpoint}/api/kernels/{repo_id}/refs").status == 200
    assert http("GET", f"{hub.endpoint}/kernels/{repo_id}/resolve/main/.gitattributes").status == 200


def test_private_repositories_are_hidden_without_the_token(api, hub):
    api.create_repo("org/private-kernel", repo_type="kernel", private=True)
    hidden = http("GET", f"{hub.endpoint}/api/kernels/org/private-kernel")
    assert (hidden.status, hidden.headers["x-error-code"]) == (404, "RepoNotFound")
    assert api.kernel_info("org/private-kernel").private is True


def test_not_found_errors_carry_hub_error_codes(api, hub, repo_id):
    with pytest.raises(RepositoryNotFoundError):
        api.kernel_info("org/does-not-exist")
    with pytest.raises(RevisionNotFoundError):
        api.hf_hub_download(repo_id, ".gitattributes", repo_type="kernel", revision="no-such-branch")
    with pytest.raises(RemoteEntryNotFoundError):
        api.hf_hub_download(repo_id, "missing.txt", repo_type="kernel")
    with pytest.raises(RevisionNotFoundError):
        api.create_commit(
            repo_id, [CommitOperationAdd("a", b"a")], commit_message="m", repo_type="kernel", revision="no-such-branch"
        )

    missing = http("HEAD", f"{hub.endpoint}/kernels/{repo_id}/resolve/main/missing.txt")
    assert missing.headers["x-error-code"] == "EntryNotFound"
    assert missing.headers["x-repo-commit"] == _head(api, repo_id, "main")
    assert (
        http("GET", f"{hub.endpoint}/api/kernels/{repo_id}/tree/main/missing").headers["x-error-code"]
        == "EntryNotFound"
    )
    unknown = http("GET", f"{hub.endpoint}/api/no-such-endpoint")
    assert unknown.status == 404 and "no such endpoint" in unknown.json()["error"]


def test_create_pr_opens_pull_request_refs_as_the_hub_does(api, hub, repo_id):
    main = _head(api, repo_id, "main")
    opened = api.create_commit(
        repo_id, [CommitOperationAdd("a.txt", b"a")], commit_message="pr", repo_type="kernel", create_pr=True
    )
    assert opened.pr_url == f"{hub.endpoint}/kernels/{repo_id}/discussions/1"
    assert (opened.pr_revision, opened.pr_num) == ("refs/pr/1", 1)
    assert _head(api, repo_id, "main") == main  # the base branch does not move

    # Later commits go to the pull request's ref, as publish's later batches do.
    more = api.create_commit(
        repo_id, [CommitOperationAdd("b.txt", b"b")], commit_message="more", repo_type="kernel", revision="refs/pr/1"
    )
    second = api.create_commit(
        repo_id, [CommitOperationAdd("c.txt", b"c")], commit_message="pr 2", repo_type="kernel", create_pr=True
    )
    assert second.pr_revision == "refs/pr/2"

    refs = api.list_repo_refs(repo_id, repo_type="kernel", include_pull_requests=True)
    assert [(ref.ref, ref.target_commit) for ref in refs.pull_requests] == [
        ("refs/pr/1", more.oid),
        ("refs/pr/2", second.oid),
    ]
    assert [ref.name for ref in refs.branches] == ["main"]
    files = [entry.path for entry in api.list_repo_tree(repo_id, repo_type="kernel", revision="refs/pr/1")]
    assert files == [".gitattributes", "a.txt", "b.txt"]
    url = hf_hub_url(repo_id, "b.txt", repo_type="kernel", revision="refs/pr/1", endpoint=hub.endpoint)
    assert http("GET", url).body == b"b"
    with pytest.raises(RevisionNotFoundError):
        api.create_commit(
            repo_id, [CommitOperationAdd("d", b"d")], commit_message="m", repo_type="kernel", revision="refs/pr/9"
        )


# -- starting the server ---------------------------------------------------------------------------


def test_background_hub_starts_before_huggingface_hub_is_imported(tmp_path):
    script = textwrap.dedent(
        f"""
        import os, sys
        from geglu_triton.hub.background import LocalHub
        with LocalHub({str(tmp_path / "data")!r}) as hub:
            assert "huggingface_hub" not in sys.modules
            os.environ["HF_ENDPOINT"] = hub.endpoint
            from huggingface_hub import HfApi
            print(HfApi(token=False).create_repo("org/late-import", repo_type="kernel"))
        """
    )
    env = child_env()
    env.pop("HF_ENDPOINT")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith("/kernels/org/late-import")


def test_cli_serve_prints_the_endpoint_and_never_the_token(tmp_path):
    env = child_env(GEGLU_HUB_TOKEN="cli-secret-token")
    command = [
        sys.executable,
        "-m",
        "geglu_triton",
        "hub",
        "serve",
        "--port",
        "0",
        "--data",
        str(tmp_path / "data"),
        "--trusted-org",
        "acme",
    ]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env) as server:
        lines = []
        while not any("export HF_ENDPOINT=" in line for line in lines):
            line = server.stdout.readline()
            assert line, f"server exited early: {''.join(lines)}"
            lines.append(line)
        endpoint = re.search(r"export HF_ENDPOINT=(\S+)", "".join(lines)).group(1)
        assert http("GET", f"{endpoint}/api/organizations/acme/overview").json()["trustedKernelPublisher"] is True
        create = b'{"name": "cli", "organization": "acme", "type": "kernel"}'
        assert http("POST", f"{endpoint}/api/repos/create", body=create).status == 401
        assert http("POST", f"{endpoint}/api/repos/create", body=create, token="cli-secret-token").status == 200
        server.send_signal(signal.SIGTERM)
        output, _ = server.communicate(timeout=30)
    assert server.returncode == 0
    assert "cli-secret-token" not in "".join(lines) + output
    assert (tmp_path / "data" / "repos" / "kernel" / "acme" / "cli.git").is_dir()


def test_idle_connections_outlive_the_clients_keep_alive(hub):
    """A client pools a connection for up to 5 s idle (httpx's default, huggingface_hub's session): the
    server keeps it open longer, so a request sent on it at that moment is answered, not reset."""
    import http.client
    import time

    connection = http.client.HTTPConnection(hub.host, hub.port, timeout=10)

    def whoami() -> int:
        connection.request("GET", "/api/whoami-v2", headers={"Authorization": f"Bearer {TOKEN}"})
        response = connection.getresponse()
        response.read()
        return response.status

    try:
        assert whoami() == 200
        time.sleep(5.5)  # idle past the client's expiry, and past uvicorn's own default (5 s)
        assert whoami() == 200  # on the same connection: still open
    finally:
        connection.close()

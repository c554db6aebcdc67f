"""The local Hub under hostile input: one regression test per defect of issue 14 (items 1-9).

Every refusal is a 4xx in the Hub's error shape (``{"error": ...}`` and ``X-Error-Message``) and
leaves the repository unchanged. The session ``hub`` fixture serves most tests; tests that need
their own settings, a restart or a command-line server start their own, on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import socket
import subprocess
import sys
import time
import tracemalloc
from urllib.parse import quote, urlsplit

import pytest
from hub_helpers import file_line, header_line, http, ndjson, start_cli_hub
from huggingface_hub import CommitOperationAdd, HfApi

from geglu_triton.hub.background import LocalHub
from geglu_triton.hub.server import HubLimits, _body_lines, create_app
from geglu_triton.hub.storage import DataDirectoryInUse
from child_process import child_env

TOKEN = os.environ["HF_TOKEN"]  # conftest sets it to the session hub's token
REPO = "org/hostile"


@pytest.fixture(scope="module")
def repo(hub) -> str:
    """One repository shared by the tests of refused requests, which must leave it unchanged."""
    HfApi().create_repo(REPO, repo_type="kernel")
    HfApi().create_branch(REPO, branch="v1", repo_type="kernel")
    return REPO


def _refs(hub: LocalHub) -> bytes:
    git_dir = hub.data_dir / "repos" / "kernel" / f"{REPO}.git"
    return subprocess.run(["git", f"--git-dir={git_dir}", "show-ref"], check=True, capture_output=True).stdout


def _assert_refused(response, status: int | tuple[int, ...] = 400, problem: str = "") -> None:
    assert response.status in ((status,) if isinstance(status, int) else status), response.body[:300]
    assert problem in response.json()["error"]
    assert "x-error-message" in {name.lower() for name in response.headers}


def _json_body(value) -> bytes:
    return json.dumps(value).encode()  # ensure_ascii: a lone surrogate travels as the escape "\ud800"


# -- 1. NUL characters in revisions and branch names -----------------------------------------------


@pytest.mark.parametrize(
    "method, route, body",
    [
        ("GET", "/api/kernels/{repo}/revision/a%00b", None),
        ("GET", "/kernels/{repo}/resolve/a%00b/.gitattributes", None),
        ("HEAD", "/kernels/{repo}/resolve/a%00b/.gitattributes", None),
        ("GET", "/api/kernels/{repo}/tree/a%00b", None),
        ("POST", "/api/kernels/{repo}/commit/a%00b", ndjson(header_line())),
        ("POST", "/api/kernels/{repo}/preupload/a%00b", b'{"files": [{"path": "a.txt"}]}'),
        ("POST", "/api/kernels/{repo}/paths-info/a%00b", b"paths=.gitattributes"),
        ("POST", "/api/kernels/{repo}/branch/a%00b", b"{}"),
        ("DELETE", "/api/kernels/{repo}/branch/a%00b", None),
        ("POST", "/api/kernels/{repo}/branch/v2", _json_body({"startingPoint": "a\0b"})),
    ],
)
def test_nul_in_revisions_and_branch_names_is_refused(hub, repo, method, route, body):
    before = _refs(hub)
    response = http(method, hub.endpoint + route.format(repo=repo), body=body, token=TOKEN)
    assert response.status in (400, 404)
    if method != "HEAD":
        _assert_refused(response, (400, 404))
    assert _refs(hub) == before


# -- 2. lone surrogates in JSON strings ------------------------------------------------------------


@pytest.mark.parametrize(
    "route, body, problem",
    [
        ("commit/main", ndjson(header_line(), file_line("\ud800.txt", b"x")), "lone surrogate"),
        (
            "commit/main",
            ndjson(header_line(), {"key": "file", "value": {"path": "a", "content": "\ud800", "encoding": "utf-8"}}),
            "lone surrogate",
        ),
        ("commit/main", ndjson(header_line("\ud800")), "lone surrogate"),
        ("branch/v2", _json_body({"startingPoint": "\ud800"}), "lone surrogate"),
        ("preupload/main", _json_body({"files": [{"path": "\udfff"}]}), "lone surrogate"),
        # Raw bytes that would decode to a surrogate with Python's "surrogatepass" (CESU-style UTF-8).
        ("commit/main", b'{"key": "header", "value": {"summary": "\xed\xa0\x80"}}\n', "not UTF-8"),
    ],
)
def test_lone_surrogates_are_refused(hub, repo, route, body, problem):
    before = _refs(hub)
    response = http("POST", f"{hub.endpoint}/api/kernels/{repo}/{route}", body=body, token=TOKEN)
    _assert_refused(response, 400, problem)
    assert _refs(hub) == before


def test_a_refused_commit_leaves_no_object_behind(hub, repo):
    """The blobs of earlier lines of a commit refused on a later line never reach the repository."""
    objects = hub.data_dir / "repos" / "kernel" / f"{REPO}.git" / "objects"
    before = sorted(objects.rglob("*"))
    body = ndjson(header_line(), file_line("new.bin", os.urandom(64)), {"key": "nonsense", "value": {}})
    response = http("POST", f"{hub.endpoint}/api/kernels/{repo}/commit/main", body=body, token=TOKEN)
    _assert_refused(response, 400, "line 3 (nonsense): unknown key")
    assert sorted(objects.rglob("*")) == before
    assert list((hub.data_dir / "tmp").iterdir()) == []


@pytest.mark.parametrize("branch", ["b" * 251, "\u00e9" * 126, "ok/" + "c" * 251])
def test_branch_names_git_cannot_store_are_refused(hub, repo, branch):
    """A part longer than 250 bytes leaves no room for git's ``.lock`` file beside it (255 bytes)."""
    before = _refs(hub)
    url = f"{hub.endpoint}/api/kernels/{repo}/branch/{quote(branch, safe='')}"
    response = http("POST", url, body=b"{}", token=TOKEN)
    _assert_refused(response, 400, "at most 250 bytes")
    assert _refs(hub) == before


def test_nul_in_a_commit_message_is_refused(hub, repo):
    url = f"{hub.endpoint}/api/kernels/{repo}/commit/main"
    response = http("POST", url, body=ndjson(header_line("a\0b")), token=TOKEN)
    _assert_refused(response, 400, "NUL")


@pytest.mark.parametrize("path", ["GIT~1/config", "a/.git::$INDEX_ALLOCATION/x", "x/.Git. /y", "\u200c.git/hooks/x"])
def test_paths_that_git_would_silently_drop_are_refused(hub, repo, path):
    """git's update-index skips such paths with a warning: the commit would succeed without the file."""
    before = _refs(hub)
    url = f"{hub.endpoint}/api/kernels/{repo}/commit/main"
    response = http("POST", url, body=ndjson(header_line(), file_line(path, b"x")), token=TOKEN)
    _assert_refused(response, 400, "'.git' segment")
    assert _refs(hub) == before


# -- 3. base64 with a non-ASCII character ----------------------------------------------------------


def test_non_ascii_base64_is_refused(hub, repo):
    before = _refs(hub)
    line = {"key": "file", "value": {"path": "a.txt", "content": "aGk\u00e9", "encoding": "base64"}}
    url = f"{hub.endpoint}/api/kernels/{repo}/commit/main"
    response = http("POST", url, body=ndjson(header_line(), line), token=TOKEN)
    _assert_refused(response, 400, "line 2 (file): 'content' is not valid base64")
    assert _refs(hub) == before


# -- 4. deeply nested JSON -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "route, body",
    [
        ("/api/kernels/{repo}/commit/main", b"[" * 100_000 + b"\n"),
        ("/api/kernels/{repo}/commit/main", ndjson(header_line()) + b'{"key": "file", "value": ' + b"[" * 100_000),
        ("/api/repos/create", b'{"name": ' + b"[" * 100_000),
        ("/api/validate-yaml", b"{" + b'"a":{' * 100_000),
    ],
    # Short ids: pytest puts the test's id in PYTEST_CURRENT_TEST, and a 500 KB variable makes
    # every subprocess of the test fail to start (E2BIG).
    ids=["commit-line", "commit-file-value", "create-repo", "validate-yaml"],
)
def test_deeply_nested_json_is_refused(hub, repo, route, body):
    before = _refs(hub)
    response = http("POST", hub.endpoint + route.format(repo=repo), body=body, token=TOKEN)
    _assert_refused(response, 400, "nested too deeply")
    assert _refs(hub) == before


# -- 5. tree cursors that are not ASCII decimals ---------------------------------------------------


@pytest.mark.parametrize("cursor", ["%C2%B2", "%D9%A3", "-1", "1e3", "9" * 5000, ""])
def test_cursors_that_are_not_ascii_decimals_are_refused(hub, repo, cursor):
    response = http("GET", f"{hub.endpoint}/api/kernels/{repo}/tree/main?cursor={cursor}")
    _assert_refused(response, 400, "invalid cursor")


# -- 6. an empty token -----------------------------------------------------------------------------


def test_an_empty_token_is_refused_at_startup(tmp_path):
    """An empty token means a mistake (a variable that expanded to nothing), not open writes."""
    for bad in ("", " padded ", "caf\u00e9"):
        with pytest.raises(ValueError, match="token"):
            create_app(tmp_path / "data", token=bad)
    assert not (tmp_path / "data").exists()  # refused before anything was created

    serve = [sys.executable, "-m", "geglu_triton", "hub", "serve", "--data", str(tmp_path / "cli")]
    env = child_env()
    for args, extra_env in ((["--token", ""], {}), ([], {"GEGLU_HUB_TOKEN": ""})):
        result = subprocess.run(serve + args, capture_output=True, text=True, timeout=60, env={**env, **extra_env})
        assert result.returncode == 2
        assert "error: argument --token: the token is empty" in result.stderr
        assert "Traceback" not in result.stderr
    assert not (tmp_path / "cli").exists()


# -- 7. memory per commit --------------------------------------------------------------------------


def test_commit_body_memory_is_about_twice_the_longest_line(tmp_path):
    """A commit of one 6 MiB file (an 8 MiB NDJSON line) is streamed: the server's peak Python memory
    stays under 2.5 times the line, where holding several copies took 4-5 times."""
    block = os.urandom(3 * 1024)
    blocks = 2048  # 6 MiB of content
    prefix = b'{"key": "file", "value": {"path": "big.bin", "encoding": "base64", "content": "'
    encoded_block = base64.b64encode(block)
    line_bytes = len(prefix) + blocks * len(encoded_block) + 4

    def body():
        yield ndjson(header_line())
        yield prefix
        for _ in range(blocks):
            yield encoded_block  # the client holds one block at a time
        yield b'"}}\n'

    with LocalHub(tmp_path / "data") as small_hub:
        create = b'{"name": "big", "organization": "org", "type": "kernel"}'
        assert http("POST", f"{small_hub.endpoint}/api/repos/create", body=create).status == 200
        tracemalloc.start()
        try:
            baseline = tracemalloc.get_traced_memory()[0]
            response = http("POST", f"{small_hub.endpoint}/api/kernels/org/big/commit/main", body=body())
            peak = tracemalloc.get_traced_memory()[1] - baseline
        finally:
            tracemalloc.stop()
        assert response.status == 200, response.body
        size = http("HEAD", f"{small_hub.endpoint}/kernels/org/big/resolve/main/big.bin").headers["content-length"]
        assert int(size) == len(block) * blocks
    assert peak < 2.5 * line_bytes, f"peak {peak / line_bytes:.2f} times the line"


def test_default_commit_limit_suits_kernel_builds_and_is_in_help():
    assert HubLimits().max_commit_bytes == 64 * 1024**2
    result = subprocess.run(
        [sys.executable, "-m", "geglu_triton", "hub", "serve", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        env=child_env(),
    )
    help_text = " ".join(result.stdout.split())
    assert "default: 64 MiB" in help_text and "One server per data directory" in help_text


# -- 8. long lines are read in linear time ---------------------------------------------------------


class _StreamedRequest:
    """What ``_body_lines`` reads of a request: its headers and its body, as a stream of chunks."""

    def __init__(self, chunks):
        self.headers = {}
        self._chunks = chunks

    async def stream(self):
        for chunk in self._chunks:
            yield chunk


def test_a_long_line_is_read_in_linear_time():
    """32 MiB without a newline in 4 KiB chunks: searching the whole buffer again per chunk scans
    128 GiB (tens of seconds); scanning each chunk once takes a few milliseconds."""
    chunk = b"x" * 4096
    chunks = [chunk] * 8192 + [b"\nlast"]

    async def read_lines():
        return [len(line) async for line in _body_lines(_StreamedRequest(chunks), limit=64 * 1024**2)]

    started = time.perf_counter()
    lengths = asyncio.run(read_lines())
    elapsed = time.perf_counter() - started
    assert lengths == [32 * 1024**2, 4]
    assert elapsed < 2.0, f"{elapsed:.1f} s"


# -- 9. stale git lock files and the one-server-per-directory rule ----------------------------------


def test_stale_git_lock_files_are_cleared_at_startup(tmp_path):
    data = tmp_path / "data"
    with LocalHub(data) as first:
        api = HfApi(endpoint=first.endpoint, token=False)
        api.create_repo("org/locked", repo_type="kernel")
        api.create_branch("org/locked", branch="v1", repo_type="kernel")
    git_dir = data / "repos" / "kernel" / "org" / "locked.git"
    # What git leaves when it is killed inside update-ref, for a branch and for packed refs.
    for lock in ("refs/heads/main.lock", "refs/heads/v1.lock", "packed-refs.lock"):
        (git_dir / lock).write_text("")
    with LocalHub(data) as second:
        api = HfApi(endpoint=second.endpoint, token=False)
        for branch in ("main", "v1"):
            operations = [CommitOperationAdd("a.txt", b"a")]
            api.create_commit("org/locked", operations, commit_message="after", repo_type="kernel", revision=branch)
    assert [lock.name for lock in git_dir.rglob("*.lock")] == ["hub-write.lock"]  # the server's flock file


def _serve_error(data) -> str:
    """The one line on stderr of ``hub serve --data data`` run in a child process, which must exit 1."""
    server = subprocess.run(
        [sys.executable, "-m", "geglu_triton", "hub", "serve", "--port", "0", "--data", str(data)],
        capture_output=True,
        text=True,
        timeout=60,
        env=child_env(),
    )
    assert server.returncode == 1
    [line] = server.stderr.strip().splitlines()
    return line


def test_a_directory_no_hub_made_is_refused_untouched(tmp_path):
    """The server clears its data directory's tmp on start: a directory of the user's with a tmp of its own
    (--data ~, say) is refused by name, and nothing in it changes. A new or empty directory is taken."""
    data = tmp_path / "home"
    (data / "tmp").mkdir(parents=True)
    (data / "tmp" / "notes.txt").write_text("mine")
    assert _serve_error(data) == (
        f"geglu-triton hub: error: {data.resolve()} holds files but is not a local Hub's data directory (it has "
        "no server.lock): give a new or empty directory, or one a local Hub has served"
    )
    assert sorted(path.relative_to(data).as_posix() for path in data.rglob("*")) == ["tmp", "tmp/notes.txt"]
    (tmp_path / "empty" / "lost+found").mkdir(parents=True)  # as a freshly made file system has it
    with LocalHub(tmp_path / "empty"), LocalHub(tmp_path / "new"):
        pass
    with LocalHub(tmp_path / "empty"):  # served before: its own files are no obstacle
        pass


def test_one_server_per_data_directory(tmp_path):
    data = tmp_path / "data"
    with LocalHub(data):
        with pytest.raises(DataDirectoryInUse, match="one server per data directory"):
            LocalHub(data).__enter__()
        assert _serve_error(data) == (
            f"geglu-triton hub: error: another local Hub is already serving {data.resolve()}: "
            "run one server per data directory"
        )
    with LocalHub(data):  # released when the first one stopped
        pass


# -- client disconnects ----------------------------------------------------------------------------


def test_a_client_disconnect_is_logged_in_one_line(tmp_path):
    server, endpoint = start_cli_hub(tmp_path / "data")
    try:
        create = b'{"name": "k", "organization": "org", "type": "kernel"}'
        assert http("POST", f"{endpoint}/api/repos/create", body=create).status == 200
        address = urlsplit(endpoint)
        with socket.create_connection((address.hostname, address.port), timeout=10) as client:
            client.sendall(
                b"POST /api/kernels/org/k/commit/main HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n"
                + ndjson(header_line())
            )
            time.sleep(0.3)  # let the server start reading the body
        time.sleep(0.5)
        assert http("GET", f"{endpoint}/api/kernels/org/k/refs").status == 200  # still serving
    finally:
        server.send_signal(signal.SIGTERM)
        output, _ = server.communicate(timeout=30)
    disconnects = [line for line in output.splitlines() if "client disconnected" in line]
    assert len(disconnects) == 1 and "POST /api/kernels/org/k/commit/main" in disconnects[0]
    assert "Traceback" not in output

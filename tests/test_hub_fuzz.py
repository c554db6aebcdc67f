"""Fuzzing the local Hub, so that the next defect of issue 14's kind is found here and not by users.

Property-based tests (hypothesis) cover the NDJSON commit parser, path and ref-name validation and
tree paging; a generator driven by the server's own route table sends hostile requests to every
endpoint over HTTP (127.0.0.1). The invariant is the same everywhere: no 500, no hang (every request
has a timeout), every refusal in the Hub's error shape, nothing written outside the repository a
request names, and nothing written at all by a refused request.

Runs are deterministic and bounded: ``derandomize`` (a fixed seed), no example database, a fixed
``max_examples`` per test.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import functools
import http.client
import json
import os
import posixpath
import re
import subprocess
from pathlib import Path
from urllib.parse import quote, urlencode

import pytest

pytest.importorskip("hypothesis", reason="requirements-dev.txt installs it (a GPU box may lack it)")

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from huggingface_hub import CommitOperationAdd, HfApi

from geglu_triton.hub.background import LocalHub
from geglu_triton.hub.server import (
    _STORAGE_ERROR_STATUS,
    ApiError,
    HubLimits,
    _body_lines,
    _parse_ndjson_line,
    _read_commit_line,
)
from geglu_triton.hub.storage import (
    HubStorage,
    InvalidName,
    InvalidPath,
    RevisionNotFound,
    StorageError,
    validate_branch_name,
    validate_repo_path,
)

TOKEN = "fuzz-token"
REQUEST_TIMEOUT_S = 20  # a request that takes longer counts as a hang
SMALL_PAGES = HubLimits(tree_page_size=3, expanded_tree_page_size=2)


def fuzz_settings(max_examples: int) -> settings:
    return settings(
        max_examples=max_examples,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )


# -- strategies ------------------------------------------------------------------------------------

# Characters that broke the server before, or that mean something to URLs, git or file systems.
_SPECIAL_CHARACTERS = ["\0", "\ud800", "\udfff", "\n", "\x7f", "\u00b2", "\u0663", "\u00e9", "%", "/", "\\", " ", ":"]
hostile_text = st.one_of(
    st.text(st.characters(), max_size=24),
    st.lists(st.sampled_from([*_SPECIAL_CHARACTERS, "a", "1", ".."]), max_size=8).map("".join),
)
_PATH_SEGMENTS = ["..", ".", "", ".git", ".GIT. ", "GIT~1", ".git::$DATA", "\u200c.git", "a", "C:", "\u00fcn\u00efcode"]
hostile_paths = st.one_of(
    hostile_text,
    st.lists(st.one_of(st.sampled_from(_PATH_SEGMENTS), hostile_text), min_size=1, max_size=5).map("/".join),
    st.integers(250, 1100).map(lambda length: "x" * length),
)
_REF_PARTS = ["refs", "heads", "pr", "1", "01", "main", "v1", "..", "@{", "~", "^", ":", "?", "*", "[", ".lock", "-x"]
hostile_refs = st.one_of(
    hostile_text,
    st.lists(st.one_of(st.sampled_from(_REF_PARTS), hostile_text), min_size=1, max_size=4).map("/".join),
    st.text("0123456789abcdef", min_size=38, max_size=41),
)
json_scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), hostile_text)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(hostile_text, inner, max_size=3)),
    max_leaves=8,
)
file_contents = st.one_of(st.binary(max_size=64).map(lambda data: base64.b64encode(data).decode()), hostile_text)
header_values = st.fixed_dictionaries(
    {"summary": st.one_of(st.just("fuzz"), hostile_text, json_values)},
    optional={
        "description": st.one_of(st.just(""), hostile_text, json_values),
        "parentCommit": st.one_of(st.text("0123456789abcdef", min_size=4, max_size=41), json_values),
    },
)
commit_lines = st.one_of(
    st.builds(lambda value: {"key": "header", "value": value}, header_values),
    st.builds(
        lambda path, content, encoding: {
            "key": "file",
            "value": {"path": path, "content": content, "encoding": encoding},
        },
        st.one_of(st.sampled_from(["a.txt", "dir/b.txt", "new.bin"]), hostile_paths),
        file_contents,
        st.one_of(st.sampled_from(["base64", "utf-8"]), json_values),
    ),
    st.builds(lambda path: {"key": "deletedFile", "value": {"path": path}}, st.one_of(st.just("a.txt"), hostile_paths)),
    st.builds(lambda path: {"key": "deletedFolder", "value": {"path": path}}, st.just("dir/") | hostile_paths),
    st.builds(lambda key, value: {"key": key, "value": value}, st.just("lfsFile") | hostile_text, json_values),
    json_values,
)
nested_too_deep = st.sampled_from([b"[" * 5000, b'{"a":' * 5000, b'{"key": "file", "value": ' + b"[" * 100_000])
ndjson_lines = st.one_of(
    commit_lines.map(lambda line: json.dumps(line).encode()),
    st.binary(max_size=128),
    nested_too_deep,
)
ndjson_bodies = st.tuples(
    st.one_of(st.builds(lambda value: {"key": "header", "value": value}, header_values), commit_lines),
    st.lists(commit_lines, max_size=4),
).map(lambda lines: b"".join(json.dumps(line).encode() + b"\n" for line in [lines[0], *lines[1]]))


# -- the NDJSON commit parser ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def storage(tmp_path_factory):
    """A storage with one repository, ``org/props`` (branch v1 too), outside any server."""
    opened = HubStorage(tmp_path_factory.mktemp("props-data"))
    opened.create_repo("kernel", "org", "props").create_branch("v1")
    yield opened
    opened.close()


def _assert_client_error(error: Exception) -> None:
    """A refusal the server answers with a 4xx: an ApiError or a StorageError it maps to one."""
    if isinstance(error, ApiError):
        assert 400 <= error.status < 500, error
    else:
        assert isinstance(error, StorageError), repr(error)
        status = next(status for kind, (status, _) in _STORAGE_ERROR_STATUS.items() if isinstance(error, kind))
        assert status < 500, error


@fuzz_settings(300)
@given(raw=ndjson_lines)
def test_ndjson_line_parser_parses_or_refuses(raw):
    line = bytearray(raw)
    try:
        parsed = _parse_ndjson_line(7, line)
    except ApiError as error:
        assert error.status == 400 and error.message.startswith("line 7")
    else:
        if parsed is not None:
            key, value = parsed
            assert isinstance(key, str) and isinstance(value, dict)
    assert line == b""  # freed as soon as it was decoded


@fuzz_settings(300)
@given(line=commit_lines, first=st.booleans())
def test_commit_lines_become_operations_or_4xx(storage, line, first):
    repo = storage.repo("kernel", "org", "props")
    with repo.quarantine() as staged:
        try:
            result = _read_commit_line(repo, staged, 3, bytearray(json.dumps(line).encode()), first=first)
        except Exception as error:  # noqa: BLE001 - the property: every failure is a 4xx
            _assert_client_error(error)
        else:
            assert result is not None
            for path in (getattr(result, "path", None),):  # operations name a validated path
                if path is not None:
                    validate_repo_path(path)


@fuzz_settings(300)
@given(chunks=st.lists(st.binary(max_size=40).map(lambda data: data.replace(b"!", b"\n")), max_size=12))
def test_body_lines_split_any_chunking_like_split(chunks):
    class Streamed:
        headers: dict[str, str] = {}

        async def stream(self):
            for chunk in chunks:
                yield chunk

    async def read():
        return [bytes(line) async for line in _body_lines(Streamed(), limit=1 << 20)]

    joined = b"".join(chunks)
    expected = joined.split(b"\n")
    if expected[-1] == b"":
        expected.pop()
    assert asyncio.run(read()) == expected


# -- paths and ref names ---------------------------------------------------------------------------


_EMPTY_BLOB = "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"  # git's id of empty content


@fuzz_settings(300)
@given(path=hostile_paths)
def test_path_validation_accepts_only_paths_inside_the_repository(storage, tmp_path_factory, path):
    try:
        validate_repo_path(path)
    except InvalidPath:
        return
    path.encode("utf-8")  # valid Unicode: git and the file system can take it
    assert not path.startswith("/") and "\\" not in path and not re.match(r"[A-Za-z]:", path)
    assert all(ord(char) >= 32 and ord(char) != 127 for char in path)
    for segment in path.split("/"):
        assert segment not in ("", ".", "..")
    assert posixpath.normpath(posixpath.join("/repo", path)).startswith("/repo/")
    # git itself takes the path into a tree (it skips, with a warning, those it finds unsafe).
    repo = storage.repo("kernel", "org", "props")
    index = {"GIT_INDEX_FILE": str(tmp_path_factory.getbasetemp() / "path-property-index")}
    record = f"100644 {_EMPTY_BLOB}\t{path}".encode() + b"\0"
    taken = subprocess.run(
        ["git", f"--git-dir={repo.git_dir}", "update-index", "-z", "--index-info"],
        input=record,
        capture_output=True,
        env={**os.environ, **index},
    )
    assert taken.returncode == 0 and b"Ignoring path" not in taken.stderr, taken.stderr


@fuzz_settings(200)
@given(name=hostile_refs)
def test_branch_names_and_revisions_are_refused_or_safe(storage, name):
    repo = storage.repo("kernel", "org", "props")
    try:
        validate_branch_name(name)
    except InvalidName:
        pass
    else:
        name.encode("utf-8")
        assert "\0" not in name and not name.startswith("refs/") and not re.fullmatch("[0-9a-f]{40}", name)
    try:
        commit = repo.resolve(name)
    except RevisionNotFound:
        return
    assert name in ("main", "v1", "refs/heads/main", "refs/heads/v1", commit)


# -- a server for the HTTP fuzz --------------------------------------------------------------------


@pytest.fixture(scope="module")
def fuzz_hub(tmp_path_factory):
    """A server with a token and small tree pages: ``org/fuzz`` (main, v1, pull request 1) and
    ``org/pages`` (files to page through). Its data directory is the only entry of its parent."""
    parent = tmp_path_factory.mktemp("fuzz")
    with LocalHub(parent / "data", token=TOKEN, limits=SMALL_PAGES, trusted_orgs=("org",)) as hub:
        api = HfApi(endpoint=hub.endpoint, token=TOKEN)
        for name in ("fuzz", "pages"):
            api.create_repo(f"org/{name}", repo_type="kernel")
        api.create_branch("org/fuzz", branch="v1", repo_type="kernel")
        files = [CommitOperationAdd(path, path.encode()) for path in ("a.txt", "dir/b.txt")]
        api.create_commit("org/fuzz", files, commit_message="files", repo_type="kernel")
        change = [CommitOperationAdd("a.txt", b"changed")]
        api.create_commit("org/fuzz", change, commit_message="pr", repo_type="kernel", create_pr=True)
        pages = [CommitOperationAdd(path, b"p") for path in ("a.txt", "b.txt", "dir/c.txt", "dir/d.txt", "e.txt")]
        api.create_commit("org/pages", pages, commit_message="pages", repo_type="kernel")
        yield hub


def _send(hub: LocalHub, method: str, target: str, body: bytes | None = None, headers: dict | None = None):
    """One request on a fresh connection; (status, lower-cased headers, body)."""
    connection = http.client.HTTPConnection("127.0.0.1", hub.port, timeout=REQUEST_TIMEOUT_S)
    try:
        connection.request(method, target, body=body, headers=headers or {})
        response = connection.getresponse()
        return response.status, {name.lower(): value for name, value in response.getheaders()}, response.read()
    finally:
        connection.close()


def _url_quote(text: str, safe: str = "") -> str:
    return quote(text, safe=safe, errors="surrogatepass")


def _query(params: dict[str, str] | list[tuple[str, str]]) -> str:
    return urlencode(params, quote_via=lambda value, *_: _url_quote(value))


# -- tree paging -----------------------------------------------------------------------------------

_FLAGS = {"1": True, "true": True, "TRUE": True, "": False, "0": False, "false": False}


@fuzz_settings(200)
@given(
    cursor=st.one_of(st.integers(0, 9).map(str), st.sampled_from(["\u00b2", "-1", "1e3", "9" * 30]), hostile_text),
    recursive=st.one_of(st.sampled_from(sorted(_FLAGS)), hostile_text),
    expand=st.one_of(st.sampled_from(sorted(_FLAGS)), hostile_text),
)
def test_tree_pages_follow_the_cursor_or_refuse_it(fuzz_hub, cursor, recursive, expand):
    query = _query({"cursor": cursor, "recursive": recursive, "expand": expand})
    status, headers, body = _send(fuzz_hub, "GET", f"/api/kernels/org/pages/tree/main?{query}")
    valid = re.fullmatch(r"[0-9]{1,18}", cursor) and recursive.lower() in _FLAGS and expand.lower() in _FLAGS
    if not valid:
        assert status == 400 and "error" in json.loads(body)
        return
    assert status == 200
    recursive, expand = _FLAGS[recursive.lower()], _FLAGS[expand.lower()]
    everything = _all_pages(fuzz_hub.endpoint, recursive)
    start, size = int(cursor), SMALL_PAGES.expanded_tree_page_size if expand else SMALL_PAGES.tree_page_size
    assert [entry["path"] for entry in json.loads(body)] == everything[start : start + size]
    assert ("link" in headers) == (start + size < len(everything))


@functools.cache
def _all_pages(endpoint: str, recursive: bool) -> list[str]:
    """Every path of org/pages, by following the Link headers as huggingface_hub does."""
    api = HfApi(endpoint=endpoint, token=TOKEN)
    return [entry.path for entry in api.list_repo_tree("org/pages", repo_type="kernel", recursive=recursive)]


# -- every endpoint --------------------------------------------------------------------------------

_KNOWN_BAD_SEGMENTS = ["a\0b", "\ud800", "\u00b2", "..", ".", "%", "%zz", "refs/heads/a\0", "x" * 300, ""]
hostile_segments = st.one_of(hostile_text, st.sampled_from(_KNOWN_BAD_SEGMENTS)).map(_url_quote)

# Usual path parameter values, by (name, convertor): requests that reach the seeded repositories.
# A parameter not listed here (a new route's) is always hostile.
_USUAL_PARAMETERS = {
    ("kind", "hub_api_kind"): st.sampled_from(["kernels", "kernels", "kernels", "models"]),
    ("kind", "hub_file_kind"): st.sampled_from(["kernels/", "kernels/", "kernels/", ""]),
    ("namespace", "hub_segment"): st.just("org"),
    ("name", "hub_segment"): st.sampled_from(["fuzz", "fuzz", "pages"]),
    ("revision", "hub_segment"): st.sampled_from(["main", "v1", "refs%2Fpr%2F1", "refs%2Fheads%2Fv1"]),
    ("branch", "hub_segment"): st.sampled_from(["v1", "new", "main", "refs%2Fpr%2F1"]),
    ("organization", "hub_segment"): st.sampled_from(["org", "local-user"]),
    ("path", "hub_path"): st.sampled_from([".gitattributes", "a.txt", "dir/b.txt", "dir", "dir%2Fb.txt"]),
}
_HOSTILE_PARAMETERS = {"hub_path": hostile_paths.map(lambda path: _url_quote(path, safe="/"))}
_QUERY_NAMES = ["create_pr", "cursor", "recursive", "expand", "include_prs", "blobs"]
usual_queries = st.dictionaries(st.sampled_from(_QUERY_NAMES), st.sampled_from(["1", "0", "true", "false"]), max_size=2)
hostile_queries = st.dictionaries(
    st.one_of(st.sampled_from(_QUERY_NAMES), hostile_text),
    st.one_of(st.sampled_from(["", "yes", "\u00b2", "-3", "9" * 30]), hostile_text),
    min_size=1,
    max_size=3,
)
usual_commits = st.lists(
    st.one_of(
        st.builds(
            lambda path, data, encoding: {
                "key": "file",
                "value": {"path": path, "content": base64.b64encode(data).decode(), "encoding": encoding},
            },
            st.sampled_from(["a.txt", "dir/b.txt", "new.bin", "dir/new/c.txt"]),
            st.binary(max_size=32),
            st.just("base64"),
        ),
        st.builds(lambda path: {"key": "deletedFile", "value": {"path": path}}, st.sampled_from(["a.txt", "new.bin"])),
        st.builds(lambda path: {"key": "deletedFolder", "value": {"path": path}}, st.sampled_from(["dir/", "nope/"])),
    ),
    max_size=3,
).map(lambda lines: [{"key": "header", "value": {"summary": "fuzz", "description": "", "parentCommit": None}}, *lines])
# Usual bodies, as values, by the last word of the route path (the endpoint); others get an empty object.
_USUAL_BODIES = {
    "create": st.builds(
        lambda name, kind: {"name": name, "organization": "org", "type": kind, "private": False},
        st.sampled_from(["fuzz", "new", "new-2"]),
        st.sampled_from(["kernel", "model"]),
    ),
    "commit": usual_commits,
    "preupload": st.just({"files": [{"path": "a.txt", "size": 1, "sample": ""}, {"path": "new.bin"}]}),
    "paths-info": st.just([["paths", "a.txt"], ["paths", "dir"], ["expand", "true"]]),
    "branch": st.sampled_from([{}, {"startingPoint": "v1"}, {"startingPoint": "refs/pr/1"}]),
}


def _encode_body(endpoint: str, value) -> bytes:
    """A body value in the endpoint's format: NDJSON lines, a form, or JSON."""
    if endpoint == "commit":
        return b"".join(json.dumps(line).encode() + b"\n" for line in value)
    if endpoint == "paths-info":
        return _query([tuple(pair) for pair in value]).encode()
    return json.dumps(value).encode()


# Strings that broke the server before, or that mean something to git, paths or parsers.
_KNOWN_BAD_STRINGS = ["\0", "a\0b", "\ud800", "x\udfff", "\u00b2", "..", "../x", "", " ", "\n", ".git/x", "aGk\u00e9"]
hostile_leaves = st.one_of(st.sampled_from(_KNOWN_BAD_STRINGS), hostile_text, json_values, nested_too_deep.map(len))


def _leaf_paths(value, where: tuple = ()) -> list[tuple]:
    """The index paths of every scalar inside nested lists and dicts."""
    if isinstance(value, dict):
        return [leaf for key, item in value.items() for leaf in _leaf_paths(item, (*where, key))]
    if isinstance(value, list):
        return [leaf for index, item in enumerate(value) for leaf in _leaf_paths(item, (*where, index))]
    return [where]


def _with_one_hostile_leaf(data, value):
    """``value`` with one of its scalars replaced by a hostile one (the rest stays well-formed)."""
    leaves = _leaf_paths(value)
    if not leaves or leaves == [()]:
        return data.draw(hostile_leaves)
    where = data.draw(st.sampled_from(leaves), label="hostile leaf")
    value = copy.deepcopy(value)
    container = value
    for key in where[:-1]:
        container = container[key]
    container[where[-1]] = data.draw(hostile_leaves, label="hostile value")
    return value


json_bodies = st.fixed_dictionaries(
    {},
    optional={
        "name": st.one_of(st.sampled_from(["fuzz", "new", "x" * 97]), json_values),
        "organization": st.one_of(st.just("org"), json_values),
        "type": st.one_of(st.sampled_from(["kernel", "model", "dataset"]), json_values),
        "private": json_values,
        "startingPoint": st.one_of(st.sampled_from(["main", "v1", "refs/pr/1"]), json_values),
        "files": st.one_of(st.lists(st.fixed_dictionaries({"path": hostile_paths}), max_size=3), json_values),
    },
).map(lambda value: json.dumps(value).encode())
form_bodies = st.lists(st.tuples(st.sampled_from(["paths", "expand"]) | hostile_text, hostile_paths), max_size=4).map(
    lambda fields: _query(dict(fields)).encode()
)
any_hostile_body = st.one_of(st.binary(max_size=200), json_bodies, ndjson_bodies, form_bodies, nested_too_deep)
hostile_authorizations = st.sampled_from(["Bearer wrong", "", "Basic Zm9v", "Bearer", f"bearer  {TOKEN} x"])
# Each request is usual but for one part, so that a hostile part meets a request that gets far.
_PARTS = ["nothing", "parameter", "parameter", "query", "body", "body", "authorization", "method"]


def _repository_files(data_dir: Path) -> dict[Path, dict[str, bytes]]:
    """Per repository: every file (objects by name only) except the write lock, which is no data."""
    snapshot = {}
    for git_dir in sorted((data_dir / "repos").glob("*/*/*.git")):
        files = {}
        for path in git_dir.rglob("*"):
            relative = path.relative_to(git_dir).as_posix()
            if path.is_file() and relative != "hub-write.lock":
                files[relative] = b"" if relative.startswith("objects/") else path.read_bytes()
        snapshot[git_dir] = files
    return snapshot


@fuzz_settings(250)
@given(data=st.data())
def test_every_endpoint_answers_hostile_requests_without_500(fuzz_hub, data):
    routes = sorted(fuzz_hub.app.routes, key=lambda route: (route.path, sorted(route.methods)))
    writes = [route for route in routes if route.methods & {"POST", "DELETE"}]
    route = data.draw(st.sampled_from(routes + writes), label="route")  # writes twice as often
    hostile = data.draw(st.sampled_from(_PARTS), label="hostile part")
    parameters = _parameter_kinds(route)
    hostile_parameter = None
    if hostile == "parameter" and parameters:
        hostile_parameter = data.draw(st.sampled_from(sorted(parameters)), label="hostile parameter")
    values = {}
    for name, kind in parameters.items():
        usual = _USUAL_PARAMETERS.get((name, kind))
        if name == hostile_parameter or usual is None:
            usual = _HOSTILE_PARAMETERS.get(kind, hostile_segments)
        values[name] = data.draw(usual, label=name)
    path = re.sub(r"\{(\w+)(?::\w+)?\}", lambda match: values[match[1]], route.path)
    query = data.draw(hostile_queries if hostile == "query" else usual_queries, label="query")
    target = path + (f"?{_query(query)}" if query else "")
    methods = sorted(route.methods)
    method = data.draw(st.sampled_from(["PUT", "PATCH", "OPTIONS"] if hostile == "method" else methods), label="method")
    endpoint = [word for word in route.path.split("/") if word and "{" not in word][-1]
    body_value = data.draw(_USUAL_BODIES.get(endpoint, st.just({})), label="usual body")
    if hostile == "body" and data.draw(st.booleans(), label="one hostile field"):
        body = _encode_body(endpoint, _with_one_hostile_leaf(data, body_value))
    elif hostile == "body":
        body = data.draw(any_hostile_body, label="hostile body")
    else:
        body = _encode_body(endpoint, body_value)
    if method in ("GET", "HEAD"):
        body = None
    authorization = f"Bearer {TOKEN}"
    if hostile == "authorization":
        authorization = data.draw(hostile_authorizations, label="authorization")

    _assert_answered_safely(fuzz_hub, method, target, body, authorization, values)


def _assert_answered_safely(hub: LocalHub, method: str, target: str, body, authorization: str, values: dict) -> None:
    """Send one request and check the invariants: no 500, no hang, the Hub's error shape, nothing
    outside the repository it names, nothing left in tmp/, and nothing at all for a refusal."""
    data_dir = hub.data_dir
    before = _repository_files(data_dir)
    status, response_headers, response_body = _send(hub, method, target, body, {"Authorization": authorization})
    after = _repository_files(data_dir)

    assert status < 500, (method, target, body, response_body[:500])
    if status >= 400 and method != "HEAD":
        assert isinstance(json.loads(response_body)["error"], str)
        assert "x-error-message" in response_headers
    assert [entry.name for entry in data_dir.parent.iterdir()] == ["data"]
    assert sorted(entry.name for entry in data_dir.iterdir()) == ["repos", "server.lock", "tmp"]
    assert list((data_dir / "tmp").iterdir()) == []
    changed = {git_dir for git_dir in before.keys() | after.keys() if before.get(git_dir) != after.get(git_dir)}
    if status >= 400:
        assert not changed, (method, target, body, changed)
    else:
        created = after.keys() - before.keys()
        assert len(created) <= 1 and changed <= created | {_named_git_dir(data_dir, values)}, changed


# A usual request per endpoint for the sweep below: the first value of each usual choice.
_USUAL_SWEEP_VALUES = {key: values[0] for key, values in {
    ("kind", "hub_api_kind"): ["kernels"],
    ("kind", "hub_file_kind"): ["kernels/"],
    ("namespace", "hub_segment"): ["org"],
    ("name", "hub_segment"): ["fuzz"],
    ("revision", "hub_segment"): ["v1"],
    ("branch", "hub_segment"): ["sweep"],
    ("organization", "hub_segment"): ["org"],
    ("path", "hub_path"): ["dir/b.txt"],
}.items()}
_USUAL_SWEEP_BODIES = {
    "create": {"name": "swept", "organization": "org", "type": "kernel", "private": False},
    "commit": [
        {"key": "header", "value": {"summary": "sweep", "description": "", "parentCommit": None}},
        {"key": "file", "value": {"path": "swept.txt", "content": "eA==", "encoding": "base64"}},
        {"key": "file", "value": {"path": "utf8.txt", "content": "x", "encoding": "utf-8"}},
    ],
    "preupload": {"files": [{"path": "a.txt", "size": 1, "sample": ""}]},
    "paths-info": [["paths", "a.txt"], ["expand", "true"]],
    "branch": {"startingPoint": "v1"},
}


# One of each kind: NUL, a lone surrogate, a non-ASCII digit, a way out, empty, too long, non-ASCII base64.
_SWEEP_BAD_STRINGS = ["a\0b", "\ud800", "\u00b2", "../x", "", "x" * 300, "aGk\u00e9"]


def test_every_field_of_every_endpoint_takes_every_known_bad_string(fuzz_hub):
    """A systematic sweep next to the random one: each path parameter, query flag and body field
    of each route, one at a time, set to each kind of string that broke the server before."""
    for route in sorted(fuzz_hub.app.routes, key=lambda route: (route.path, sorted(route.methods))):
        _sweep_route(fuzz_hub, route)


def _sweep_route(hub: LocalHub, route) -> None:
    method = sorted(route.methods - {"HEAD"})[0]
    parameters = _parameter_kinds(route)
    usual_values = {name: _USUAL_SWEEP_VALUES.get((name, kind), "x") for name, kind in parameters.items()}
    endpoint = [word for word in route.path.split("/") if word and "{" not in word][-1]
    usual_body = _USUAL_SWEEP_BODIES.get(endpoint, {})

    def send(values: dict, query: dict, body_value) -> None:
        path = re.sub(r"\{(\w+)(?::\w+)?\}", lambda match: values[match[1]], route.path)
        target = path + (f"?{_query(query)}" if query else "")
        body = None if method == "GET" else _encode_body(endpoint, body_value)
        _assert_answered_safely(hub, method, target, body, f"Bearer {TOKEN}", values)

    for flag in _QUERY_NAMES:
        for bad in ("\0", "\u00b2"):
            send(usual_values, {flag: bad}, usual_body)
    for bad in _SWEEP_BAD_STRINGS:
        for name, kind in parameters.items():
            send({**usual_values, name: _url_quote(bad, safe="/" if kind == "hub_path" else "")}, {}, usual_body)
        for where in _leaf_paths(usual_body) if usual_body else ():
            body_value = copy.deepcopy(usual_body)
            container = body_value
            for key in where[:-1]:
                container = container[key]
            container[where[-1]] = bad
            send(usual_values, {}, body_value)


def _parameter_kinds(route) -> dict[str, str]:
    """Path parameter name -> its convertor's registered name (hub_segment, hub_path, ...)."""
    return dict(re.findall(r"\{(\w+):(\w+)\}", route.path))


def _named_git_dir(data_dir: Path, values: dict[str, str]) -> Path | None:
    """The repository that the path parameters of a write name (writes are all under /api/<kinds>/)."""
    if "kind" not in values:
        return None
    return data_dir / "repos" / values["kind"].removesuffix("s") / values["namespace"] / f"{values['name']}.git"

"""The local Hub's HTTP API: the part of the Hugging Face Hub API that huggingface_hub and kernels use.

Unmodified clients talk to it through ``HF_ENDPOINT``. Kernel repositories are what matters
(``/api/kernels/<namespace>/<name>/...`` and ``/kernels/<namespace>/<name>/resolve/...``); model
repositories share the same routes (``/api/models/...`` and ``/<namespace>/<name>/resolve/...``).

Supported: creating repositories, creating and deleting branches, preupload (every file
"regular", never LFS), NDJSON commits of inline files and deletions, pull requests opened by a
commit (``create_pr``: ``refs/pr/<N>``, listed by refs with ``include_prs``; no discussion pages),
refs, tree listings with cursor paging, paths-info, repository info, file downloads (GET and HEAD),
organization overviews (``trustedKernelPublisher``), whoami and a permissive validate-yaml. Not
supported, with a clear 400: LFS files, other repository types. Tags are never created,
``Range`` headers are ignored (the whole file is sent, which huggingface_hub handles), and a
commit without changes is recorded as an empty commit (huggingface_hub itself skips unchanged files).

Errors carry the Hub's ``X-Error-Code`` (RepoNotFound, RevisionNotFound, EntryNotFound), an
``X-Error-Message`` header and a ``{"error": ...}`` body, which huggingface_hub turns into its
typed exceptions; any input, however malformed, is answered with a 4xx of that shape, not a 500.
With a token configured, writes need ``Authorization: Bearer <token>`` (401
without one, 403 with a wrong one) and private repositories are hidden from other readers.

Memory: a commit body is streamed line by line; the server holds at most about twice its longest
NDJSON line (one file, base64-encoded) at a time, and a body is refused with 413 past
``HubLimits.max_commit_bytes``.

This module must not import huggingface_hub: callers start the server before they set
``HF_ENDPOINT``, which huggingface_hub reads once, on import.
"""

from __future__ import annotations

import binascii
import functools
import hmac
import json
import logging
import os
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, quote_from_bytes, unquote

from fastapi import FastAPI
from starlette.concurrency import run_in_threadpool
from starlette.convertors import Convertor, register_url_convertor
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from ..errors import check_token
from .storage import (
    DEFAULT_BRANCH,
    AddFile,
    BranchExists,
    CommitOperation,
    ConcurrentUpdate,
    DeleteFile,
    DeleteFolder,
    EntryNotFound,
    GitCommandFailed,
    HubStorage,
    InvalidName,
    InvalidPath,
    InvalidRevision,
    ParentCommitMismatch,
    ProtectedBranch,
    RepoExists,
    RepoNotFound,
    Repository,
    RevisionNotFound,
    StorageError,
    TreeEntry,
    is_valid_unicode,
    validate_repo_path,
)

#: The user that whoami reports, and the namespace of repositories created without an organization.
LOCAL_USER = "local-user"

# Repository kind -> the URL prefix of its web and file URLs (models have none).
_URL_PREFIXES = {"kernel": "kernels/", "model": ""}
_TRUE_VALUES = ("1", "true")
_FALSE_VALUES = ("", "0", "false")
_DECIMAL = re.compile(r"[0-9]{1,18}")  # ASCII digits only ('²'.isdigit() is true), and a size int() accepts
_CONTROL_CHARACTER = re.compile(r"[\x00-\x1f\x7f]")
_log = logging.getLogger("uvicorn.error")  # the server's log, formatted and leveled by uvicorn


@dataclass(frozen=True)
class HubLimits:
    """Request limits. Tests shrink them; the defaults suit kernel repositories."""

    # One NDJSON commit body, files base64-encoded inside it (4/3 of their size). A kernel build is
    # a few MB (this project's, every variant together, well under one): 64 MiB leaves room for ten
    # times that, and the server's memory per commit in flight stays about twice the longest line.
    max_commit_bytes: int = 64 * 1024**2
    max_json_bytes: int = 16 * 1024**2  # any other request body
    tree_page_size: int = 1000  # entries per tree page, as the Hub
    expanded_tree_page_size: int = 50  # entries per tree page with expand=true, as the Hub


class ApiError(Exception):
    """An error answered to the client as ``status`` with a ``{"error": message}`` body."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: str | None = None,
        headers: dict[str, str] | None = None,
        extra: dict[str, Any] | None = None,
    ):
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.headers = headers or {}
        self.extra = extra or {}  # more fields of the JSON body


# Storage errors -> (HTTP status, X-Error-Code). Subclasses before base classes.
_STORAGE_ERROR_STATUS: dict[type[StorageError], tuple[int, str | None]] = {
    RepoNotFound: (404, "RepoNotFound"),
    RevisionNotFound: (404, "RevisionNotFound"),
    EntryNotFound: (404, "EntryNotFound"),
    InvalidName: (400, None),
    InvalidPath: (400, None),
    InvalidRevision: (400, None),
    ProtectedBranch: (400, None),
    RepoExists: (409, None),
    BranchExists: (409, None),
    ConcurrentUpdate: (409, None),
    ParentCommitMismatch: (412, None),
    GitCommandFailed: (500, None),
}


def create_app(
    data_dir: str | os.PathLike[str],
    *,
    trusted_orgs: Iterable[str] = (),
    token: str | None = None,
    limits: HubLimits | None = None,
) -> FastAPI:
    """The local Hub application, storing repositories under ``data_dir``.

    ``trusted_orgs`` are the organizations reported as trusted kernel publishers; ``token``, when
    set, is required for every write (ValueError if it could never be sent: see ``check_token``);
    ``limits`` defaults to ``HubLimits()``. ``app.state.storage`` holds the data directory (one
    server per directory) until its ``close()``.
    """
    if token is not None:
        check_token(token)
    storage = HubStorage(data_dir)
    api = _HubApi(storage, trusted_orgs=frozenset(trusted_orgs), token=token, limits=limits or HubLimits())
    repo = "/api/{kind:hub_api_kind}/{namespace:hub_segment}/{name:hub_segment}"
    routes = [
        Route("/api/whoami-v2", api.whoami, methods=["GET"]),
        Route("/api/organizations/{organization:hub_segment}/overview", api.organization_overview, methods=["GET"]),
        Route("/api/validate-yaml", api.validate_yaml, methods=["POST"]),
        Route("/api/repos/create", api.create_repo, methods=["POST"]),
        Route(repo, api.repo_info, methods=["GET"]),
        Route(repo + "/revision/{revision:hub_segment}", api.repo_info, methods=["GET"]),
        Route(repo + "/refs", api.list_refs, methods=["GET"]),
        Route(repo + "/tree/{revision:hub_segment}", api.list_tree, methods=["GET"]),
        Route(repo + "/tree/{revision:hub_segment}/{path:hub_path}", api.list_tree, methods=["GET"]),
        Route(repo + "/paths-info/{revision:hub_segment}", api.paths_info, methods=["POST"]),
        Route(repo + "/branch/{branch:hub_segment}", api.create_branch, methods=["POST"]),
        Route(repo + "/branch/{branch:hub_segment}", api.delete_branch, methods=["DELETE"]),
        Route(repo + "/preupload/{revision:hub_segment}", api.preupload, methods=["POST"]),
        Route(repo + "/commit/{revision:hub_segment}", api.commit, methods=["POST"]),
        Route(
            "/{kind:hub_file_kind}{namespace:hub_segment}/{name:hub_segment}/resolve/{revision:hub_segment}/{path:hub_path}",
            api.resolve_file,
            methods=["GET", "HEAD"],
        ),
    ]
    app = FastAPI(
        title="fused-geglu local Hub",
        routes=routes,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        exception_handlers={
            ApiError: _api_error_response,
            StorageError: _storage_error_response,
            HTTPException: _http_exception_response,
            ClientDisconnect: _client_disconnect_response,
        },
    )
    app.add_middleware(_RouteOnEncodedPath)
    app.add_middleware(_InternalErrorAsHubError)
    app.state.storage = storage
    return app


def _writes(
    handler: Callable[[_HubApi, Request], Awaitable[Response]],
) -> Callable[[_HubApi, Request], Awaitable[Response]]:
    """Mark a handler as a write: when the Hub has a token, 401 without one, 403 with a wrong one."""

    @functools.wraps(handler)
    async def checked(self: _HubApi, request: Request) -> Response:
        if self.token is not None and not self._is_authenticated(request):
            if _bearer_token(request) is None:
                raise ApiError(
                    401,
                    "this local Hub requires a token for writes: "
                    "send 'Authorization: Bearer <token>' (e.g. set HF_TOKEN)",
                )
            raise ApiError(403, "invalid token: it does not match the token this local Hub was started with")
        return await handler(self, request)

    return checked


class _HubApi:
    """The endpoint handlers. Handlers that read a body are async and run git work in a thread."""

    def __init__(self, storage: HubStorage, *, trusted_orgs: frozenset[str], token: str | None, limits: HubLimits):
        self.storage = storage
        self.trusted_orgs = trusted_orgs
        self.token = token
        self.limits = limits

    # -- account ---------------------------------------------------------------------------------

    def whoami(self, request: Request) -> Response:
        if self.token is not None and not self._is_authenticated(request):
            raise ApiError(401, "Invalid credentials in Authorization header")
        return JSONResponse(
            {
                "type": "user",
                "id": LOCAL_USER,
                "name": LOCAL_USER,
                "fullname": "Local Hub user",
                "orgs": [{"type": "org", "name": org, "fullname": org} for org in sorted(self.trusted_orgs)],
                "auth": {"type": "access_token", "accessToken": {"displayName": "local", "role": "write"}},
            }
        )

    def organization_overview(self, request: Request) -> Response:
        """An organization is any trusted org, or any namespace other than LOCAL_USER that holds repositories.

        As on the Hub, the name's case does not matter.
        """
        organization = request.path_params["organization"]
        trusted = organization.lower() in {org.lower() for org in self.trusted_orgs}
        is_organization = trusted or (
            organization.lower() != LOCAL_USER.lower() and self.storage.has_namespace(organization)
        )
        if not is_organization:
            raise ApiError(404, f"organization {organization!r} not found")
        return JSONResponse(
            {
                "name": organization,
                "fullname": organization,
                "type": "org",
                "isVerified": False,
                "trustedKernelPublisher": trusted,
            }
        )

    async def validate_yaml(self, request: Request) -> Response:
        """Accept any model card metadata: the local Hub does not interpret README.md."""
        await _read_json_object(request, self.limits.max_json_bytes)
        return JSONResponse({"errors": [], "warnings": []})

    # -- repositories and branches -------------------------------------------------------------------

    @_writes
    async def create_repo(self, request: Request) -> Response:
        body = await _read_json_object(request, self.limits.max_json_bytes)
        kind = _optional_string(body, "type") or "model"
        if kind not in _URL_PREFIXES:
            raise ApiError(
                400,
                f"repository type {kind!r} is not supported by the local Hub (use one of: {', '.join(_URL_PREFIXES)})",
            )
        name = _required_string(body, "name")
        namespace = _optional_string(body, "organization") or LOCAL_USER
        private = body.get("private") is True or body.get("visibility") == "private"
        try:
            repo = await run_in_threadpool(self.storage.create_repo, kind, namespace, name, private=private)
        except RepoExists as error:
            # Like the Hub, the conflict still names the URL: create_repo(exist_ok=True) returns it.
            url = f"{_base_url(request)}/{_URL_PREFIXES[kind]}{namespace}/{name}"
            raise ApiError(409, str(error), extra={"url": url}) from None
        return JSONResponse({"url": _repo_url(request, repo), "name": repo.id, "id": repo.id})

    def repo_info(self, request: Request) -> Response:
        repo = self._readable_repo(request)
        commit = repo.resolve(request.path_params.get("revision", DEFAULT_BRANCH))
        with_blobs = _bool_query(request, "blobs")
        siblings = []
        for entry in repo.list_tree(commit, recursive=True):
            if entry.type == "file":
                sibling: dict[str, Any] = {"rfilename": entry.path}
                if with_blobs:
                    sibling.update(size=entry.size, blobId=entry.oid)
                siblings.append(sibling)
        return JSONResponse(
            {
                "_id": repo.id,
                "id": repo.id,
                "author": repo.namespace,
                "sha": commit,
                "lastModified": _iso_date(repo.last_commit(commit).timestamp),
                "private": repo.private,
                "gated": False,
                "disabled": False,
                "downloads": 0,
                "likes": 0,
                "tags": [],
                "siblings": siblings,
            }
        )

    def list_refs(self, request: Request) -> Response:
        repo = self._readable_repo(request)
        refs: dict[str, Any] = {
            "branches": [
                {"name": branch, "ref": f"refs/heads/{branch}", "targetCommit": commit}
                for branch, commit in repo.branches().items()
            ],
            "tags": [],
            "converts": [],
        }
        if _bool_query(request, "include_prs"):
            refs["pullRequests"] = [
                {"name": f"refs/pr/{number}", "ref": f"refs/pr/{number}", "targetCommit": commit}
                for number, commit in repo.pull_requests().items()
            ]
        return JSONResponse(refs)

    @_writes
    async def create_branch(self, request: Request) -> Response:
        repo = self._repo(request)
        body = await _read_json_object(request, self.limits.max_json_bytes)
        starting_point = _optional_string(body, "startingPoint")
        await run_in_threadpool(repo.create_branch, request.path_params["branch"], starting_point)
        return JSONResponse({})

    @_writes
    async def delete_branch(self, request: Request) -> Response:
        repo = self._repo(request)
        await run_in_threadpool(repo.delete_branch, request.path_params["branch"])
        return JSONResponse({})

    # -- reading files ---------------------------------------------------------------------------------

    def list_tree(self, request: Request) -> Response:
        """One page of a directory listing; the ``Link: rel="next"`` URL pins the resolved commit."""
        repo = self._readable_repo(request)
        commit = repo.resolve(request.path_params["revision"])
        path = _checked_path(request.path_params.get("path", ""), allow_root=True)
        recursive = _bool_query(request, "recursive")
        expand = _bool_query(request, "expand")
        cursor = request.query_params.get("cursor", "0")
        if not _DECIMAL.fullmatch(cursor):
            raise ApiError(400, f'invalid cursor {cursor!r}: pass the cursor of a Link rel="next" URL unchanged')
        start = int(cursor)
        page_size = self.limits.expanded_tree_page_size if expand else self.limits.tree_page_size
        entries = repo.list_tree(commit, path, recursive=recursive)
        page = [self._entry_json(repo, commit, entry, expand) for entry in entries[start : start + page_size]]
        headers = {}
        if start + page_size < len(entries):
            encoded_path = "/" + quote(path, safe="") if path else ""
            next_url = (
                f"{_base_url(request)}/api/{repo.kind}s/{repo.id}/tree/{commit}{encoded_path}"
                f"?recursive={str(recursive).lower()}&expand={str(expand).lower()}&cursor={start + page_size}"
            )
            headers["Link"] = f'<{next_url}>; rel="next"'
        return JSONResponse(page, headers=headers)

    async def paths_info(self, request: Request) -> Response:
        """The entries of the form's ``paths`` (a repeated field); missing paths are skipped."""
        body = await _read_body(request, self.limits.max_json_bytes)
        form = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)
        expand = _parse_bool(form.get("expand", ["false"])[-1], "expand")
        paths = [_checked_path(path) for path in form.get("paths", [])]
        return JSONResponse(await run_in_threadpool(self._paths_info, request, paths, expand))

    def _paths_info(self, request: Request, paths: list[str], expand: bool) -> list[dict[str, Any]]:
        repo = self._readable_repo(request)
        commit = repo.resolve(request.path_params["revision"])
        found = []
        for path in paths:
            try:
                found.append(self._entry_json(repo, commit, repo.entry(commit, path), expand))
            except EntryNotFound:
                continue
        return found

    def resolve_file(self, request: Request) -> Response:
        """A file's content (GET) or headers (HEAD): X-Repo-Commit, ETag (the git blob id), Content-Length."""
        repo = self._readable_repo(request)
        commit = repo.resolve(request.path_params["revision"])
        path = _checked_path(request.path_params["path"])
        try:
            entry = repo.entry(commit, path)
            if entry.type != "file":
                raise EntryNotFound(f"{path!r} is a folder, not a file, at revision {commit} of {repo.id}")
        except EntryNotFound as error:
            raise ApiError(404, str(error), code="EntryNotFound", headers={"X-Repo-Commit": commit}) from None
        headers = {
            "X-Repo-Commit": commit,
            "ETag": f'"{entry.oid}"',
            "Content-Length": str(entry.size),
            "Content-Type": "application/octet-stream",
        }
        if request.method == "HEAD":
            return Response(headers=headers)
        return StreamingResponse(repo.iter_blob(entry.oid), headers=headers)

    # -- writing files ---------------------------------------------------------------------------------

    @_writes
    async def preupload(self, request: Request) -> Response:
        """Every file is uploaded "regular" (inline in the commit); ``oid`` is the blob already at the revision."""
        repo = self._repo(request)
        body = await _read_json_object(request, self.limits.max_json_bytes)
        files = body.get("files")
        if not isinstance(files, list) or not all(isinstance(file, dict) for file in files):
            raise ApiError(400, "'files' must be a list of objects with a 'path'")
        paths = [_checked_path(_required_string(file, "path", "files[]")) for file in files]
        commit = await run_in_threadpool(repo.resolve, request.path_params["revision"])
        existing = {
            entry.path: entry.oid
            for entry in await run_in_threadpool(repo.list_tree, commit, recursive=True)
            if entry.type == "file"
        }
        return JSONResponse(
            {
                "files": [
                    {"path": path, "uploadMode": "regular", "shouldIgnore": False, "oid": existing.get(path)}
                    for path in paths
                ],
                "commitOid": commit,
            }
        )

    @_writes
    async def commit(self, request: Request) -> Response:
        """An NDJSON commit: a header line, then file / deletedFile / deletedFolder lines, applied in order.

        Each line is parsed, and a file line's blob written to the commit's object quarantine, in a
        worker thread as it arrives; the revision moves once, at the end. With ``create_pr`` the
        revision stays where it is and the commit opens a pull request, ``refs/pr/<N>``.
        """
        repo = self._repo(request)
        create_pr = _bool_query(request, "create_pr")
        header: dict[str, str | None] | None = None
        operations: list[CommitOperation] = []
        number = 0
        with repo.quarantine() as staged:  # a refused commit leaves no object behind
            async for line in _body_lines(request, self.limits.max_commit_bytes):
                number += 1
                read = await run_in_threadpool(_read_commit_line, repo, staged, number, line, first=header is None)
                if read is None:
                    continue
                if header is None:
                    header = read
                else:
                    operations.append(read)
            if header is None:
                raise ApiError(400, "empty commit body: expected NDJSON lines, starting with a 'header' line")
            commit = functools.partial(
                repo.commit, request.path_params["revision"], operations, create_pr=create_pr, quarantine=staged
            )
            result = await run_in_threadpool(commit, **header)
        pull_request_url = None
        if result.pull_request is not None:
            pull_request_url = f"{_repo_url(request, repo)}/discussions/{result.pull_request}"
        return JSONResponse(
            {
                "success": True,
                "commitOid": result.oid,
                "commitUrl": f"{_repo_url(request, repo)}/commit/{result.oid}",
                "pullRequestUrl": pull_request_url,
            }
        )

    # -- helpers ---------------------------------------------------------------------------------------

    def _repo(self, request: Request) -> Repository:
        params = request.path_params
        return self.storage.repo(params["kind"], params["namespace"], params["name"])

    def _readable_repo(self, request: Request) -> Repository:
        """The repository of the request; a private one only for holders of the token (else not found)."""
        repo = self._repo(request)
        if repo.private and self.token is not None and not self._is_authenticated(request):
            raise RepoNotFound(f"{repo.kind} repository {repo.id} not found")
        return repo

    def _is_authenticated(self, request: Request) -> bool:
        """Whether the request carries the Hub's token (there must be one)."""
        presented = _bearer_token(request)
        return (
            presented is not None
            and self.token is not None
            and hmac.compare_digest(presented.encode(), self.token.encode())
        )

    @staticmethod
    def _entry_json(repo: Repository, commit: str, entry: TreeEntry, expand: bool) -> dict[str, Any]:
        item: dict[str, Any] = {"type": entry.type, "oid": entry.oid, "size": entry.size, "path": entry.path}
        if expand:
            last = repo.last_commit(commit, entry.path)
            item["lastCommit"] = {"id": last.oid, "title": last.title, "date": _iso_date(last.timestamp)}
        return item


def _read_commit_line(
    repo: Repository, quarantine: Path, number: int, line: bytearray, *, first: bool
) -> dict[str, str | None] | CommitOperation | None:
    """One line of an NDJSON commit: the header's fields if ``first``, else an operation (a file
    line's blob is written to ``quarantine`` now); None for a blank line. The line's memory is
    freed by the time this returns."""
    item = _parse_ndjson_line(number, line)
    if item is None:
        return None
    key, value = item
    if first:
        if key != "header":
            raise ApiError(400, f"line {number}: the first line must be the 'header', got {key!r}")
        return _commit_header(value)
    if key == "header":
        raise ApiError(400, f"line {number}: only the first line may be a 'header'")
    return _commit_operation(repo, quarantine, number, key, value)


def _commit_header(value: dict[str, Any]) -> dict[str, str | None]:
    """The keyword arguments of ``Repository.commit`` that the NDJSON header line gives."""
    header = {
        "summary": _required_string(value, "summary", "header"),
        "description": _optional_string(value, "description", "header") or "",
        "parent_commit": _optional_string(value, "parentCommit", "header"),
    }
    if "\0" in header["summary"] + header["description"]:
        raise ApiError(400, "header: the commit summary and description may not contain a NUL character")
    return header


def _commit_operation(
    repo: Repository, quarantine: Path, number: int, key: str, value: dict[str, Any]
) -> CommitOperation:
    """Turn one NDJSON operation line into a storage operation; a ``file`` line's blob is written now."""
    where = f"line {number} ({key})"
    if key == "file":
        path = _checked_path(_required_string(value, "path", where), where=where)
        content = _required_string(value, "content", where)
        encoding = _optional_string(value, "encoding", where) or "base64"
        if encoding == "base64":
            try:  # decodes the str in place (base64.b64decode would first copy it to bytes)
                data = binascii.a2b_base64(content, strict_mode=True)
            except ValueError as error:  # binascii.Error, or a non-ASCII character
                raise ApiError(400, f"{where}: 'content' is not valid base64: {error}") from None
        elif encoding == "utf-8":
            data = content.encode("utf-8")
        else:
            raise ApiError(400, f"{where}: unsupported encoding {encoding!r} (use 'base64' or 'utf-8')")
        return AddFile(path, repo.write_blob(data, quarantine))
    if key == "deletedFile":
        return DeleteFile(_checked_path(_required_string(value, "path", where), where=where))
    if key == "deletedFolder":
        folder = _required_string(value, "path", where).removesuffix("/")
        return DeleteFolder(_checked_path(folder, where=where))
    if key == "lfsFile":
        raise ApiError(
            400,
            f"{where}: LFS files are not supported by the local Hub: every file is stored as a regular git "
            "blob and preupload never answers 'lfs' (LFS files of other repositories cannot be copied either)",
        )
    raise ApiError(400, f"{where}: unknown key {key!r} (expected one of: header, file, deletedFile, deletedFolder)")


def _parse_ndjson_line(number: int, line: bytearray) -> tuple[str, dict[str, Any]] | None:
    """The (key, value) of one NDJSON line, None for a blank line.

    ``line`` is emptied as soon as it is decoded, so that no more than two copies of a line
    (its text, then the text and the parsed value) are alive at any time.
    """
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ApiError(400, f"line {number}: malformed NDJSON, not UTF-8: {error}") from None
    finally:
        line.clear()
    if not text or text.isspace():
        return None
    item = _json_loads(text, f"line {number}: malformed NDJSON, not a JSON value")
    del text
    if not isinstance(item, dict) or set(item) != {"key", "value"}:
        raise ApiError(400, f'line {number}: each NDJSON line must be an object {{"key": ..., "value": {{...}}}}')
    if not isinstance(item["key"], str) or not isinstance(item["value"], dict):
        raise ApiError(400, f"line {number}: 'key' must be a string and 'value' an object")
    return item["key"], item["value"]


async def _body_lines(request: Request, limit: int) -> AsyncIterator[bytearray]:
    """The lines of the request body as they arrive, one line in memory at a time.

    Each byte is searched and copied once, so reading is linear in the body size however long the
    lines are. The consumer owns a yielded line and may ``clear()`` it to free it early.
    """
    line = bytearray()
    async for chunk in _body_chunks(request, limit):
        view, start = memoryview(chunk), 0
        while (end := chunk.find(b"\n", start)) != -1:
            line += view[start:end]
            yield line
            line = bytearray()
            start = end + 1
        line += view[start:]
    if line:
        yield line


async def _body_chunks(request: Request, limit: int) -> AsyncIterator[bytes]:
    """The request body, refused with 413 as soon as it is declared or found to exceed ``limit`` bytes."""
    declared = request.headers.get("content-length", "")
    if declared.isascii() and declared.isdigit() and (len(declared) > 18 or int(declared) > limit):
        raise _payload_too_large(limit)
    received = 0
    async for chunk in request.stream():
        received += len(chunk)
        if received > limit:
            raise _payload_too_large(limit)
        yield chunk


async def _read_body(request: Request, limit: int) -> bytearray:
    body = bytearray()
    async for chunk in _body_chunks(request, limit):
        body += chunk
    return body


async def _read_json_object(request: Request, limit: int) -> dict[str, Any]:
    """The JSON object of the request body; an empty body is an empty object."""
    body = await _read_body(request, limit)
    if not body.strip():
        return {}
    value = _json_loads(body, "the request body is not valid JSON")
    if not isinstance(value, dict):
        raise ApiError(400, "the request body must be a JSON object")
    return value


def _json_loads(text: str | bytearray, what: str) -> Any:
    """``json.loads``, with every way a document can be malformed (also nested too deep) a 400."""
    try:
        return json.loads(text)
    except ValueError as error:
        raise ApiError(400, f"{what}: {error}") from None
    except RecursionError:
        raise ApiError(400, f"{what}: nested too deeply") from None


def _payload_too_large(limit: int) -> ApiError:
    return ApiError(413, f"request body too large: this local Hub accepts at most {limit} bytes per request")


def _required_string(obj: dict[str, Any], key: str, where: str = "the request body") -> str:
    value = _optional_string(obj, key, where)
    if not value:
        raise ApiError(400, f"{where}: {key!r} must be a non-empty string")
    return value


def _optional_string(obj: dict[str, Any], key: str, where: str = "the request body") -> str | None:
    value = obj.get(key)
    if value is not None and not isinstance(value, str):
        raise ApiError(400, f"{where}: {key!r} must be a string")
    if value is not None and not is_valid_unicode(value):
        raise ApiError(400, f"{where}: {key!r} is not valid Unicode (it contains a lone surrogate)")
    return value


def _checked_path(path: str, *, allow_root: bool = False, where: str | None = None) -> str:
    """A validated repository path; InvalidPath (400) names the problem."""
    if allow_root and path == "":
        return path
    try:
        return validate_repo_path(path)
    except InvalidPath as error:
        raise InvalidPath(f"{where}: {error}" if where else str(error)) from None


def _bool_query(request: Request, name: str) -> bool:
    return _parse_bool(request.query_params.get(name, "false"), name)


def _parse_bool(value: str, name: str) -> bool:
    if value.lower() in _TRUE_VALUES:
        return True
    if value.lower() in _FALSE_VALUES:
        return False
    raise ApiError(400, f"invalid {name}={value!r}: use true or false")


def _bearer_token(request: Request) -> str | None:
    scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
    return credentials.strip() or None if scheme.lower() == "bearer" else None


def _base_url(request: Request) -> str:
    return str(request.base_url).rstrip("/")


def _repo_url(request: Request, repo: Repository) -> str:
    return f"{_base_url(request)}/{_URL_PREFIXES[repo.kind]}{repo.id}"


def _iso_date(timestamp: int) -> str:
    """The Hub's date format, ``2024-05-01T12:00:00.000Z``."""
    return datetime.fromtimestamp(timestamp, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.000Z")


def _error_response(
    status: int,
    message: str,
    code: str | None = None,
    headers: dict[str, str] | None = None,
    extra: dict[str, Any] | None = None,
) -> Response:
    # A header is visible ASCII on one line, and client input or git's output quoted in a message may be neither.
    # The body says the same text: huggingface_hub reports the header's message and the body's, once if equal.
    message = " ".join(message.split()).encode("ascii", "backslashreplace").decode()
    message = _CONTROL_CHARACTER.sub(lambda match: f"\\x{ord(match[0]):02x}", message)
    response_headers = {"X-Error-Message": message}
    if code:
        response_headers["X-Error-Code"] = code
    response_headers.update(headers or {})
    return JSONResponse({"error": message, **(extra or {})}, status_code=status, headers=response_headers)


async def _api_error_response(request: Request, error: ApiError) -> Response:
    return _error_response(error.status, error.message, error.code, error.headers, error.extra)


async def _storage_error_response(request: Request, error: StorageError) -> Response:
    status, code = next(
        (status_code for error_type, status_code in _STORAGE_ERROR_STATUS.items() if isinstance(error, error_type)),
        (500, None),
    )
    return _error_response(status, str(error), code)


async def _http_exception_response(request: Request, error: HTTPException) -> Response:
    message = f"{request.method} {request.url.path}: {error.detail}"
    if error.status_code == 404:
        message += " (no such endpoint on the local Hub)"
    return _error_response(error.status_code, message, headers=error.headers)


async def _client_disconnect_response(request: Request, error: ClientDisconnect) -> Response:
    """A client that went away mid-body: one log line, no traceback. No ref moved (refs move only
    after the whole body is read); the answer is never delivered."""
    _log.warning("local Hub: client disconnected during %s %s; request dropped", request.method, request.url.path)
    return _error_response(400, "client disconnected before the request body was complete")


class _RouteOnEncodedPath:
    """ASGI middleware: route on the path as the client encoded it.

    huggingface_hub percent-encodes a revision or a folder as one URL segment (``refs%2Fpr%2F1``,
    ``build%2Ftorch-cpu``). ASGI servers decode ``path`` before routing, which would split such a
    segment, so routing uses ``raw_path`` instead and the ``hub_*`` convertors decode each parameter.
    """

    def __init__(self, app: Callable) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        raw_path = scope.get("raw_path")
        if scope["type"] == "http" and raw_path:
            # Keep existing %XX escapes; escape any raw non-ASCII byte so that decoding is UTF-8.
            scope = {**scope, "path": quote_from_bytes(raw_path, safe="/%!$&'()*+,;=:@-._~")}
        await self.app(scope, receive, send)


class _InternalErrorAsHubError:
    """ASGI middleware: a fault of the server's own (an OSError from the disk or git, say) gets the Hub's
    500 answer and one log line.

    Left to the ASGI server, the exception would be logged as a traceback and the connection dropped,
    which a client can see as a reset instead of the 500. Nothing is answered twice: an exception
    after the answer has started still propagates.
    """

    def __init__(self, app: Callable) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        answered = False

        async def send_and_note(message: dict) -> None:
            nonlocal answered
            answered = answered or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, send_and_note)
        except Exception as error:
            if answered:
                raise
            fault = f"{type(error).__name__}: {error}"
            _log.error("local Hub: %s %s failed: %s", scope["method"], scope["path"], fault)
            await _error_response(500, f"the local Hub failed: {fault}")(scope, receive, send)


class _SegmentConvertor(Convertor[str]):
    """One percent-encoded path segment, decoded (``refs%2Fheads%2Fv1`` -> ``refs/heads/v1``)."""

    regex = "[^/]+"

    def convert(self, value: str) -> str:
        return unquote(value)

    def to_string(self, value: str) -> str:
        return quote(value, safe="")


class _PathConvertor(Convertor[str]):
    """The rest of the URL path, decoded; ``%2F`` and ``/`` both separate folders."""

    regex = ".+"

    def convert(self, value: str) -> str:
        return unquote(value)

    def to_string(self, value: str) -> str:
        return quote(value)


class _ApiKindConvertor(Convertor[str]):
    """``kernels`` / ``models`` in ``/api/<kinds>/...`` -> the repository kind."""

    regex = "kernels|models"

    def convert(self, value: str) -> str:
        return value.removesuffix("s")

    def to_string(self, value: str) -> str:
        return f"{value}s"


class _FileKindConvertor(Convertor[str]):
    """The prefix of file URLs: ``kernels/`` for kernels, nothing for models."""

    regex = "kernels/|"

    def convert(self, value: str) -> str:
        return "kernel" if value else "model"

    def to_string(self, value: str) -> str:
        return _URL_PREFIXES[value]


register_url_convertor("hub_segment", _SegmentConvertor())
register_url_convertor("hub_path", _PathConvertor())
register_url_convertor("hub_api_kind", _ApiKindConvertor())
register_url_convertor("hub_file_kind", _FileKindConvertor())

"""Repository storage for the local Hub: one bare git repository per Hub repository.

Layout under the data directory::

    repos/<kind>/<namespace>/<name>.git   a bare git repository (kind: "kernel" or "model")
    tmp/                                  scratch space (temporary indexes, repositories being created)
    server.lock                           held (flock) by the one server that serves the directory

Commit ids are real git commit ids, Hub branches are git branches and pull requests are
``refs/pr/<N>`` (as on the Hub), so a repository can be
inspected, cloned or backed up with plain git. Everything goes through git plumbing commands:
blobs are written with ``hash-object -w``, trees are built in a throw-away index file
(``update-index --index-info`` + ``write-tree``), commits with ``commit-tree``, and the branch is
moved last with ``update-ref <new> <expected old>``, an atomic compare-and-swap. The objects of a
commit are written to a quarantine directory under ``tmp/`` (as ``git receive-pack`` does) and
moved into the repository just before that last step, so a refused commit leaves nothing in it.
A crash at any point before the branch moves leaves the branch where it was; at worst the moved
objects are unreferenced and harmless (``git gc`` removes them).

Writes to one repository are serialized by an ``flock`` on a file inside it. Paths and names that
come from clients are validated before they reach git, and nothing is written outside the data
directory: file contents only ever become git objects, never files named after client input.
One server per data directory: opening the storage takes an exclusive lock on ``server.lock``
(another server on the same directory is refused), so whatever a killed server left behind can be
cleared when the next one starts: ``tmp/`` is emptied, and git's own lock files (``*.lock``, which
git leaves if it is killed inside ``update-ref``) are removed.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import itertools
import logging
import os
import re
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import REPO_PART_RULE, is_valid_repo_part

_log = logging.getLogger(__name__)

REPO_KINDS = ("kernel", "model")
DEFAULT_BRANCH = "main"
MAX_PATH_BYTES = 1024
MAX_PATH_SEGMENT_BYTES = 255
MAX_BRANCH_NAME_LENGTH = 255

_COMMIT_SHA = re.compile(r"[0-9a-f]{40}")
_PARENT_COMMIT = re.compile(r"[0-9a-f]{5,40}")  # huggingface_hub accepts abbreviated parents
_PULL_REQUEST_REF = re.compile(r"refs/pr/([1-9][0-9]{0,8})")
_HFS_IGNORED = re.compile("[\u200c-\u200f\u202a-\u202e\u206a-\u206f\ufeff]")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")  # a str that cannot be encoded as UTF-8
_SERVER_LOCK = "server.lock"
_WRITE_LOCK = "hub-write.lock"  # the flock file inside each bare repository (not a git lock file)
_ZERO_OID = "0" * 40
_REGULAR_FILE_MODE = "100644"
_BLOB_CHUNK_BYTES = 1 << 20

# The initial commit of every repository, like the Hub's "initial commit" of a `.gitattributes`.
INITIAL_GITATTRIBUTES = (
    b"# Created by the fused-geglu local Hub. Every file is stored as a regular git blob:\n"
    b"# this server does not use Git LFS.\n"
)
_COMMITTER = {
    "GIT_AUTHOR_NAME": "Local Hub",
    "GIT_AUTHOR_EMAIL": "local-hub@localhost",
    "GIT_COMMITTER_NAME": "Local Hub",
    "GIT_COMMITTER_EMAIL": "local-hub@localhost",
}


class StorageError(Exception):
    """Base class of every error the storage reports; the message is meant for the client."""


class InvalidName(StorageError):
    """A repository, namespace or branch name that the Hub would not accept."""


class InvalidPath(StorageError):
    """A file path inside a repository that is unsafe or malformed."""


class RepoNotFound(StorageError):
    pass


class RepoExists(StorageError):
    pass


class RevisionNotFound(StorageError):
    pass


class EntryNotFound(StorageError):
    pass


class BranchExists(StorageError):
    pass


class ProtectedBranch(StorageError):
    pass


class InvalidRevision(StorageError):
    """A revision argument that cannot name a commit at all (not merely one that does not exist)."""


class ParentCommitMismatch(StorageError):
    """The client's ``parentCommit`` is not the head of the branch any more."""


class ConcurrentUpdate(StorageError):
    """The branch moved between reading it and updating it (another writer won the race)."""


class GitCommandFailed(StorageError):
    pass


class DataDirectoryInUse(RuntimeError):
    """Another server already serves the data directory."""


class NotADataDirectory(RuntimeError):
    """The data directory holds files and no local Hub ever served it: the server would clear its ``tmp``."""


def is_valid_unicode(text: str) -> bool:
    """Whether ``text`` can be encoded as UTF-8 (JSON's ``"\\ud800"`` escapes decode to lone surrogates)."""
    return _LONE_SURROGATE.search(text) is None


def validate_repo_name(value: str, *, is_name: bool = True) -> str:
    """Return ``value`` if it is a valid Hub repository name (or with ``is_name=False`` namespace), else raise
    InvalidName."""
    if not isinstance(value, str) or not is_valid_repo_part(value, is_name=is_name):
        raise InvalidName(f"invalid {'repository name' if is_name else 'namespace'} {value!r}: {REPO_PART_RULE}")
    return value


def validate_repo_path(path: str) -> str:
    """Return ``path`` if it is a safe relative file path inside a repository, else raise InvalidPath.

    Refused: empty paths, absolute paths (``/x``, ``C:/x``), backslashes, control characters,
    empty segments (``a//b``, a trailing ``/``), ``.`` and ``..`` segments, segments that a file
    system may take for ``.git`` (see ``_is_dot_git``: git would silently drop such files from a
    commit), paths longer than MAX_PATH_BYTES and segments longer than MAX_PATH_SEGMENT_BYTES
    (UTF-8 bytes).
    """
    if not isinstance(path, str) or not path:
        raise InvalidPath("empty path: a file path inside the repository is required")
    if not is_valid_unicode(path):
        raise InvalidPath(f"path {path!r} is not valid Unicode (it contains a lone surrogate)")
    if len(path.encode("utf-8", "surrogatepass")) > MAX_PATH_BYTES:
        raise InvalidPath(f"path {path[:64]!r}... is longer than {MAX_PATH_BYTES} bytes")
    if path.startswith("/") or re.match(r"[A-Za-z]:", path):
        raise InvalidPath(f"absolute path {path!r}: paths must be relative to the repository root")
    if "\\" in path:
        raise InvalidPath(f"path {path!r} contains a backslash: use '/' as the separator")
    if any(ord(char) < 32 or ord(char) == 127 for char in path):
        raise InvalidPath(f"path {path!r} contains a control character")
    for segment in path.split("/"):
        if not segment:
            raise InvalidPath(f"path {path!r} has an empty segment (a leading, doubled or trailing '/')")
        if segment in (".", ".."):
            raise InvalidPath(f"path {path!r} contains a {segment!r} segment")
        if _is_dot_git(segment):
            raise InvalidPath(f"path {path!r} contains a '.git' segment, which git reserves")
        if len(segment.encode("utf-8", "surrogatepass")) > MAX_PATH_SEGMENT_BYTES:
            raise InvalidPath(f"path {path!r} has a segment longer than {MAX_PATH_SEGMENT_BYTES} bytes")
    return path


def validate_branch_name(name: str) -> str:
    """Return ``name`` if it is a valid new branch name, else raise InvalidName.

    git's own rules (``git check-ref-format``), plus: not a 40-hex string (it would be ambiguous
    with a commit id in revisions), not starting with ``refs/``, and each ``/``-separated part short
    enough for git to store it as a file with a ``.lock`` beside it.
    """
    if not isinstance(name, str) or not name or len(name) > MAX_BRANCH_NAME_LENGTH:
        raise InvalidName(f"invalid branch name {name!r}: 1 to {MAX_BRANCH_NAME_LENGTH} characters")
    if _COMMIT_SHA.fullmatch(name) or name.startswith("refs/") or not _is_git_ref_name(f"refs/heads/{name}"):
        raise InvalidName(
            f"invalid branch name {name!r}: see `git check-ref-format`; it may not be a commit id or start with 'refs/'"
        )
    longest = MAX_PATH_SEGMENT_BYTES - len(".lock")
    if any(len(part.encode()) > longest for part in name.split("/")):
        raise InvalidName(f"invalid branch name {name[:64]!r}...: each '/'-separated part is at most {longest} bytes")
    return name


def _is_dot_git(segment: str) -> bool:
    """Whether NTFS or HFS+ may resolve a path segment to ``.git``, as git's own checks (``core.protectNTFS``,
    ``core.protectHFS``) see it: any case, the 8.3 short name ``git~1``, trailing dots and spaces, an
    alternate data stream (``.git::$INDEX_ALLOCATION``), and the code points HFS+ ignores."""
    name = _HFS_IGNORED.sub("", segment).casefold().split(":", 1)[0].rstrip(". ")
    return name in (".git", "git~1")


@functools.lru_cache(maxsize=4096)
def _is_git_ref_name(ref: str) -> bool:
    """git's verdict on a full ref name (``git check-ref-format``); cached, being a pure function."""
    if "\0" in ref or not is_valid_unicode(ref):  # git refuses both; neither can be a process argument
        return False
    return subprocess.run(["git", "check-ref-format", ref], env=_git_env(), capture_output=True).returncode == 0


def _git_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for git: no inherited GIT_* variables or user/system config, literal pathspecs."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("GIT_")}
    env.update(
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_LITERAL_PATHSPECS="1",
        GIT_TERMINAL_PROMPT="0",
        LC_ALL="C",
        **_COMMITTER,
    )
    env.update(extra or {})
    return env


@dataclass(frozen=True)
class TreeEntry:
    """A file or directory of a commit: ``oid`` is the git blob or tree id, ``size`` 0 for directories."""

    path: str
    type: str  # "file" or "directory"
    oid: str
    size: int


@dataclass(frozen=True)
class CommitSummary:
    oid: str
    title: str
    timestamp: int  # committer time, seconds since the epoch


# A commit's file listing while it is being edited: path -> (git mode, blob id).
FileMap = dict[str, tuple[str, str]]


@dataclass(frozen=True)
class AddFile:
    """Add or replace a file with an already written blob (see ``Repository.write_blob``)."""

    path: str
    blob_oid: str

    def apply_to(self, files: FileMap) -> None:
        mode = files[self.path][0] if self.path in files else _REGULAR_FILE_MODE
        files[self.path] = (mode, self.blob_oid)


@dataclass(frozen=True)
class DeleteFile:
    path: str

    def apply_to(self, files: FileMap) -> None:
        if files.pop(self.path, None) is None:
            raise EntryNotFound(f"cannot delete {self.path!r}: a file with this name doesn't exist")


@dataclass(frozen=True)
class DeleteFolder:
    path: str

    def apply_to(self, files: FileMap) -> None:
        inside = [name for name in files if name.startswith(self.path + "/")]
        if not inside:
            raise EntryNotFound(f"cannot delete folder {self.path!r}: a folder with this name doesn't exist")
        for name in inside:
            del files[name]


CommitOperation = AddFile | DeleteFile | DeleteFolder


@dataclass(frozen=True)
class CommitResult:
    oid: str
    pull_request: int | None  # N of the pull request ``refs/pr/<N>`` the commit opened, if it opened one


class Repository:
    """One Hub repository, backed by the bare git repository ``git_dir``."""

    def __init__(self, kind: str, namespace: str, name: str, git_dir: Path, tmp_dir: Path) -> None:
        self.kind = kind
        self.namespace = namespace
        self.name = name
        self.git_dir = git_dir
        self._tmp_dir = tmp_dir
        self.private = self._git("config", "--bool", "--get", "hub.private", check=False).strip() == "true"

    @property
    def id(self) -> str:
        return f"{self.namespace}/{self.name}"

    # -- reading -------------------------------------------------------------------------------

    def branches(self) -> dict[str, str]:
        """Branch name -> head commit id, sorted by name."""
        out = self._git("for-each-ref", "--format=%(refname:strip=2)%00%(objectname)", "refs/heads/")
        return dict(sorted(line.split("\0") for line in out.splitlines()))

    def pull_requests(self) -> dict[int, str]:
        """Pull request number -> head commit id, sorted by number."""
        out = self._git("for-each-ref", "--format=%(refname)%00%(objectname)", "refs/pr/")
        numbered = {}
        for ref, commit in (line.split("\0") for line in out.splitlines()):
            if match := _PULL_REQUEST_REF.fullmatch(ref):
                numbered[int(match[1])] = commit
        return dict(sorted(numbered.items()))

    def branch_head(self, branch: str) -> str | None:
        """The head commit of ``branch``, or None when there is no such branch."""
        if not branch or _COMMIT_SHA.fullmatch(branch):
            return None
        return self._ref_head(f"refs/heads/{branch}")

    def resolve(self, revision: str) -> str:
        """The commit id that ``revision`` names: a branch (``v1``, ``refs/heads/v1``), a pull request
        (``refs/pr/1``) or a full commit id."""
        if _COMMIT_SHA.fullmatch(revision):
            if self._git("cat-file", "-t", revision, check=False).strip() == "commit":
                return revision
        else:
            head = self._ref_head(_writable_ref(revision))
            if head is not None:
                return head
        raise RevisionNotFound(f"revision {revision!r} not found in {self.kind} repository {self.id}")

    def entry(self, commit: str, path: str) -> TreeEntry:
        """The file or directory at ``path`` ("" is the root directory) in ``commit``."""
        if not path:
            return TreeEntry("", "directory", self._git("rev-parse", f"{commit}^{{tree}}").strip(), 0)
        for entry in self._ls_tree(commit, "--", path):
            if entry.path == path:
                return entry
        raise EntryNotFound(f"{path!r} not found at revision {commit} of {self.id}")

    def list_tree(self, commit: str, path: str = "", *, recursive: bool = False) -> list[TreeEntry]:
        """The entries of directory ``path`` in ``commit`` (and of its subdirectories when recursive)."""
        directory = self.entry(commit, path)
        if directory.type != "directory":
            raise EntryNotFound(f"{path!r} is a file, not a folder, at revision {commit} of {self.id}")
        recursion = ("-r", "-t") if recursive else ()
        prefix = f"{path}/" if path else ""
        return [
            TreeEntry(prefix + entry.path, entry.type, entry.oid, entry.size)
            for entry in self._ls_tree(*recursion, directory.oid)
        ]

    def iter_blob(self, oid: str) -> Iterator[bytes]:
        """The content of blob ``oid``, streamed in chunks straight from git."""
        process = subprocess.Popen(
            ["git", f"--git-dir={self.git_dir}", "cat-file", "blob", oid],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=_git_env(),
        )
        try:
            while chunk := process.stdout.read(_BLOB_CHUNK_BYTES):
                yield chunk
            if process.wait() != 0:
                raise GitCommandFailed(f"git cat-file blob {oid} failed in {self.id}")
        finally:
            if process.poll() is None:
                process.kill()
            process.stdout.close()
            process.wait()

    def last_commit(self, commit: str, path: str = "") -> CommitSummary:
        """The most recent commit reachable from ``commit`` that changed ``path`` ("" is any path)."""
        pathspec = ("--", path) if path else ()
        oid, timestamp, title = (
            self._git("log", "-1", "--format=%H%x00%ct%x00%s", commit, *pathspec).rstrip("\n").split("\0")
        )
        return CommitSummary(oid=oid, title=title, timestamp=int(timestamp))

    # -- writing -------------------------------------------------------------------------------

    @contextlib.contextmanager
    def quarantine(self) -> Iterator[Path]:
        """An object directory for one commit's objects (``write_blob(..., quarantine)``): they stay out
        of the repository until ``commit(..., quarantine=...)`` moves them in, and are deleted on exit."""
        staged = Path(tempfile.mkdtemp(dir=self._tmp_dir, prefix="objects-"))
        try:
            yield staged
        finally:
            shutil.rmtree(staged, ignore_errors=True)

    def write_blob(self, content: bytes, quarantine: Path | None = None) -> str:
        """Store ``content`` as a git blob (in ``quarantine`` if given) and return its id. Moves no branch."""
        return self._git("hash-object", "-w", "--stdin", input=content, env=_object_env(self, quarantine)).strip()

    def create_branch(self, branch: str, start_revision: str | None = None) -> str:
        """Create ``branch`` at ``start_revision`` (default: the head of main); return its commit."""
        validate_branch_name(branch)
        start = self.resolve(start_revision or DEFAULT_BRANCH)
        with self._write_lock():
            if self.branch_head(branch) is not None:
                raise BranchExists(f"branch {branch!r} already exists in {self.id}")
            self._move_ref(f"refs/heads/{branch}", start, expected=None)
        return start

    def delete_branch(self, branch: str) -> None:
        if branch == DEFAULT_BRANCH:
            raise ProtectedBranch(f"the {DEFAULT_BRANCH!r} branch of {self.id} cannot be deleted")
        with self._write_lock():
            head = self.branch_head(branch)
            if head is None:
                raise RevisionNotFound(f"branch {branch!r} not found in {self.id}")
            if self._run("update-ref", "-d", f"refs/heads/{branch}", head).returncode != 0:
                raise ConcurrentUpdate(f"branch {branch!r} of {self.id} was updated concurrently; retry")

    def commit(
        self,
        revision: str,
        operations: Sequence[CommitOperation],
        *,
        summary: str,
        description: str = "",
        parent_commit: str | None = None,
        create_pr: bool = False,
        quarantine: Path | None = None,
    ) -> CommitResult:
        """Apply ``operations`` in order on top of ``revision`` (a branch or ``refs/pr/<N>``).

        ``parent_commit`` (a full or abbreviated commit id), when given, must be the head of ``revision``.
        With ``create_pr`` the revision does not move: the commit opens the next pull request,
        ``refs/pr/<N>``, as the Hub does. A commit that changes nothing is still recorded, as an empty commit.
        ``quarantine`` holds the blobs that ``operations`` add, if they were written to one.
        """
        if parent_commit is not None:
            if not _PARENT_COMMIT.fullmatch(parent_commit.lower()):
                raise InvalidRevision(f"parentCommit {parent_commit!r} is not a (possibly abbreviated) commit id")
            parent_commit = parent_commit.lower()
        message = f"{summary}\n\n{description}" if description else summary
        ref = _writable_ref(revision)
        with self._write_lock():
            head = self._ref_head(ref)
            if head is None:
                raise RevisionNotFound(
                    f"revision {revision!r} not found in {self.id}: commits go to an existing branch "
                    "or pull request (create the branch first)"
                )
            if parent_commit is not None and not head.startswith(parent_commit):
                raise ParentCommitMismatch(
                    f"parentCommit {parent_commit} is not the head of {revision!r} ({head}): the branch has moved"
                )
            files = self._files(head)
            for operation in operations:
                operation.apply_to(files)
            _check_no_file_folder_clash(files)
            store = functools.partial(self._store_commit, files, parent=head, message=message, quarantine=quarantine)
            if not create_pr:
                return CommitResult(store(ref=ref), None)
            number = max(self.pull_requests(), default=0) + 1
            return CommitResult(store(ref=f"refs/pr/{number}", new_ref=True), number)

    # -- internals -----------------------------------------------------------------------------

    def _ref_head(self, ref: str) -> str | None:
        """The commit that the full ref name ``ref`` points at, or None when there is no such ref."""
        if not _is_git_ref_name(ref):
            return None
        head = self._git("show-ref", "--verify", "--hash", ref, check=False).strip()
        return head or None

    def _store_commit(
        self,
        files: FileMap,
        *,
        parent: str | None,
        message: str,
        ref: str,
        new_ref: bool = False,
        quarantine: Path | None = None,
    ) -> str:
        """Write the tree of ``files`` and a commit of it on top of ``parent``, then point ``ref`` at it:
        ``ref`` must still be at ``parent``, or not exist yet when ``new_ref``."""
        objects = _object_env(self, quarantine)
        tree = self._write_tree(files, objects)
        parents = ("-p", parent) if parent else ()
        commit = self._git("commit-tree", tree, *parents, input=message.encode(), env=objects).strip()
        if quarantine is not None:
            self._admit_objects(quarantine)
        self._move_ref(ref, commit, expected=None if new_ref else parent)
        return commit

    def _admit_objects(self, quarantine: Path) -> None:
        """Move the loose objects of ``quarantine`` into the repository, each with an atomic rename."""
        for staged in quarantine.glob("??/*"):
            target = self.git_dir / "objects" / staged.parent.name / staged.name
            target.parent.mkdir(exist_ok=True)
            os.replace(staged, target)  # an object's content is its name: replacing one changes nothing

    def _move_ref(self, ref: str, new: str, *, expected: str | None) -> None:
        """Point ``ref`` at ``new`` if it is still at ``expected`` (None: does not exist yet).

        This is the single step that makes a write visible, and it is atomic.
        """
        result = self._run("update-ref", ref, new, expected or _ZERO_OID)
        if result.returncode != 0:
            raise ConcurrentUpdate(
                f"{ref} of {self.id} could not be updated (it was updated concurrently, or a branch "
                f"name conflicts with it: {result.stderr.decode(errors='replace').strip()}); retry"
            )

    def _files(self, commit: str) -> FileMap:
        return {entry.path: (entry.mode, entry.oid) for entry in self._ls_tree_raw("-r", commit)}

    def _write_tree(self, files: FileMap, objects_env: Mapping[str, str]) -> str:
        records = b"".join(f"{mode} {oid}\t{path}".encode() + b"\0" for path, (mode, oid) in sorted(files.items()))
        with tempfile.TemporaryDirectory(dir=self._tmp_dir, prefix="index-") as scratch:
            index_env = {"GIT_INDEX_FILE": str(Path(scratch) / "index"), **objects_env}
            self._git("update-index", "-z", "--index-info", input=records, env=index_env)
            return self._git("write-tree", env=index_env).strip()

    def _ls_tree(self, *args: str) -> list[TreeEntry]:
        return [
            TreeEntry(raw.path, "directory" if raw.type == "tree" else "file", raw.oid, raw.size)
            for raw in self._ls_tree_raw(*args)
            if raw.type in ("blob", "tree")
        ]

    def _ls_tree_raw(self, *args: str) -> list[_RawTreeEntry]:
        out = self._git("ls-tree", "-l", "-z", *args)
        entries = []
        for record in filter(None, out.split("\0")):
            meta, _, path = record.partition("\t")
            mode, object_type, oid, size = meta.split()
            entries.append(_RawTreeEntry(path, mode, object_type, oid, 0 if size == "-" else int(size)))
        return entries

    @contextlib.contextmanager
    def _write_lock(self) -> Iterator[None]:
        """Serialize writers of this repository, across threads and processes (flock)."""
        with open(self.git_dir / _WRITE_LOCK, "a") as lock_file:
            fcntl.flock(lock_file, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock_file, fcntl.LOCK_UN)

    def _git(
        self, *args: str, input: bytes | None = None, env: Mapping[str, str] | None = None, check: bool = True
    ) -> str:
        result = self._run(*args, input=input, env=env)
        if check and result.returncode != 0:
            stderr = result.stderr.decode(errors="replace").strip()
            raise GitCommandFailed(f"git {args[0]} failed in {self.kind} repository {self.id}: {stderr}")
        return result.stdout.decode("utf-8", "surrogateescape")

    def _run(
        self, *args: str, input: bytes | None = None, env: Mapping[str, str] | None = None
    ) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["git", f"--git-dir={self.git_dir}", *args], input=input, capture_output=True, env=_git_env(env)
        )


@dataclass(frozen=True)
class _RawTreeEntry:
    path: str
    mode: str
    type: str  # git object type: "blob", "tree" or "commit"
    oid: str
    size: int


def _object_env(repo: Repository, quarantine: Path | None) -> dict[str, str]:
    """git's environment to write new objects to ``quarantine`` while reading the repository's too."""
    if quarantine is None:
        return {}
    return {"GIT_OBJECT_DIRECTORY": str(quarantine), "GIT_ALTERNATE_OBJECT_DIRECTORIES": str(repo.git_dir / "objects")}


def _writable_ref(revision: str) -> str:
    """The full ref name of a branch (``v1``, ``refs/heads/v1``) or pull request (``refs/pr/1``) revision."""
    if _PULL_REQUEST_REF.fullmatch(revision):
        return revision
    return "refs/heads/" + revision.removeprefix("refs/heads/")


def _check_no_file_folder_clash(files: FileMap) -> None:
    folders = set()
    for path in files:
        parents = path.split("/")[:-1]
        folders.update("/".join(parents[: depth + 1]) for depth in range(len(parents)))
    clashes = sorted(folders & files.keys())
    if clashes:
        raise InvalidPath(f"{clashes[0]!r} would be both a file and a folder: delete one of them first")


class HubStorage:
    """All repositories under one data directory (created if missing)."""

    def __init__(self, data_dir: str | os.PathLike[str]) -> None:
        if shutil.which("git") is None:
            raise RuntimeError("the local Hub stores repositories with git: install the git command line (2.28+)")
        self.data_dir = Path(data_dir).resolve()
        self._repos_dir = self.data_dir / "repos"
        self._tmp_dir = self.data_dir / "tmp"
        # A fresh volume's lost+found does not make its mount point someone's directory.
        entries = [p for p in self.data_dir.iterdir() if p.name != "lost+found"] if self.data_dir.is_dir() else []
        if entries and not (self.data_dir / _SERVER_LOCK).exists():
            raise NotADataDirectory(
                f"{self.data_dir} holds files but is not a local Hub's data directory (it has no {_SERVER_LOCK}): "
                "give a new or empty directory, or one a local Hub has served"
            )
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._server_lock = _lock_data_dir(self.data_dir)
        # This is the only server on the directory now: whatever a killed one left behind is stale.
        shutil.rmtree(self._tmp_dir, ignore_errors=True)
        self._tmp_dir.mkdir()
        self._repos_dir.mkdir(exist_ok=True)
        for stale in list(_git_lock_files(self._repos_dir)):
            stale.unlink(missing_ok=True)
            _log.warning("local Hub: removed %s, a git lock file left by a server that was killed", stale)
        self._open_repos: dict[tuple[str, str, str], Repository] = {}
        self._open_repos_lock = threading.Lock()
        self._create_lock = threading.Lock()

    def close(self) -> None:
        """Release the data directory for another server."""
        self._server_lock.close()  # closing the file releases its flock

    def repo(self, kind: str, namespace: str, name: str) -> Repository:
        """The existing repository ``namespace/name`` of ``kind``, else RepoNotFound.

        As on the Hub, the id's case does not matter: ``Org/Repo`` finds ``org/repo``, and the repository
        keeps the spelling it was created with (``Repository.id``).
        """
        key = (kind, namespace.lower(), name.lower())
        with self._open_repos_lock:
            if key not in self._open_repos:
                self._git_dir(kind, namespace, name, missing=RepoNotFound)  # validates kind and names
                git_dir = self._existing_git_dir(kind, namespace, name)
                if git_dir is None:
                    raise RepoNotFound(f"{kind} repository {namespace}/{name} not found")
                self._open_repos[key] = Repository(kind, git_dir.parent.name, git_dir.stem, git_dir, self._tmp_dir)
            return self._open_repos[key]

    def create_repo(self, kind: str, namespace: str, name: str, *, private: bool = False) -> Repository:
        """Create a repository whose ``main`` branch holds one initial commit (a ``.gitattributes``).

        The repository is assembled under tmp/ and renamed into place, so it appears complete or not at all.
        """
        self._git_dir(kind, namespace, name, missing=InvalidName)  # validates kind and names
        with self._create_lock:
            if (existing := self._existing_git_dir(kind, namespace, name)) is not None:
                raise RepoExists(f"{kind} repository {existing.parent.name}/{existing.stem} already exists")
            namespace = self._stored_namespace(namespace)
            git_dir = self._git_dir(kind, namespace, name, missing=InvalidName)
            staging = Path(tempfile.mkdtemp(dir=self._tmp_dir, prefix="new-repo-", suffix=".git"))
            try:
                subprocess.run(
                    ["git", "init", "--bare", "--quiet", f"--initial-branch={DEFAULT_BRANCH}", str(staging)],
                    check=True,
                    capture_output=True,
                    env=_git_env(),
                )
                draft = Repository(kind, namespace, name, staging, self._tmp_dir)
                draft._git("config", "hub.private", "true" if private else "false")
                gitattributes = draft.write_blob(INITIAL_GITATTRIBUTES)
                draft._store_commit(
                    {".gitattributes": (_REGULAR_FILE_MODE, gitattributes)},
                    parent=None,
                    message="initial commit",
                    ref=f"refs/heads/{DEFAULT_BRANCH}",
                    new_ref=True,
                )
                git_dir.parent.mkdir(parents=True, exist_ok=True)
                os.rename(staging, git_dir)
            except BaseException as error:
                shutil.rmtree(staging, ignore_errors=True)
                if isinstance(error, OSError) and git_dir.exists():  # another process created it first
                    raise RepoExists(f"{kind} repository {namespace}/{name} already exists") from error
                raise
        return self.repo(kind, namespace, name)

    def has_namespace(self, namespace: str) -> bool:
        """Whether any repository, of any kind, lives under ``namespace``."""
        if not is_valid_repo_part(namespace):
            return False
        return any(self._namespace_dirs(kind, namespace) for kind in REPO_KINDS)

    def _stored_namespace(self, namespace: str) -> str:
        """``namespace`` as its first repository, of either kind, spelled it; as given for a new one."""
        for kind in REPO_KINDS:
            for path in self._namespace_dirs(kind, namespace):
                return path.name
        return namespace

    def _namespace_dirs(self, kind: str, namespace: str) -> list[Path]:
        """The directories of ``kind`` whose name is ``namespace`` in any case."""
        kind_dir = self._repos_dir / kind
        if not kind_dir.is_dir():
            return []
        return [path for path in kind_dir.iterdir() if path.is_dir() and path.name.lower() == namespace.lower()]

    def _existing_git_dir(self, kind: str, namespace: str, name: str) -> Path | None:
        """The git directory of ``namespace/name`` as stored, matched without regard to case, or None."""
        wanted = f"{name}.git".lower()
        for namespace_dir in self._namespace_dirs(kind, namespace):
            for git_dir in namespace_dir.iterdir():
                if git_dir.name.lower() == wanted and git_dir.is_dir():
                    return git_dir
        return None

    def _git_dir(self, kind: str, namespace: str, name: str, *, missing: type[StorageError]) -> Path:
        if kind not in REPO_KINDS:
            raise missing(f"unsupported repository type {kind!r}: the local Hub stores {', '.join(REPO_KINDS)}")
        try:
            validate_repo_name(namespace, is_name=False)
            validate_repo_name(name)
        except InvalidName as error:
            raise missing(str(error)) from None
        return self._repos_dir / kind / namespace / f"{name}.git"


def _lock_data_dir(data_dir: Path):
    """Hold ``data_dir/server.lock`` exclusively for as long as the returned file stays open."""
    lock_file = open(data_dir / _SERVER_LOCK, "a")
    try:
        fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock_file.close()
        raise DataDirectoryInUse(
            f"another local Hub is already serving {data_dir}: run one server per data directory"
        ) from None
    return lock_file


def _git_lock_files(repos_dir: Path) -> Iterator[Path]:
    """git's lock files (``refs/heads/main.lock``, ``packed-refs.lock``, ...) in every repository."""
    for git_dir in repos_dir.glob("*/*/*.git"):
        for lock in itertools.chain(git_dir.glob("*.lock"), (git_dir / "refs").rglob("*.lock")):
            if lock.name != _WRITE_LOCK:
                yield lock

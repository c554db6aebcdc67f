"""``python -m geglu_triton publish``: upload a build to a Hub kernel repository.

Mirrors kernel-builder's ``upload`` (kernel-builder/src/upload.rs):

- the ``kernel`` repository is created if missing (not with ``--create-pr``:
  a pull request needs an existing repository);
- the build goes to the branch ``v<version>``, the version all variants'
  metadata.json agree on; the branch is created (from ``main``) if missing;
- on a new branch, the files it inherits under ``build/`` and ``benchmarks/``
  that are not being uploaded are deleted; on an existing branch, only stale
  files inside the uploaded variants (``build/<variant>/...``) and stale
  ``benchmarks/benchmark*.py`` are; other version branches are never touched;
- ``benchmarks/benchmark*.py`` of the kernel source go to the version branch;
- the repository card goes to ``main`` as ``README.md``;
- commits hold at most 1,000 operations each.

On top of kernel-builder:

- only files whose content differs from the branch are uploaded (git blob
  SHA-1, or SHA-256 for LFS files, compared with the remote tree), and a branch
  with nothing to change gets no commit: publishing the same build twice
  creates no commit at all;
- a build that fails ``check`` is refused, and so is a dirty build (its
  metadata says the kernel source had uncommitted changes, or has no source
  revision) unless ``allow_dirty``;
- the card is rendered at publish time for the repository published to.

Bytecode never leaves the machine: the files uploaded are
``layout.shipped_files``, and ``check`` refuses a build that holds any.
The token is passed to huggingface_hub and never printed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import huggingface_hub
from huggingface_hub import CommitOperationAdd, CommitOperationDelete, HfApi, get_session
from huggingface_hub.errors import (
    EntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.hf_api import RepoFile
from kernels._rust import Metadata
from packaging.version import Version

from . import REPO_ROOT, layout
from .buildinfo import read_config
from .card import render_card
from .check import check_build
from .errors import (
    UserError,
    check_client_login,
    client_token,
    directory_to_read,
    from_hub_error,
    one_line,
    sends_a_token,
    validate_endpoint,
    validate_repo_id,
)

REPO_TYPE = "kernel"
MAIN_BRANCH = "main"
README_PATH = "README.md"
BUILD_PREFIX = "build/"
BENCHMARKS_PREFIX = f"{layout.BENCHMARKS_DIR}/"
COMMIT_BATCH_SIZE = 1_000
DEFAULT_ENDPOINT = "https://huggingface.co"
# The first release whose create_commit accepts repo_type="kernel" (2.0 to 2.2 reject it).
MIN_HUGGINGFACE_HUB = Version("2.3")
#: How long the command waits for the Hub to connect, or to send or take the next bytes of a request
#: (huggingface_hub's client waits forever: a server that takes the connection and never answers would
#: hang publish). Every request publishing makes is small (the build's Python sources and JSON).
HUB_TIMEOUT_S = 60.0


def bound_hub_requests(timeout_s: float) -> None:
    """Make every request of huggingface_hub's shared client in this process give up after ``timeout_s``
    without progress (the command's own process: ``run`` calls it; ``publish`` leaves callers' clients alone).

    The client's default timeout is not enough: some calls (the paginated file listing) pass ``timeout=None``
    per request. A request hook sets the request's ``timeout`` extension, which httpx's transports read when
    they send it, after those arguments were applied.
    """
    session = get_session()
    timeout = type(session.timeout)(timeout_s).as_dict()  # huggingface_hub's httpx flavour's Timeout

    def bounded(request) -> None:
        request.extensions["timeout"] = timeout

    hooks = session.event_hooks
    session.event_hooks = {**hooks, "request": [*hooks["request"], bounded]}


class PublishError(UserError):
    """The build cannot be published, or the Hub refused it; the message says why and what to do."""


@dataclass
class BranchPlan:
    """What publishing changes on one branch: files to upload (changed ones only) and to delete."""

    branch: str
    is_new: bool
    uploads: dict[str, bytes] = field(default_factory=dict, repr=False)  # repo path -> content
    deletions: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)

    @property
    def operation_count(self) -> int:
        return len(self.uploads) + len(self.deletions)

    def operations(self) -> list[CommitOperationAdd | CommitOperationDelete]:
        """Deletions first, then additions, each sorted by path (fresh objects: commits mutate them)."""
        return [CommitOperationDelete(path_in_repo=path) for path in sorted(self.deletions)] + [
            CommitOperationAdd(path_in_repo=path, path_or_fileobj=content)
            for path, content in sorted(self.uploads.items())
        ]

    def summary(self) -> str:
        new = " (new branch)" if self.is_new else ""
        return (
            f"{self.branch}{new}: {len(self.uploads)} to upload, {len(self.deletions)} to delete, "
            f"{len(self.unchanged)} unchanged"
        )

    def changes(self) -> list[str]:
        """One line per change, as ``--dry-run`` prints them: ``+ path`` uploaded, ``- path`` deleted."""
        return [f"  - {path}" for path in sorted(self.deletions)] + [f"  + {path}" for path in sorted(self.uploads)]


@dataclass
class PublishReport:
    """The outcome of ``publish``: the plan per branch, and the commits (or pull requests) made."""

    repo_id: str
    version_branch: str
    dry_run: bool
    plans: list[BranchPlan]
    commits: dict[str, list[str]] = field(default_factory=dict)  # branch -> commit oids, in order
    pull_requests: dict[str, str] = field(default_factory=dict)  # branch -> pull request URL

    @property
    def changed(self) -> bool:
        return any(plan.operation_count for plan in self.plans)

    def __str__(self) -> str:
        what = "dry run of " if self.dry_run else ""
        plans = "; ".join(plan.summary() for plan in self.plans)
        commits = sum(len(oids) for oids in self.commits.values())
        return f"{what}{self.repo_id} {self.version_branch}: {plans}; {commits} commit(s)"


def git_blob_sha1(content: bytes) -> str:
    """The git blob id of a file's content: what the Hub tree lists as ``oid``."""
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


def _is_same_content(remote: RepoFile, content: bytes) -> bool:
    if remote.lfs is not None:
        return remote.lfs.sha256 == hashlib.sha256(content).hexdigest()
    return remote.blob_id == git_blob_sha1(content)


def _read_build(build_dir: Path) -> tuple[dict[Path, Metadata], str]:
    """The variants of a build with their metadata, and the branch ``v<version>`` they agree on."""
    variants = layout.discover_variants(build_dir)
    if not variants:
        variant_given = layout.variant_given_for_build(build_dir, "--build")
        if variant_given:
            raise PublishError(variant_given)
        raise PublishError(
            f"{build_dir}: no build variants (directories with {layout.METADATA_FILE}); run `build` first"
        )
    metadata = {}
    for variant in variants:
        try:
            metadata[variant] = Metadata.read_from_file(variant / layout.METADATA_FILE)
        except ValueError as err:
            raise PublishError(f"{variant / layout.METADATA_FILE}: kernels-data cannot parse it: {err}") from err
    versions = {m.version for m in metadata.values()}
    if len(versions) > 1:
        found = ", ".join(f"{variant.name}: {m.version}" for variant, m in metadata.items())
        raise PublishError(f"{build_dir}: the variants disagree on the kernel version ({found}); rebuild the kernel")
    return metadata, f"v{versions.pop()}"


def _refuse_dirty(metadata: dict[Path, Metadata]) -> None:
    dirty, unknown = [], []
    for variant, variant_metadata in metadata.items():
        provenance = variant_metadata.provenance
        source = provenance.kernel if provenance is not None else None
        if source is None:
            unknown.append(variant.name)
        elif source.dirty:
            dirty.append(variant.name)
    reasons = []
    if dirty:
        reasons.append(f"made from uncommitted changes ({', '.join(dirty)})")
    if unknown:
        reasons.append(f"made without a known source revision ({', '.join(unknown)})")
    if reasons:
        raise PublishError(
            f"refusing to publish a build {' and '.join(reasons)}: its recorded revision does not identify "
            "its sources. Commit, rebuild and publish again, or pass --allow-dirty"
        )


def _refuse_failing_check(build_dir: Path, source_root: Path, *, import_check: bool) -> None:
    violations = check_build(build_dir, source_root=source_root, import_check=import_check)
    if violations:
        more = f" and {len(violations) - 1} more" if len(violations) > 1 else ""
        raise PublishError(
            f"refusing to publish {build_dir}: it fails `check` ({violations[0]}{more}); "
            f"`python -m geglu_triton check {build_dir}` lists every violation"
        )


def _local_version_files(variants: list[Path], source_root: Path) -> dict[str, bytes]:
    """What the version branch must hold: every shipped file of each variant, and the benchmark scripts."""
    files = {
        f"{BUILD_PREFIX}{variant.name}/{relpath}": (variant / relpath).read_bytes()
        for variant in variants
        for relpath in layout.shipped_files(variant)
    }
    files.update(
        {f"{BENCHMARKS_PREFIX}{script.name}": script.read_bytes() for script in layout.benchmark_scripts(source_root)}
    )
    return files


def _is_stale(path: str, *, is_new_branch: bool, variant_prefixes: list[str]) -> bool:
    """Whether a remote file of the version branch that is not being uploaded must be deleted."""
    if path.startswith(BUILD_PREFIX):
        return is_new_branch or any(path.startswith(prefix) for prefix in variant_prefixes)
    if path.startswith(BENCHMARKS_PREFIX):
        return is_new_branch or layout.is_benchmark_script(path.rsplit("/", 1)[-1])
    return False


def plan_branch(
    branch: str,
    local: dict[str, bytes],
    remote: dict[str, RepoFile],
    *,
    is_new: bool,
    stale: Callable[[str], bool] = lambda path: False,
) -> BranchPlan:
    """Compare what a branch must hold with what it holds: changed files to upload, stale ones to delete."""
    plan = BranchPlan(branch=branch, is_new=is_new)
    for path, content in local.items():
        if path in remote and _is_same_content(remote[path], content):
            plan.unchanged.append(path)
        else:
            plan.uploads[path] = content
    plan.deletions = sorted(path for path in remote if path not in local and stale(path))
    return plan


class _Hub:
    """The few Hub calls publishing makes, on a kernel repository; a failed call raises a one-line PublishError."""

    def __init__(self, api: HfApi, repo_id: str, endpoint_source: str = "--endpoint") -> None:
        if Version(huggingface_hub.__version__) < MIN_HUGGINGFACE_HUB:
            raise PublishError(
                f"huggingface_hub {huggingface_hub.__version__} cannot commit to kernel repositories; "
                f"publishing needs huggingface_hub >= {MIN_HUGGINGFACE_HUB}"
            )
        self.api = api
        self.repo_id = repo_id
        self.endpoint_source = endpoint_source

    def _raise_translated(self, err: Exception, doing: str, hint: str = "") -> None:
        """Raise the one-line PublishError of a Hub or network error (what was sent, what to do); else return."""
        translated = from_hub_error(
            err, endpoint=self.api.endpoint, token_sent=sends_a_token(self.api.token), endpoint_source=self.endpoint_source
        )
        if translated is not None:
            raise PublishError(f"cannot {doing}: {translated}{hint}") from err
        if isinstance(err, (json.JSONDecodeError, KeyError)):  # an answer, but not a Hub's (a web page, other JSON)
            raise PublishError(
                f"cannot {doing}: the server at {self.api.endpoint} did not answer as a Hub does "
                f"({type(err).__name__}: {one_line(err)}): check --endpoint or HF_ENDPOINT"
            ) from err

    def create_repo(self, *, private: bool) -> None:
        try:
            url = self.api.create_repo(self.repo_id, repo_type=REPO_TYPE, private=private, exist_ok=True)
        except Exception as err:
            self._raise_translated(err, f"create the kernel repository {self.repo_id}")
            raise
        self.repo_id = url.repo_id or self.repo_id  # the Hub's spelling of the name

    def branches(self) -> set[str] | None:
        """The branch names of the repository, or None when it does not exist."""
        try:
            refs = self.api.list_repo_refs(self.repo_id, repo_type=REPO_TYPE)
        except RepositoryNotFoundError:
            return None
        except Exception as err:
            self._raise_translated(err, f"list the branches of {self.repo_id}")
            raise
        return {branch.name for branch in refs.branches}

    def create_branch(self, branch: str, *, create_pr: bool) -> None:
        try:
            self.api.create_branch(self.repo_id, branch=branch, repo_type=REPO_TYPE)
        except Exception as err:
            hint = (
                f"; pull requests can only target an existing branch: ask a maintainer of {self.repo_id} "
                f"to create {branch!r} first"
                if create_pr
                else ""
            )
            self._raise_translated(err, f"create the branch {branch!r} of {self.repo_id}", hint)
            raise

    def files(self, revision: str, *, recursive: bool) -> dict[str, RepoFile]:
        """The files of a revision; {} when the repository or revision has none."""
        try:
            entries = self.api.list_repo_tree(self.repo_id, revision=revision, recursive=recursive, repo_type=REPO_TYPE)
            return {entry.path: entry for entry in entries if isinstance(entry, RepoFile)}
        except (RepositoryNotFoundError, RevisionNotFoundError, EntryNotFoundError):
            return {}
        except Exception as err:
            self._raise_translated(err, f"list the files of {self.repo_id} at {revision!r}")
            raise

    def commit(
        self, plan: BranchPlan, *, message: str, create_pr: bool, echo: Callable[[str], None]
    ) -> tuple[list[str], str | None]:
        """Commit a plan in batches; returns the commit oids and the pull request URL, if one was opened."""
        operations = plan.operations()
        batches = [operations[i : i + COMMIT_BATCH_SIZE] for i in range(0, len(operations), COMMIT_BATCH_SIZE)]
        oids, pr_url, pr_revision = [], None, None
        for index, batch in enumerate(batches, start=1):
            suffix = f" (batch {index}/{len(batches)})" if len(batches) > 1 else ""
            echo(f"{plan.branch}: committing batch {index}/{len(batches)}, {len(batch)} operations")
            open_pr = create_pr and pr_revision is None
            try:
                info = self.api.create_commit(
                    self.repo_id,
                    batch,
                    commit_message=message + suffix,
                    revision=pr_revision or plan.branch,
                    create_pr=open_pr,
                    repo_type=REPO_TYPE,
                )
            except Exception as err:
                # A branch created for this build, or one some batches reached, now holds part of it at most.
                partial = plan.is_new or index > 1
                hint = f"; {plan.branch!r} may hold part of this build: run publish again" if partial else ""
                self._raise_translated(err, f"commit to {plan.branch!r} of {self.repo_id}", hint)
                raise
            oids.append(info.oid)
            if open_pr:
                pr_url, pr_revision = info.pr_url, info.pr_revision
        return oids, pr_url


def publish(
    build_dir: Path,
    repo_id: str | None = None,
    *,
    api: HfApi,
    source_root: Path = REPO_ROOT,
    private: bool = False,
    create_pr: bool = False,
    dry_run: bool = False,
    allow_dirty: bool = False,
    import_check: bool = True,
    echo: Callable[[str], None] = print,
    endpoint_source: str = "--endpoint",
) -> PublishReport:
    """Publish the build in ``build_dir`` (of the kernel source at ``source_root``) to ``repo_id``.

    ``repo_id`` defaults to build.toml's ``[general.hub] repo-id``. With
    ``dry_run`` nothing is changed on the Hub (not even the repository or the
    branch is created); the report then holds what would be done.
    ``import_check=False`` skips the slowest part of ``check``, importing the
    build in a fresh interpreter (seconds), for callers that have just
    imported it themselves; the command line always runs it. ``echo`` receives
    the progress lines; ``endpoint_source`` is where the api's endpoint came
    from, as the advice of a network error names it. Raises PublishError (or ConfigError for a bad
    build.toml, UsageError for a malformed repository id) with what went
    wrong, before any request when the input is at fault.
    """
    build_dir, source_root = Path(build_dir), Path(source_root)
    metadata, version_branch = _read_build(build_dir)
    variants = list(metadata)
    if not allow_dirty:
        _refuse_dirty(metadata)
    _refuse_failing_check(build_dir, source_root, import_check=import_check)
    if repo_id is None:
        repo_id = read_config(source_root).repo_id
        if repo_id is None:
            raise PublishError(f"{source_root}/build.toml has no [general.hub] repo-id; pass --repo-id")
        validate_repo_id(repo_id, option=f"{source_root}/build.toml's [general.hub] repo-id")
    else:
        validate_repo_id(repo_id)

    hub = _Hub(api, repo_id, endpoint_source)
    if not (dry_run or create_pr):
        hub.create_repo(private=private)
    branches = hub.branches()
    if branches is None:
        if create_pr:
            raise PublishError(
                f"{repo_id} does not exist on {api.endpoint}: a pull request needs an existing repository"
            )
        branches = set()  # a dry run against a repository that publishing would create
    is_new = version_branch not in branches
    if is_new and not dry_run:
        hub.create_branch(version_branch, create_pr=create_pr)
    # A branch that does not exist yet (dry run) would start from main: what it would inherit.
    inherited_from = MAIN_BRANCH if is_new and dry_run else version_branch

    variant_prefixes = [f"{BUILD_PREFIX}{variant.name}/" for variant in variants]
    card = render_card(variants, repo_id=hub.repo_id, has_benchmarks=bool(layout.benchmark_scripts(source_root)))
    plans = [
        plan_branch(
            version_branch,
            _local_version_files(variants, source_root),
            hub.files(inherited_from, recursive=True),
            is_new=is_new,
            stale=lambda path: _is_stale(path, is_new_branch=is_new, variant_prefixes=variant_prefixes),
        ),
        plan_branch(
            MAIN_BRANCH,
            {README_PATH: card.encode("utf-8")},
            hub.files(MAIN_BRANCH, recursive=False),
            is_new=False,
        ),
    ]
    report = PublishReport(repo_id=hub.repo_id, version_branch=version_branch, dry_run=dry_run, plans=plans)

    echo(f"{'dry run: ' if dry_run else ''}publishing {build_dir} to {hub.repo_id} ({api.endpoint})")
    for plan in plans:
        echo(plan.summary())
        if dry_run:
            for line in plan.changes():
                echo(line)
    if dry_run:
        return report
    messages = {
        version_branch: f"Upload the {version_branch} build (geglu-triton)",
        MAIN_BRANCH: "Update the kernel card",
    }
    for plan in plans:
        if not plan.operation_count:
            continue
        oids, pr_url = hub.commit(plan, message=messages[plan.branch], create_pr=create_pr, echo=echo)
        report.commits[plan.branch] = oids
        if pr_url is not None:
            report.pull_requests[plan.branch] = pr_url
            echo(f"{plan.branch}: pull request opened: {pr_url}")
    echo("no changes to upload" if not report.changed else f"published {hub.repo_id} {version_branch}")
    return report


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--build", type=directory_to_read, default=REPO_ROOT / "build", help="the build to publish (default: build/)"
    )
    parser.add_argument("--repo-id", help="the Hub kernel repository (default: [general.hub] repo-id of build.toml)")
    parser.add_argument("--endpoint", help=f"the Hub URL (default: HF_ENDPOINT, else {DEFAULT_ENDPOINT})")
    parser.add_argument(
        "--token", type=client_token, help="a Hub token (default: HF_TOKEN, else the stored login); never printed"
    )
    parser.add_argument("--private", action="store_true", help="create the repository as private")
    parser.add_argument("--create-pr", action="store_true", help="open pull requests instead of committing")
    parser.add_argument(
        "--dry-run", action="store_true", help="print what would be uploaded and deleted; change nothing"
    )
    parser.add_argument("--allow-dirty", action="store_true", help="publish a build of uncommitted changes")


def run(args: argparse.Namespace) -> int:
    # Where the endpoint comes from, as a network error's advice names it (cli's translation reads it too).
    if args.endpoint is not None:
        endpoint, args.endpoint_source = validate_endpoint(args.endpoint), "--endpoint"
    elif "HF_ENDPOINT" in os.environ:
        endpoint = validate_endpoint(os.environ["HF_ENDPOINT"], option="HF_ENDPOINT")
        args.endpoint_source = "HF_ENDPOINT"
    else:
        endpoint, args.endpoint_source = DEFAULT_ENDPOINT, f"--endpoint (the default is {DEFAULT_ENDPOINT})"
    args.endpoint = endpoint  # what cli's error translation names
    if args.repo_id is not None:
        validate_repo_id(args.repo_id)
    check_client_login(args.token)
    api = HfApi(endpoint=endpoint, token=args.token)  # None: huggingface_hub's own login, as it decides
    bound_hub_requests(HUB_TIMEOUT_S)
    publish(
        args.build,
        args.repo_id,
        api=api,
        private=args.private,
        create_pr=args.create_pr,
        dry_run=args.dry_run,
        allow_dirty=args.allow_dirty,
        endpoint_source=args.endpoint_source,
    )
    return 0

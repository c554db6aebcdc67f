"""Crash safety of the local Hub: SIGKILL the server during commits, restart it, check the repository.

The server runs as ``python -m geglu_triton hub serve`` in its own process group, and the whole
group (the server and the git processes it runs) is killed, as an out-of-memory kill or a power
cut of a container would: git can die inside ``update-ref`` and leave its lock file behind. After
each restart ``git fsck`` must find every branch pointing at a complete commit, and every commit
the server acknowledged before the kill must still be on its branch.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import threading
import time
from http.client import HTTPException
from pathlib import Path
from urllib.error import URLError

from hub_helpers import header_line, http, ndjson, start_cli_hub

BRANCHES = ("main", "v1")
KILL_AFTER_S = (0.25, 0.5, 0.75, 1.0)  # a few kills, at different points of the commits in flight
FILES_PER_COMMIT = 3


def test_acknowledged_commits_survive_sigkill_and_branches_stay_complete(tmp_path):
    data = tmp_path / "data"
    git_dir = data / "repos" / "kernel" / "org" / "crash.git"
    acknowledged: list[tuple[str, str]] = []  # (branch, commit), appended by the writer threads
    server, endpoint = _start(data)
    try:
        create = b'{"name": "crash", "organization": "org", "type": "kernel"}'
        assert http("POST", f"{endpoint}/api/repos/create", body=create).status == 200
        assert http("POST", f"{endpoint}/api/kernels/org/crash/branch/v1", body=b"{}").status == 200
        for cycle, delay in enumerate(KILL_AFTER_S):
            writers = [
                threading.Thread(target=_commit_until_the_server_dies, args=(endpoint, branch, cycle, acknowledged))
                for branch in BRANCHES
            ]
            for writer in writers:
                writer.start()
            time.sleep(delay)
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
            for writer in writers:
                writer.join(30)

            server, endpoint = _start(data)  # clears the stale lock files the kill may have left
            _assert_complete(git_dir, acknowledged)
        assert len({branch for branch, _ in acknowledged}) == len(BRANCHES)  # commits got through on each
        for branch in BRANCHES:  # and the restarted server still takes commits on every branch
            response = http("POST", f"{endpoint}/api/kernels/org/crash/commit/{branch}", body=ndjson(header_line()))
            assert response.status == 200, response.body
    finally:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()


def _start(data: Path) -> tuple[subprocess.Popen, str]:
    # Warnings only: nobody reads the log pipe while the writers run.
    return start_cli_hub(data, "--log-level", "warning", new_session=True)


def _commit_until_the_server_dies(endpoint: str, branch: str, cycle: int, acknowledged: list) -> None:
    for number in range(10_000):
        files = [
            {
                "key": "file",
                "value": {
                    "path": f"{branch}/{cycle}/{number}/{index}.bin",
                    "content": base64.b64encode(os.urandom(8 * 1024)).decode(),
                    "encoding": "base64",
                },
            }
            for index in range(FILES_PER_COMMIT)
        ]
        try:
            url = f"{endpoint}/api/kernels/org/crash/commit/{branch}"
            response = http("POST", url, body=ndjson(header_line(), *files))
        except (URLError, ConnectionError, OSError, HTTPException):
            return  # the server was killed (mid-response: IncompleteRead, an unacknowledged commit)
        if response.status != 200:
            raise AssertionError(f"commit refused while the server ran: {response.status} {response.body[:200]}")
        acknowledged.append((branch, json.loads(response.body)["commitOid"]))


def _git(git_dir: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", f"--git-dir={git_dir}", *args], capture_output=True, text=True)


def _assert_complete(git_dir: Path, acknowledged: list[tuple[str, str]]) -> None:
    fsck = _git(git_dir, "fsck", "--full", "--strict", "--no-dangling")
    assert fsck.returncode == 0, fsck.stdout + fsck.stderr
    for branch in BRANCHES:
        head = _git(git_dir, "rev-parse", "--verify", f"refs/heads/{branch}^{{commit}}")
        assert head.returncode == 0, head.stderr
    for branch, commit in acknowledged:
        on_branch = _git(git_dir, "merge-base", "--is-ancestor", commit, f"refs/heads/{branch}")
        assert on_branch.returncode == 0, f"acknowledged commit {commit} is not on {branch}: {on_branch.stderr}"
    assert [lock.name for lock in git_dir.rglob("*.lock")] == ["hub-write.lock"]

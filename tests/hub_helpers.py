"""Helpers for the local Hub tests: raw HTTP requests, NDJSON commit bodies, a tiny kernel variant."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from urllib.error import HTTPError
from urllib.request import Request, urlopen
from child_process import child_env


@dataclass
class RawResponse:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self):
        return json.loads(self.body)


def http(
    method: str,
    url: str,
    *,
    body: bytes | Iterable[bytes] | None = None,
    token: str | None = None,
    headers: dict[str, str] | None = None,
) -> RawResponse:
    """One request with the standard library (an iterable body is sent chunked); errors are returned, not raised."""
    request = Request(url, data=body, method=method, headers=dict(headers or {}))
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urlopen(request, timeout=30) as response:
            return RawResponse(response.status, dict(response.headers), response.read())
    except HTTPError as error:
        return RawResponse(error.code, dict(error.headers), error.read())


def ndjson(*items: dict) -> bytes:
    return b"".join(json.dumps(item).encode() + b"\n" for item in items)


def header_line(summary: str = "test commit", **extra: str) -> dict:
    return {"key": "header", "value": {"summary": summary, "description": "", **extra}}


def file_line(path: str, content: bytes) -> dict:
    return {"key": "file", "value": {"path": path, "content": base64.b64encode(content).decode(), "encoding": "base64"}}


def git_blob_id(content: bytes) -> str:
    """The git blob id of ``content``, which the Hub reports as a regular file's oid and ETag."""
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


def variant_for_this_torch() -> str:
    """The build variant ``kernels`` loads under the installed torch (a CUDA build takes torch-cuda)."""
    import torch

    if torch.version.cuda is not None:
        return "torch-cuda"
    if torch.version.hip is not None:
        return "torch-rocm"
    if getattr(torch.version, "xpu", None) is not None:
        return "torch-xpu"
    return "torch-cpu"


def write_tiny_variant(
    root: Path, *, name: str, module_id: str, version: int = 1, init_source: str | None = None
) -> Path:
    """A hand-made noarch variant, ``root/build/<the variant this torch loads>``, with a valid metadata.json.

    Its ``__init__.py`` is ``init_source``, by default one that defines ``greet()``; ``module_id``
    is the import name kernels uses, so give every repository its own.
    """
    variant = root / "build" / variant_for_this_torch()
    variant.mkdir(parents=True)
    default_source = f'def greet():\n    return "hello from {name}"\n'
    (variant / "__init__.py").write_text(default_source if init_source is None else init_source)
    digest = {
        path.relative_to(variant).as_posix(): base64.b64encode(hashlib.sha256(path.read_bytes()).digest()).decode()
        for path in sorted(variant.rglob("*"))
        if path.is_file()
    }
    metadata = {
        "name": name,
        "id": module_id,
        "version": version,
        "license": "Apache-2.0",
        "python-depends": [],
        "kernel-depends": [],
        "backend": {"type": variant.name.removeprefix("torch-")},
        "digest": {"algorithm": "sha256", "files": digest},
    }
    (variant / "metadata.json").write_text(json.dumps(metadata, indent=2) + "\n")
    return variant


def start_cli_hub(data_dir: Path, *args: str, new_session: bool = False) -> tuple[subprocess.Popen, str]:
    """``python -m geglu_triton hub serve`` on a free loopback port, from this checkout; returns the
    running process (stdout and stderr merged, text) and its endpoint once it accepts requests."""
    command = [sys.executable, "-m", "geglu_triton", "hub", "serve", "--port", "0", "--data", str(data_dir), *args]
    server = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=child_env(), start_new_session=new_session
    )
    lines = []
    while not (found := re.search(r"export HF_ENDPOINT=(\S+)", "".join(lines))):
        line = server.stdout.readline()
        if not line:
            server.wait()
            raise RuntimeError(f"hub serve exited early: {''.join(lines)}")
        lines.append(line)
    return server, found.group(1)

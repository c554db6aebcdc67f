"""Run the local Hub in a background thread, for tests, the demo and scripts.

    with LocalHub(data_dir, trusted_orgs=("my-org",)) as hub:
        os.environ["HF_ENDPOINT"] = hub.endpoint   # before huggingface_hub is imported
        ...

Importing this module does not import huggingface_hub, so a caller can start the server first
and set ``HF_ENDPOINT`` afterwards (huggingface_hub reads it once, on import).
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterable
from pathlib import Path

import uvicorn
from fastapi import FastAPI

from .server import HubLimits, create_app

_STARTUP_TIMEOUT_S = 30.0
_SHUTDOWN_TIMEOUT_S = 10.0
#: How long an idle keep-alive connection stays open. Clients pool connections for up to 5 s
#: (httpx's default keepalive_expiry, huggingface_hub's session); uvicorn's own default is also 5 s,
#: so a request sent on a pooled connection just as the server closed it was reset (ECONNRESET,
#: seen once in CI on `kernels benchmark`'s download). The server must keep them open longer
#: than the client does.
_KEEP_ALIVE_S = 75


class LocalHub:
    """A local Hub server (uvicorn) running in a daemon thread while the context is entered.

    ``port=0`` picks a free port. ``__enter__`` returns once the server accepts connections;
    ``.endpoint`` is then its URL (``http://127.0.0.1:PORT``), the value for ``HF_ENDPOINT``.
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        trusted_orgs: Iterable[str] = (),
        token: str | None = None,
        limits: HubLimits | None = None,
        log_level: str = "warning",
    ) -> None:
        self.data_dir = Path(data_dir)
        self.host = host
        self.port = port
        self.trusted_orgs = tuple(trusted_orgs)
        self._token = token
        self._limits = limits or HubLimits()
        self._log_level = log_level
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._socket: socket.socket | None = None
        self.app: FastAPI | None = None  # the application while the server runs

    @property
    def endpoint(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def __enter__(self) -> LocalHub:
        try:
            self.app = app = create_app(
                self.data_dir, trusted_orgs=self.trusted_orgs, token=self._token, limits=self._limits
            )
        except OSError as error:  # cannot be created or written
            raise OSError(f"local Hub: cannot keep repositories in {str(self.data_dir)!r}: {error}") from error
        # Bind here rather than in uvicorn, so that the port (also a chosen-by-the-OS one) is known
        # and taken before the thread starts.
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        self._socket = socket.socket(family, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self._socket.bind((self.host, self.port))
        except OSError as error:
            self._stop()
            raise OSError(f"local Hub: cannot listen on {self.host}:{self.port}: {error}") from error
        self.port = self._socket.getsockname()[1]
        config = uvicorn.Config(
            app,
            log_level=self._log_level,
            access_log=self._log_level in ("debug", "info"),
            lifespan="off",
            timeout_keep_alive=_KEEP_ALIVE_S,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]}, name=f"local-hub-{self.port}", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + _STARTUP_TIMEOUT_S
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self._stop()
                raise RuntimeError(f"local Hub on {self.endpoint} did not start (see the log above)")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop()

    def _stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(_SHUTDOWN_TIMEOUT_S)
        if self._socket is not None:
            self._socket.close()
        if self.app is not None:
            self.app.state.storage.close()  # the data directory is free for another server
        self._server = self._thread = self._socket = self.app = None

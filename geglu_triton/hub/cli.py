"""``python -m geglu_triton hub serve``: run the local Hub in the foreground until Ctrl-C or SIGTERM."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import threading
from pathlib import Path

from ..errors import UserError

TOKEN_ENV_VAR = "GEGLU_HUB_TOKEN"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    subcommands = parser.add_subparsers(dest="hub_command", metavar="SUBCOMMAND", required=True)
    serve = subcommands.add_parser(
        "serve",
        help="serve kernel repositories to huggingface_hub and kernels clients (through HF_ENDPOINT)",
        description="Serve kernel (and model) repositories, stored as bare git repositories under --data, "
        "to unmodified huggingface_hub and kernels clients.",
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)")
    serve.add_argument(
        "--port", type=int, default=8080, help="port to listen on; 0 picks a free one (default: %(default)s)"
    )
    serve.add_argument(
        "--data", type=Path, required=True, metavar="DIR", help="persistent storage directory (created if missing)"
    )
    serve.add_argument(
        "--trusted-org",
        action="append",
        default=[],
        metavar="ORG",
        help="organization reported as a trusted kernel publisher (repeatable)",
    )
    serve.add_argument(
        "--token",
        default=os.environ.get(TOKEN_ENV_VAR),
        help=f"token required for writes (default: ${TOKEN_ENV_VAR}; without one, writes are open)",
    )
    serve.add_argument(
        "--max-commit-bytes",
        type=_positive_int,
        default=None,
        metavar="N",
        help="largest accepted commit request body, in bytes (default: 2 GiB)",
    )
    serve.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive number of bytes, got {text}")
    return value


def run(args: argparse.Namespace) -> int:
    from .background import LocalHub
    from .server import HubLimits

    limits = HubLimits() if args.max_commit_bytes is None else HubLimits(max_commit_bytes=args.max_commit_bytes)
    hub = LocalHub(
        args.data,
        host=args.host,
        port=args.port,
        trusted_orgs=args.trusted_org,
        token=args.token,
        limits=limits,
        log_level=args.log_level,
    )
    with contextlib.ExitStack() as running:
        try:
            running.enter_context(hub)
        except OSError as err:  # the port is taken, or the data directory cannot be used
            raise UserError(str(err)) from err
        print(f"Local Hub serving {hub.data_dir.resolve()} on {hub.endpoint}", flush=True)
        print(f"Point huggingface_hub and kernels at it with:\n  export HF_ENDPOINT={hub.endpoint}", flush=True)
        print(
            f"Writes need the server's token (--token or ${TOKEN_ENV_VAR}); clients send it from HF_TOKEN."
            if args.token
            else "Writes are open to anyone who can reach this port (no --token given).",
            flush=True,
        )
        print(f"Trusted kernel publishers: {', '.join(args.trusted_org) or 'none'}. Press Ctrl-C to stop.", flush=True)
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
        with contextlib.suppress(KeyboardInterrupt):
            stop.wait()
        print("Stopping the local Hub.", flush=True)
    return 0

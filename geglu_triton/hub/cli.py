"""``python -m geglu_triton hub serve``: run the local Hub in the foreground until Ctrl-C or SIGTERM."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import threading

from ..errors import REPO_PART_RULE, UserError, check_token, directory_to_write, is_valid_repo_part, positive_int

TOKEN_ENV_VAR = "GEGLU_HUB_TOKEN"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    subcommands = parser.add_subparsers(dest="hub_command", metavar="SUBCOMMAND", required=True)
    serve = subcommands.add_parser(
        "serve",
        help="serve kernel repositories to huggingface_hub and kernels clients (through HF_ENDPOINT)",
        description="Serve kernel (and model) repositories, stored as bare git repositories under --data, "
        "to unmodified huggingface_hub and kernels clients. One server per data directory: a second one "
        "on the same --data is refused, and a server clears what a killed one left there when it starts. "
        "A commit body is streamed: the server holds about twice its largest file (base64) at a time.",
    )
    serve.add_argument(
        "--host", type=_host, default="127.0.0.1", help="address to listen on (default: %(default)s; 0.0.0.0: all)"
    )
    serve.add_argument(
        "--port", type=_port, default=8080, help="port to listen on; 0 picks a free one (default: %(default)s)"
    )
    serve.add_argument(
        "--data",
        type=directory_to_write,
        required=True,
        metavar="DIR",
        help="persistent storage directory (created if missing)",
    )
    serve.add_argument(
        "--trusted-org",
        type=_organization,
        action="append",
        default=[],
        metavar="ORG",
        help="organization reported as a trusted kernel publisher (repeatable)",
    )
    serve.add_argument(
        "--token",
        type=_token,
        default=os.environ.get(TOKEN_ENV_VAR),
        help=f"token required for writes (default: ${TOKEN_ENV_VAR}; without one, writes are open; "
        "an empty one is refused)",
    )
    serve.add_argument(
        "--max-commit-bytes",
        type=positive_int,
        default=None,
        metavar="N",
        help="largest accepted commit request body, in bytes; larger ones get 413 (default: 64 MiB, room "
        "for ten times a kernel build of a few MB, base64-encoded; the server's memory per commit in "
        "flight is about twice the largest file in it)",
    )
    serve.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))


def _host(text: str) -> str:
    """An address to listen on; an IPv6 address may be given as in a URL (``[::1]``)."""
    host = text[1:-1] if text.startswith("[") and text.endswith("]") else text
    if not host.strip():
        raise argparse.ArgumentTypeError(
            "an empty host: give an address to listen on (127.0.0.1: this machine only; 0.0.0.0: every interface)"
        )
    return host


def _organization(text: str) -> str:
    """A Hub namespace, as repository ids spell it."""
    if not is_valid_repo_part(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a valid organization name ({REPO_PART_RULE})")
    return text


def _port(text: str) -> int:
    if not text.isdecimal() or int(text) > 65535:
        raise argparse.ArgumentTypeError(f"must be a port number from 0 to 65535, got {text!r}")
    return int(text)


def _token(text: str) -> str:
    try:
        return check_token(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(
            f"{error} (from --token or ${TOKEN_ENV_VAR}): give the token clients will send, "
            "or none to leave writes open"
        ) from None


def run(args: argparse.Namespace) -> int:
    from .background import LocalHub
    from .server import HubLimits
    from .storage import DataDirectoryInUse, NotADataDirectory

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
        except (DataDirectoryInUse, NotADataDirectory, OSError) as err:  # the port taken, the data directory unusable
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

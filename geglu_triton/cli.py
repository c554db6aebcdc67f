"""The one command line of the toolkit: ``python -m geglu_triton <command>``.

Each command lives in its own module, which provides ``add_arguments(parser)``
and ``run(args) -> int``. Modules are imported only when their command runs,
so ``--help`` and light commands stay fast.

Every command reports a failure the same way, here: one line on stderr,
``geglu-triton <command>: error: <what went wrong and what to do>``, exit code
2 for a wrong argument, 1 for a failure, 130 for Ctrl-C and 141 (quietly) when
what reads stdout went away. Commands raise ``errors.UserError`` (or a
subclass); Hub, HTTP and network errors are translated by
``errors.from_hub_error``; an OSError about a file is the file system's
refusal (not allowed, read-only, a directory where a file goes, full), said
with the file's name; anything else is a bug, reported in one line too.
``--verbose`` adds the traceback. Environment variables the libraries would
fail on without naming them are checked first (``errors.check_environment``).
"""

from __future__ import annotations

import argparse
import errno
import importlib
import os
import select
import sys
import traceback

from .errors import UsageError, UserError, check_environment, file_error, from_hub_error, one_line, sends_a_token

# command name -> (module under geglu_triton, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "build": ("build", "build the prebuilt kernel variants into build/"),
    "check": ("check", "validate a build directory the way kernel-builder does"),
    "publish": ("publish", "upload the build to a Hub kernel repository"),
    "hub": ("hub.cli", "run a local Hub server for kernel repositories"),
    "demo": ("demo", "build, publish to a local Hub, load and kernelize a Gemma3 model"),
    "bench": ("bench", "benchmark the kernels against eager, torch.compile and Liger"),
    "profile": ("profile", "profile the GeGLU MLP stages with torch.profiler"),
}
VERBOSE_FLAG = "--verbose"
#: An OSError with one of these, about a named file, is the file system's answer to what the user asked
#: (where to write, what to read), not a bug: it is reported as ``<file>: <reason>``.
REFUSALS_OF_THE_FILE_SYSTEM = frozenset(
    {errno.EACCES, errno.EPERM, errno.EROFS, errno.EISDIR, errno.ENOTDIR, errno.ENOSPC, errno.EDQUOT, errno.ENAMETOOLONG}
)
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report it
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE


def _report(prog: str, message: str, *, verbose: bool) -> None:
    if verbose:
        traceback.print_exc()
    print(f"{prog}: error: {' '.join(message.split())}", file=sys.stderr)


def _translated(err: BaseException, args: argparse.Namespace | None) -> UserError | None:
    """The UserError a Hub or network error stands for, given the command's endpoint and token."""
    try:
        from huggingface_hub import constants
    except ImportError:  # not installed: the error is what it is
        return None
    except Exception as hub_error:  # its constants read HF_* variables on import
        if type(hub_error) is not type(err) or str(hub_error) != str(err):  # the command failed elsewhere
            return None
        return UserError(
            f"huggingface_hub cannot start ({type(hub_error).__name__}: {one_line(hub_error)}): check the HF_* "
            "environment variables (HF_ENDPOINT, HF_HOME, HF_HUB_*_TIMEOUT)"
        )
    endpoint = getattr(args, "endpoint", None) or constants.ENDPOINT
    source = getattr(args, "endpoint_source", "--endpoint")  # publish's: --endpoint, HF_ENDPOINT or the default
    return from_hub_error(
        err, endpoint=endpoint, token_sent=sends_a_token(getattr(args, "token", None)), endpoint_source=source
    )


class _ArgumentParser(argparse.ArgumentParser):
    """argparse, with its errors (a missing or wrong argument) reported like every other: one line, exit 2."""

    def error(self, message: str):
        raise UsageError(f"{message} (see {self.prog} --help)")


def _output_reader_gone() -> bool:
    """Whether stdout is a pipe whose reader has closed it (poll reports an error on its write end), rather than
    some other pipe or socket the command wrote to."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (OSError, ValueError, AttributeError):  # no file descriptor (a captured stdout), or no poll here
        return False


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    verbose = VERBOSE_FLAG in argv
    argv = [arg for arg in argv if arg != VERBOSE_FLAG]
    prog, args = "geglu-triton", None
    try:
        parser = _ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
        parser.add_argument(VERBOSE_FLAG, action="store_true", help="also print the traceback of an error (anywhere)")
        subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
        for name, (_, help_text) in COMMANDS.items():
            subparsers.add_parser(name, help=help_text, add_help=False)
        if argv and argv[0].startswith("-") and argv[0] not in ("-h", "--help"):  # argparse would say COMMAND is missing
            raise UsageError(f"unknown option {argv[0]!r}: a command comes first (see {prog} --help)")
        # Parse only the command name first, then let its module define the rest.
        if not argv or argv[0] not in COMMANDS:
            parser.parse_args(argv)  # prints the help, or raises the error about a missing or unknown command
            return 0
        name = argv[0]
        prog = f"geglu-triton {name}"
        check_environment(os.environ)
        module = importlib.import_module(f"geglu_triton.{COMMANDS[name][0]}")
        command_parser = _ArgumentParser(prog=prog, description=COMMANDS[name][1])
        module.add_arguments(command_parser)
        args = command_parser.parse_args(argv[1:])
        return int(module.run(args) or 0)
    except KeyboardInterrupt:
        _report(prog, "interrupted (Ctrl-C)", verbose=verbose)
        return EXIT_INTERRUPTED
    except UserError as err:
        _report(prog, str(err), verbose=verbose)
        return err.exit_code
    except Exception as err:
        if isinstance(err, BrokenPipeError) and _output_reader_gone():
            # What reads the output went away (`| head`): stop quietly, as a killed pipe stage does.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # or flushing at exit fails again
            return EXIT_BROKEN_PIPE
        user_error = _translated(err, args)
        if user_error is not None:
            _report(prog, str(user_error), verbose=verbose)
            return user_error.exit_code
        if isinstance(err, OSError) and err.filename is not None and err.errno in REFUSALS_OF_THE_FILE_SYSTEM:
            _report(prog, file_error(err), verbose=verbose)
            return 1
        hint = "" if verbose else f" (run again with {VERBOSE_FLAG} for the traceback)"
        _report(prog, f"unexpected {type(err).__name__}: {err}{hint}", verbose=verbose)
        return 1

"""The one command line of the toolkit: ``python -m geglu_triton <command>``.

Each command lives in its own module, which provides ``add_arguments(parser)``
and ``run(args) -> int``. Modules are imported only when their command runs,
so ``--help`` and light commands stay fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys

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


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="geglu-triton", description=__doc__.splitlines()[0])
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (_, help_text) in COMMANDS.items():
        subparsers.add_parser(name, help=help_text, add_help=False)

    # Parse only the command name first, then let its module define the rest.
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        parser.parse_args(argv)  # prints help or the error about an unknown command
        return 2
    name = argv[0]
    module = importlib.import_module(f"geglu_triton.{COMMANDS[name][0]}")
    command_parser = argparse.ArgumentParser(prog=f"geglu-triton {name}", description=COMMANDS[name][1])
    module.add_arguments(command_parser)
    args = command_parser.parse_args(argv[1:])
    return int(module.run(args) or 0)

"""The command line answers every mistake in one line (``geglu_triton.cli.main``), with the right exit code.

Each test runs ``main()`` in this process and checks that stderr holds exactly
one line, ``geglu-triton <command>: error: ...``, that it names the problem,
and the exit code: 2 for a wrong argument, 1 for a failure, 130 for Ctrl-C.
Publishing tests skip ``check``'s import of the build (a subprocess, seconds):
what they exercise is the Hub side.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx2
import huggingface_hub
import pytest
from huggingface_hub.errors import HfHubHTTPError, OIDCError

from geglu_triton import REPO_ROOT
from geglu_triton import check as check_module
from geglu_triton import profile as profile_module
from geglu_triton import publish as publish_module
from geglu_triton.benchmarking import environment
from geglu_triton.cli import EXIT_BROKEN_PIPE, EXIT_INTERRUPTED, main
from geglu_triton.errors import (
    UsageError,
    check_environment,
    from_hub_error,
    is_valid_repo_part,
    one_line,
    sends_a_token,
    validate_endpoint,
    validate_repo_id,
)
from hub_helpers import variant_for_this_torch, write_tiny_variant


@pytest.fixture(autouse=True)
def fresh_hub_session():
    """publish bounds the requests of huggingface_hub's shared client (its process's): the next test gets a new one."""
    yield
    huggingface_hub.close_session()


def run_cli(capsys, *argv: str) -> tuple[int, str]:
    """(exit code, the one stderr line); fails unless stderr is exactly one line."""
    code = main(list(argv))
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1, lines
    return code, lines[0]


def refused_endpoint() -> str:
    """An http endpoint on a loopback port that nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


@pytest.fixture
def publish_args(build_dir, monkeypatch):
    """``publish`` of the session's build, with ``check`` reduced to its static part."""
    monkeypatch.setattr(publish_module, "check_build", lambda *args, **kwargs: [])
    return ["publish", "--build", str(build_dir), "--allow-dirty"]


# --- usage errors: exit 2, before any request ------------------------------------


@pytest.mark.parametrize(
    ("repo_id", "expected"),
    [("fused-geglu", "got 1 part"), ("org/team/fused-geglu", "got 3 part"), ("org/-bad", "'-bad' is not a valid")],
)
def test_a_malformed_repo_id_is_a_usage_error(capsys, repo_id, expected):
    code, line = run_cli(capsys, "publish", "--repo-id", repo_id, "--endpoint", refused_endpoint())
    assert code == 2
    assert line.startswith("geglu-triton publish: error: --repo-id") and repr(repo_id) in line and expected in line


@pytest.mark.parametrize(
    ("endpoint", "expected"),
    [("localhost:8080", "did you mean http://localhost:8080?"), ("ftp://host", "not an http:// or https:// URL"),
     ("http://host:port", "invalid port"), ("http://[::1", "is not a valid URL (Invalid IPv6 URL): write an IPv6 host as http://[::1]:8080"),
     (" http://host", "has spaces around it"), ("http://host?x=1", "has a query or fragment: remove it")],
)
def test_a_malformed_endpoint_is_a_usage_error(capsys, endpoint, expected):
    code, line = run_cli(capsys, "publish", "--repo-id", "org/k", "--endpoint", endpoint)
    assert code == 2 and f"--endpoint {endpoint!r}" in line and expected in line


def test_an_endpoint_with_a_password_is_refused_without_echoing_it(capsys):
    """It was taken, and echoed back in 'publishing ... (http://user:pw@host)'."""
    code, line = run_cli(capsys, "publish", "--repo-id", "org/k", "--endpoint", "http://user:s3cret@127.0.0.1:8080")
    assert code == 2 and "--endpoint carries a user name or password" in line and "s3cret" not in line, line


def test_an_endpoint_is_named_where_it_came_from(capsys, monkeypatch):
    """HF_ENDPOINT's value is reported as HF_ENDPOINT's, not as an --endpoint the user never gave; empty is
    said to be empty (it was offered 'did you mean http://?')."""
    monkeypatch.setenv("HF_ENDPOINT", "localhost:8080")
    code, line = run_cli(capsys, "publish", "--repo-id", "org/k")
    assert code == 2 and "error: HF_ENDPOINT 'localhost:8080' is not an http:// or https:// URL" in line, line
    code, line = run_cli(capsys, "publish", "--repo-id", "org/k", "--endpoint", "")
    assert code == 2 and "error: --endpoint is empty: give the Hub's URL" in line, line


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--host", ""], "argument --host: an empty host: give an address to listen on"),
        (["--host", "[]"], "argument --host: an empty host: give an address to listen on"),
        (["--trusted-org", ""], "argument --trusted-org: '' is not a valid organization name"),
        (["--trusted-org", "bad org!"], "argument --trusted-org: 'bad org!' is not a valid organization name"),
    ],
)
def test_hub_serve_refuses_an_empty_host_and_a_bad_organization(capsys, tmp_path, argv, expected):
    """An empty --host listened on every interface and printed http://:PORT; any --trusted-org was taken."""
    code, line = run_cli(capsys, "hub", "serve", "--data", str(tmp_path / "data"), "--port", "0", *argv)
    assert code == 2 and line.startswith(f"geglu-triton hub: error: {expected}"), line
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ([], "geglu-triton: error: the following arguments are required: COMMAND"),
        (["nope"], "geglu-triton: error: argument COMMAND: invalid choice: 'nope'"),
        (["--version"], "geglu-triton: error: unknown option '--version': a command comes first"),  # was: COMMAND missing
        (["hub", "serve"], "geglu-triton hub: error: the following arguments are required: --data"),
        (["publish", "--bogus"], "geglu-triton publish: error: unrecognized arguments: --bogus"),
        (["profile", "--mlp", "gemma3-5b"], "geglu-triton profile: error: argument --mlp: invalid choice: 'gemma3-5b'"),
        *(
            (
                ["profile", "--tokens", tokens],
                f"geglu-triton profile: error: argument --tokens: must be a positive whole number, got {tokens!r}",
            )
            for tokens in ("0", "1k", "²")
        ),
        *(
            (
                ["hub", "serve", "--data", "hub-data", "--max-commit-bytes", size],
                f"geglu-triton hub: error: argument --max-commit-bytes: must be a positive whole number, got {size!r}",
            )
            for size in ("-1", "64MiB")
        ),
        *(
            (
                ["hub", "serve", "--data", "hub-data", "--port", port],
                f"geglu-triton hub: error: argument --port: must be a port number from 0 to 65535, got {port!r}",
            )
            for port in ("-1", "65536")
        ),
        (
            ["bench", "--models", "tiny", "--model-layers", "0"],
            "geglu-triton bench: error: argument --model-layers: must be a positive whole number, got '0'",
        ),
        # A value given twice was measured twice, and listed twice in the results.
        *(
            (["bench", option, *values], f"geglu-triton bench: error: argument {option}: {repeated} given more than once")
            for option, values, repeated in (
                ("--dtypes", ("bf16", "fp32", "bf16"), "'bf16'"),
                ("--workloads", ("host", "host"), "'host'"),
                ("--approximations", ("tanh", "none", "none", "tanh"), "'none', 'tanh'"),
                ("--models", ("1b", "1b"), "'1b'"),
                ("--model-parts", ("mlp", "mlp"), "'mlp'"),
            )
        ),
        (["bench", "--grid", "full", "--quick"], "geglu-triton bench: error: argument --quick: not allowed with argument --grid"),
        *(
            (
                ["bench", option, value],
                f"geglu-triton bench: error: argument {option}: must be a positive number, got {value!r}",
            )
            for option, value in (
                ("--memory-budget-gib", "nan"),
                ("--memory-budget-gib", "0"),
                ("--time-budget-s", "-5"),
                ("--time-budget-s", "inf"),
            )
        ),
    ],
)
def test_argparse_errors_are_one_line_too(capsys, argv, expected):
    code, line = run_cli(capsys, *argv)
    assert code == 2 and line.startswith(expected) and line.endswith("--help)")


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["bench", "--model-parts", "mlp"], "--model-parts and --model-layers apply to whole models: add --models"),
        (["bench", "--models", "tiny", "--grid", "quick"], "--grid/--quick: options of the kernel grid, not of bench"),
        (
            ["bench", "--models", "--workloads", "host", "--memory-budget-gib", "1"],
            "--workloads, --memory-budget-gib: options of the kernel grid, not of bench --models",
        ),
    ],
)
def test_bench_options_that_do_not_go_together_are_usage_errors(capsys, tmp_path, monkeypatch, argv, expected):
    monkeypatch.chdir(tmp_path)
    code, line = run_cli(capsys, *argv)
    assert code == 2 and line.startswith(f"geglu-triton bench: error: {expected}")
    assert list(tmp_path.iterdir()) == []  # refused before any results directory


def test_a_file_where_a_directory_goes_is_a_usage_error(capsys, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    for argv in (
        ["build", "--out", str(blocker)],
        ["bench", "--out", str(blocker / "results")],
        ["profile", "--out", str(blocker)],
        ["hub", "serve", "--data", str(blocker / "hub-data")],
        ["demo", "--build", str(blocker)],
    ):
        code, line = run_cli(capsys, *argv)
        given = argv[-1]
        if given == str(blocker):
            expected = f"{given!r} exists and is not a directory"
        else:
            expected = f"{given!r} cannot be created: {str(blocker)!r} is not a directory"
        assert code == 2 and expected in line, line


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs /proc, a directory nothing can be created in")
def test_a_build_directory_that_cannot_be_created_is_one_line(capsys):
    out = Path("/proc/fused-geglu-build")  # even root cannot create it, unlike a read-only directory
    code, line = run_cli(capsys, "build", "--out", str(out))
    assert code == 1 and line.startswith(f"geglu-triton build: error: cannot write the build into {out}: ")


def test_a_file_in_a_variants_place_is_named_as_a_path(capsys, tmp_path):
    """The file system's error named the file by its repr, PosixPath('...')."""
    (tmp_path / "torch-cpu").write_text("")
    code, line = run_cli(capsys, "build", "--out", str(tmp_path))
    assert code == 1 and line.endswith(f"cannot write the build into {tmp_path}: {tmp_path / 'torch-cpu'}: Not a directory")


def test_a_path_with_a_name_too_long_for_the_file_system_is_a_usage_error(capsys, tmp_path):
    """Asking whether it exists raises ENAMETOOLONG: it was 'unexpected OSError'."""
    too_long = str(tmp_path / ("x" * 300))
    for argv, option in ((["build", "--out", too_long], "--out"), (["check", too_long], "build_dir")):
        code, line = run_cli(capsys, *argv)
        assert code == 2 and f"argument {option}: {too_long!r}: File name too long" in line, line


def test_an_empty_directory_path_is_a_usage_error(capsys, tmp_path, monkeypatch):
    """Path('') is the current directory: a command given --out '' filled it with variants or repositories, and
    one given a build '' read the current directory as one."""
    monkeypatch.chdir(tmp_path)
    for argv in (["build", "--out", ""], ["bench", "--out", ""], ["profile", "--out", ""],
                 ["hub", "serve", "--data", ""], ["demo", "--build", ""], ["publish", "--build", ""],
                 ["bench", "--kernel-dir", ""], ["profile", "--kernel-dir", ""], ["check", ""]):
        code, line = run_cli(capsys, *argv)
        argument = "build_dir" if argv[0] == "check" else argv[-2]
        assert code == 2 and f"argument {argument}: an empty path" in line, line
    assert list(tmp_path.iterdir()) == []


def test_a_build_to_read_that_is_not_a_directory_is_a_usage_error(capsys, tmp_path):
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    for argv in (["check", str(a_file)], ["publish", "--build", str(a_file)], ["profile", "--kernel-dir", str(a_file)]):
        code, line = run_cli(capsys, *argv)
        assert code == 2 and line.endswith(f"{str(a_file)!r} is not a directory (see geglu-triton {argv[0]} --help)")


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs /proc, a directory nothing can be created in")
def test_an_output_directory_that_cannot_be_created_is_one_line(capsys, build_dir):
    for command in ("bench", "profile"):
        code, line = run_cli(capsys, command, "--kernel-dir", str(build_dir), "--out", "/proc/fused-geglu-results")
        assert code == 1 and line.startswith(
            f"geglu-triton {command}: error: cannot create the output directory /proc/fused-geglu-results: "
        ), line


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs /proc, a directory nothing can be written in")
def test_an_output_directory_that_cannot_be_written_is_refused_before_the_work(capsys, build_dir, monkeypatch):
    """An existing directory the command may not write in: it ran the whole benchmark first, then failed to save
    the results ('unexpected PermissionError')."""
    monkeypatch.setattr(profile_module, "profile_stages", lambda *args, **kwargs: pytest.fail("the work ran"))
    code, line = run_cli(capsys, "profile", "--kernel-dir", str(build_dir), "--out", "/proc/self")
    assert code == 1 and line.startswith("geglu-triton profile: error: cannot write in the output directory /proc/self: ")


def test_a_file_system_error_names_the_file(capsys, publish_args, monkeypatch):
    """An OSError about a file (not allowed, a directory where a file goes) is the file system's answer, not a
    bug: it is said with the file's name, without the 'unexpected' of a bug."""
    def refused(*args, **kwargs):
        raise IsADirectoryError(21, "Is a directory", "/results/profile.md")

    monkeypatch.setattr(publish_module, "publish", refused)
    code, line = run_cli(capsys, *publish_args, "--repo-id", "org/k", "--endpoint", refused_endpoint())
    assert code == 1 and line == "geglu-triton publish: error: /results/profile.md: Is a directory", line


def test_a_kernel_dir_that_does_not_load_is_a_usage_error(capsys, tmp_path, build_dir):
    """A variant with a corrupt metadata.json or none at all: one line that says so and points at check, where
    kernels' own exception was reported as unexpected."""
    for breakage in ("corrupt", "missing"):
        copy = tmp_path / breakage
        shutil.copytree(build_dir, copy)
        metadata = copy / variant_for_this_torch() / "metadata.json"  # the variant bench loads
        metadata.write_text("{") if breakage == "corrupt" else metadata.unlink()
        code, line = run_cli(capsys, "bench", "--kernel-dir", str(copy), "--out", str(tmp_path / "results"))
        assert code == 2 and line.startswith(f"geglu-triton bench: error: --kernel-dir: cannot load the build in {copy}")
        assert line.endswith(f"`python -m geglu_triton check {copy}` names what is wrong with it"), line


@pytest.mark.parametrize(
    ("init_source", "expected"),
    [("def (\n", "(SyntaxError: "), ("raise RuntimeError('boom')\n", "(RuntimeError: boom)")],
    ids=["syntax-error", "raises-on-import"],
)
def test_a_kernel_dir_whose_code_fails_is_a_usage_error(capsys, tmp_path, init_source, expected):
    """Importing a variant runs its code: an error other than an ImportError there was 'unexpected SyntaxError'
    (and the like). The variants have valid digests, and module names of their own."""
    module_id = f"_cli_test_{tmp_path.name}"
    write_tiny_variant(tmp_path, name="broken", module_id=module_id, init_source=init_source)
    build = tmp_path / "build"
    code, line = run_cli(capsys, "profile", "--kernel-dir", str(build), "--out", str(tmp_path / "out"))
    assert code == 2 and line.startswith(f"geglu-triton profile: error: --kernel-dir: cannot load the build in {build} {expected}"), line
    assert not (tmp_path / "out").exists()


def test_a_kernel_dir_edited_after_the_build_is_refused_before_it_runs(capsys, tmp_path, build_dir):
    """kernels never compares a variant's files with its digest: an edited build ran, and a benchmark recorded the
    identity of the build its metadata names. It is refused before any variant is imported."""
    copy, variant = tmp_path / "build", variant_for_this_torch()
    shutil.copytree(build_dir, copy)
    with open(copy / variant / "__init__.py", "a") as module:
        module.write("\nraise AssertionError('the edited variant ran')\n")
    code, line = run_cli(capsys, "profile", "--kernel-dir", str(copy), "--out", str(tmp_path / "out"))
    expected = f"--kernel-dir: the build in {copy} fails its digest check ([digest] {variant}: File hash mismatch for __init__.py"
    assert code == 2 and expected in line and line.endswith(f"`python -m geglu_triton build --out {copy}`"), line
    assert not (tmp_path / "out").exists()


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs /proc, a directory nothing can be created in")
def test_a_hub_data_directory_that_cannot_be_created_is_one_line(capsys):
    code, line = run_cli(capsys, "hub", "serve", "--data", "/proc/fused-geglu-hub", "--port", "0")
    assert code == 1 and line.startswith(
        "geglu-triton hub: error: local Hub: cannot keep repositories in '/proc/fused-geglu-hub': "
    ), line


def test_a_kernel_dir_without_a_variant_is_a_usage_error(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "not-a-build").mkdir()
    code, line = run_cli(capsys, "bench", "--kernel-dir", str(tmp_path / "not-a-build"))
    assert code == 2 and line.startswith("geglu-triton bench: error: --kernel-dir: no build variant for this torch in ")
    assert "unexpected" not in line and ":)" not in line and line.endswith("`"), line


def test_validators_accept_what_the_hub_accepts():
    assert validate_repo_id("kernels-community/activation") == "kernels-community/activation"
    assert validate_endpoint("http://127.0.0.1:8080/") == "http://127.0.0.1:8080"
    with pytest.raises(UsageError, match="'..'"):
        validate_repo_id("org/a..b")


@pytest.mark.parametrize("part", ["_org", "a.b-c_d", "a" * 96, "org\n", "a" * 97, "-org", "org.", "a--b", "", "o/g", "k.git"])
@pytest.mark.parametrize("is_name", [False, True], ids=["namespace", "name"])
def test_the_cli_and_the_local_hub_take_one_rule_for_names(part, is_name):
    from huggingface_hub.utils import HFValidationError, validate_repo_id as hub_validate_repo_id

    from geglu_triton.hub.storage import InvalidName, validate_repo_name

    def accepted(validate, error, *args) -> bool:
        try:
            validate(*args)
        except error:
            return False
        return True

    repo_id = f"org/{part}" if is_name else f"{part}/kernel"
    hub = accepted(hub_validate_repo_id, HFValidationError, repo_id)
    cli = accepted(validate_repo_id, UsageError, repo_id)
    served = accepted(lambda value: validate_repo_name(value, is_name=is_name), InvalidName, part)
    assert is_valid_repo_part(part, is_name=is_name) == cli == served == hub


@pytest.mark.parametrize("kernel_dir", ["", "torch-cpu"], ids=["the build", "one of its variants"])
@pytest.mark.parametrize("command", [["bench"], ["bench", "--models"], ["profile"]], ids=" ".join)
def test_results_inside_the_measured_build_are_refused(capsys, build_dir, command, kernel_dir):
    """They were written into the variant, which then failed every digest check and load; with --kernel-dir
    naming one variant (which loads), beside it, where the build then held a directory that is no variant."""
    before = sorted(build_dir.rglob("*"))
    kernel_dir, out = build_dir / kernel_dir, build_dir / "results"
    code, line = run_cli(capsys, *command, "--kernel-dir", str(kernel_dir), "--out", str(out))
    assert code == 2 and line == (
        f"geglu-triton {command[0]}: error: --out {out} is inside the build {build_dir.resolve()} (--kernel-dir "
        f"{kernel_dir}): results written there would become files of the build, which then fails its digest check; "
        "choose another --out"
    )
    assert sorted(build_dir.rglob("*")) == before


def test_check_given_one_variant_names_the_build(capsys, build_dir, monkeypatch):
    """It reported the variant's own directory, and every variant, missing from it; the build is named by its
    full path, also from inside the variant ('check .')."""
    code, line = run_cli(capsys, "check", str(build_dir / "torch-cpu"))
    assert code == 2 and line.endswith(
        f"{build_dir / 'torch-cpu'} is one build variant; pass the build directory that holds the variants: "
        f"check {build_dir.resolve()}"
    ), line
    monkeypatch.chdir(build_dir / "torch-cpu")
    code, line = run_cli(capsys, "check", ".")
    assert code == 2 and line.endswith(f"check {build_dir.resolve()}"), line


def test_results_beside_a_variant_on_its_own_are_allowed(build_dir, tmp_path):
    """A variant copied out of its build (its parent holds no other variant) is the whole of what --kernel-dir
    names: results beside it are not in a build, and were refused as if they were; inside it they still are."""
    import torch

    shutil.copytree(build_dir / "torch-cpu", tmp_path / "torch-cpu")
    beside = environment.output_directory(tmp_path / "results", tmp_path / "torch-cpu", torch.device("cpu"))
    assert beside.is_dir()
    with pytest.raises(UsageError, match="is inside the build"):
        environment.output_directory(tmp_path / "torch-cpu" / "results", tmp_path / "torch-cpu", torch.device("cpu"))


def test_the_default_results_directory_inside_the_measured_build_is_named(capsys, build_dir, monkeypatch):
    """Run from inside the build without --out: the message quoted an --out the user never passed."""
    monkeypatch.chdir(build_dir)
    before = sorted(build_dir.rglob("*"))
    code, line = run_cli(capsys, "bench", "--kernel-dir", ".")
    out_dir = environment.default_results_dir(environment.benchmark_device())
    assert code == 2 and line == (
        f"geglu-triton bench: error: the default results directory {out_dir} (in the current directory) is inside "
        f"the build {build_dir.resolve()} (--kernel-dir .): results written there would become files of the build, "
        "which then fails its digest check; choose another --out"
    )
    assert sorted(build_dir.rglob("*")) == before


def test_the_kernels_source_as_kernel_dir_is_named(capsys, tmp_path, monkeypatch):
    """The hint was to build into the source itself, which build refuses."""
    monkeypatch.chdir(tmp_path)
    source = REPO_ROOT / "torch-ext" / "fused_geglu"
    code, line = run_cli(capsys, "bench", "--kernel-dir", str(source))
    assert code == 2 and line == (
        f"geglu-triton bench: error: --kernel-dir {source} is the kernel's source, not a build: build one with "
        "`python -m geglu_triton build --out DIR` and pass that DIR"
    )


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        ("DISABLE_KERNEL_MAPPING", "abc", "DISABLE_KERNEL_MAPPING='abc' is not a whole number: kernels reads it as one"),
        ("HF_HUB_DOWNLOAD_TIMEOUT", "-5", "HF_HUB_DOWNLOAD_TIMEOUT='-5' is not a whole number of seconds"),
        ("HF_HUB_ETAG_TIMEOUT", "1.5", "HF_HUB_ETAG_TIMEOUT='1.5' is not a whole number of seconds"),
    ],
)
def test_an_environment_variable_the_libraries_fail_on_is_named(capsys, tmp_path, monkeypatch, variable, value, expected):
    """They were "unexpected ValueError: invalid literal for int()" and "Timeout value out of range", unnamed."""
    monkeypatch.setenv(variable, value)
    code, line = run_cli(capsys, "check", str(tmp_path))
    assert code == 2 and line.startswith(f"geglu-triton check: error: {expected}"), line


def test_environment_variables_as_the_libraries_take_them_pass():
    check_environment({"DISABLE_KERNEL_MAPPING": " 1 ", "HF_HUB_DOWNLOAD_TIMEOUT": "0", "HF_HUB_ETAG_TIMEOUT": "30"})


_WRITES_UNTIL_STOPPED = """
import sys
from geglu_triton import check, cli
def run(args):
    while True:
        print("a line of results", flush=True)
check.run = run
sys.exit(cli.main(["check", "."]))
"""


def test_a_reader_that_goes_away_stops_the_command_quietly(tmp_path):
    """`bench | head -1` was "unexpected BrokenPipeError", exit 1, on stderr after the line read."""
    process = subprocess.Popen(
        [sys.executable, "-c", _WRITES_UNTIL_STOPPED], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path
    )
    assert process.stdout.readline() == b"a line of results\n"
    process.stdout.close()
    assert process.wait(timeout=60) == EXIT_BROKEN_PIPE
    assert process.stderr.read() == b""


def test_a_broken_pipe_that_is_not_the_output_is_reported(capsys, monkeypatch):
    """Only a reader of stdout going away is a quiet stop: any other pipe's failure is named."""

    def run(args):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(check_module, "run", run)
    code, line = run_cli(capsys, "check", ".")
    assert code == 1 and line.startswith("geglu-triton check: error: unexpected BrokenPipeError: [Errno 32] Broken pipe"), line


def test_a_missing_kernel_dir_is_a_usage_error(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, line = run_cli(capsys, "bench", "--kernel-dir", str(tmp_path / "missing"))
    assert code == 2 and f"argument --kernel-dir: {str(tmp_path / 'missing')!r} does not exist" in line, line
    assert list(tmp_path.iterdir()) == []  # no results directory for a run that never started


# --- network failures: exit 1, naming what was sent -------------------------------


def test_no_server_on_the_port(capsys, publish_args):
    endpoint = refused_endpoint()
    code, line = run_cli(capsys, *publish_args, "--repo-id", "org/k", "--endpoint", endpoint)
    assert code == 1
    assert f"POST {endpoint}/api/repos/create" in line and "connection refused" in line and "hub serve" in line


def test_the_advice_names_where_the_endpoint_came_from(capsys, publish_args, monkeypatch):
    """An endpoint from HF_ENDPOINT (no --endpoint given) was blamed on --endpoint."""
    endpoint = refused_endpoint()
    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    code, line = run_cli(capsys, *publish_args, "--repo-id", "org/k")
    assert code == 1 and "connection refused" in line and line.endswith("or fix HF_ENDPOINT"), line


def test_an_unknown_host(capsys, publish_args):
    code, line = run_cli(capsys, *publish_args, "--repo-id", "org/k", "--endpoint", "http://no-such-host.invalid")
    assert code == 1 and "unknown host 'no-such-host.invalid'" in line


def test_https_against_a_plain_http_server(capsys, publish_args, hub):
    https = hub.endpoint.replace("http://", "https://")
    code, line = run_cli(capsys, *publish_args, "--repo-id", "org/k", "--endpoint", https)
    assert code == 1 and "TLS handshake" in line and f"use --endpoint {hub.endpoint}" in line


class _Server:
    """A loopback TCP server in a thread: ``answer`` bytes to each request, or nothing at all (None) for
    ``hold_s`` seconds, after which it hangs up (so that a client without a timeout fails, not hangs)."""

    def __init__(self, answer: bytes | None, hold_s: float = 20.0):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.endpoint = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.answer, self.hold_s, self.closing = answer, hold_s, threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:  # shut down
                return
            with conn:
                if self.answer is None:
                    self.closing.wait(self.hold_s)
                else:
                    conn.recv(65536)
                    conn.sendall(self.answer)

    def close(self):
        self.closing.set()
        self.sock.shutdown(socket.SHUT_RDWR)  # wakes the accept() (closing alone does not, on Linux)
        self.sock.close()
        self.thread.join(timeout=self.hold_s + 5)


def _http_answer(body: bytes, content_type: str) -> bytes:
    head = f"HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    return head.encode() + body


@pytest.mark.parametrize(
    ("answer", "problem"),
    [(_http_answer(b"<html>hello</html>", "text/html"), "JSONDecodeError"), (_http_answer(b"{}", "application/json"), "KeyError: 'url'")],
    ids=["web-page", "other-json"],
)
def test_a_server_that_is_not_a_hub(capsys, publish_args, answer, problem):
    """A web page or JSON without the Hub's fields was 'unexpected JSONDecodeError' / 'unexpected KeyError'."""
    server = _Server(answer)
    try:
        code, line = run_cli(capsys, *publish_args, "--repo-id", "org/k", "--endpoint", server.endpoint)
    finally:
        server.close()
    assert code == 1 and f"the server at {server.endpoint} did not answer as a Hub does ({problem}" in line, line


def test_a_redirect_to_a_dead_server_names_where_it_led(capsys, publish_args):
    """The refusal was blamed on the endpoint, the server that had answered with the redirect."""
    dead = refused_endpoint()
    server = _Server(f"HTTP/1.1 302 Found\r\nLocation: {dead}/x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".encode())
    try:
        code, line = run_cli(capsys, *publish_args, "--repo-id", "org/k", "--endpoint", server.endpoint)
    finally:
        server.close()
    assert code == 1 and f"connection refused by {dead.removeprefix('http://')}:" in line, line


def test_a_server_that_never_answers(capsys, publish_args, monkeypatch):
    """huggingface_hub's client waits forever: publish hung without a word on a server that took the connection."""
    monkeypatch.setattr(publish_module, "HUB_TIMEOUT_S", 0.5)
    server = _Server(None, hold_s=5)
    try:
        code, line = run_cli(capsys, *publish_args, "--repo-id", "org/k", "--endpoint", server.endpoint)
    finally:
        server.close()
    assert code == 1 and f"POST {server.endpoint}/api/repos/create" in line and "did not answer in time" in line, line


def test_the_bound_covers_requests_that_ask_for_no_timeout():
    """huggingface_hub's paginated listing passes timeout=None, which overrode the client's default."""
    server = _Server(None, hold_s=5)
    publish_module.bound_hub_requests(0.5)
    try:
        start = time.monotonic()
        with pytest.raises(httpx2.ReadTimeout):
            huggingface_hub.get_session().get(f"{server.endpoint}/api/kernels/org/k/tree/main", timeout=None)
        assert time.monotonic() - start < 3
    finally:
        server.close()


@pytest.fixture
def no_login(monkeypatch):
    """No token from the environment: each test sets the one it is about."""
    for variable in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_OIDC_RESOURCE"):
        monkeypatch.delenv(variable, raising=False)


def test_a_login_that_cannot_be_read(capsys, publish_args, monkeypatch, tmp_path, no_login):
    """A directory as the login file was a 100-line traceback: the error handler read it again."""
    monkeypatch.setattr(huggingface_hub.constants, "HF_TOKEN_PATH", str(tmp_path))
    code, line = run_cli(capsys, *publish_args, "--repo-id", "org/k", "--endpoint", refused_endpoint())
    expected = f"cannot read the Hub login (HF_TOKEN, HF_OIDC_RESOURCE or the stored login at {tmp_path}): {tmp_path}: Is a directory; fix it, or pass --token"
    assert code == 1 and expected in line, line


def test_a_login_exchange_that_fails(capsys, publish_args, monkeypatch, no_login):
    """huggingface_hub's OIDC token exchange (HF_OIDC_RESOURCE, in CI) raises its own error: two tracebacks."""
    def failed_exchange():
        raise OIDCError("the exchange was refused")

    monkeypatch.setattr(huggingface_hub, "get_token", failed_exchange)
    code, line = run_cli(capsys, *publish_args, "--repo-id", "org/k", "--endpoint", refused_endpoint())
    assert code == 1 and "cannot read the Hub login (" in line and "OIDCError: the exchange was refused; fix it" in line


def test_an_hf_token_that_cannot_be_sent(capsys, publish_args, monkeypatch, no_login):
    """It was 'unexpected UnicodeEncodeError'; --token had the rule, HF_TOKEN now has it too, and is never printed."""
    monkeypatch.setenv("HF_TOKEN", "s3cret\udcff")  # what a non-UTF-8 byte in the environment decodes to
    code, line = run_cli(capsys, *publish_args, "--repo-id", "org/k", "--endpoint", refused_endpoint())
    assert code == 1 and "cannot be sent: the token must be visible ASCII" in line and "s3cret" not in line, line


def test_no_login_is_read_or_sent_where_implicit_tokens_are_disabled(capsys, publish_args, monkeypatch, no_login):
    """HF_HUB_DISABLE_IMPLICIT_TOKEN: huggingface_hub sends no token it was not given; nor is the login read."""
    monkeypatch.setenv("HF_TOKEN", "s3cret\udcff")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_DISABLE_IMPLICIT_TOKEN", True)
    assert not sends_a_token()
    code, line = run_cli(capsys, *publish_args, "--repo-id", "org/k", "--endpoint", refused_endpoint())
    assert code == 1 and "connection refused" in line, line


def test_huggingface_hub_that_cannot_start_is_named(tmp_path):
    """huggingface_hub reads HF_* variables when imported: a bad one failed the command's import, and the error
    handler's own import of it then printed two tracebacks."""
    env = {**os.environ, "HF_ENDPOINT": "http://[::1"}
    result = subprocess.run(
        [sys.executable, "-m", "geglu_triton", "check", str(tmp_path)], env=env, capture_output=True, text=True
    )
    assert result.returncode == 1 and result.stderr.splitlines() == [
        "geglu-triton check: error: huggingface_hub cannot start (ValueError: Invalid IPv6 URL): check the HF_* "
        "environment variables (HF_ENDPOINT, HF_HOME, HF_HUB_*_TIMEOUT)"
    ], result.stderr


# --- the Hub refuses: exit 1, the right advice for the right Hub -------------------


def test_no_token(capsys, publish_args, hub, monkeypatch):
    monkeypatch.delenv("HF_TOKEN")
    code, line = run_cli(capsys, *publish_args, "--repo-id", "org/no-token", "--endpoint", hub.endpoint)
    assert code == 1 and "401" in line and "none was sent" in line and "does not accept" not in line


def test_a_wrong_token_against_the_local_hub(capsys, publish_args, hub):
    code, line = run_cli(
        capsys, *publish_args, "--repo-id", "org/wrong-token", "--endpoint", hub.endpoint, "--token", "hf_wrong"
    )
    assert code == 1 and "403 Forbidden" in line and "started with" in line
    assert "huggingface.co" not in line and "hf_wrong" not in line


@pytest.mark.parametrize(
    "token, problem",
    [("", "the token is empty"), ("s3cret ", "visible ASCII"), ("s3cret\n", "visible ASCII"), ("héllo", "visible ASCII")],
    ids=["empty", "trailing-space", "newline", "non-ascii"],
)
def test_a_token_that_cannot_be_sent_is_a_usage_error_that_never_prints_it(capsys, publish_args, hub, token, problem):
    """An empty --token was sent as 'Bearer ' and one with a space or newline was echoed back in httpx's
    'Illegal header value' error, reported as an unreachable Hub."""
    code, line = run_cli(capsys, *publish_args, "--repo-id", "org/k", "--endpoint", hub.endpoint, "--token", token)
    assert code == 2 and line.startswith("geglu-triton publish: error: argument --token: ") and problem in line
    assert "omit --token" in line and (not token or token.strip() not in line)


def test_a_token_in_an_http_clients_error_is_masked():
    err = httpx2.LocalProtocolError("Illegal header value b'Bearer hf_secret '")
    line = str(from_hub_error(err, endpoint="http://127.0.0.1:8080", token_sent=True))
    assert "hf_secret" not in line and "cannot be sent in an HTTP header" in line
    assert one_line("header 'Authorization: Bearer hf_secret' refused") == "header 'Authorization: Bearer ***' refused"


def test_the_approval_advice_is_for_huggingface_co_only():
    def forbidden(endpoint: str):
        request = httpx2.Request("POST", f"{endpoint}/api/repos/create")
        err = HfHubHTTPError("403 Forbidden", response=httpx2.Response(403, request=request))
        return str(from_hub_error(err, endpoint=endpoint, token_sent=True))

    assert "Request Kernels Creation" in forbidden("https://huggingface.co")
    assert "Request Kernels Creation" not in forbidden("http://127.0.0.1:8080")


# --- Ctrl-C, bugs, --verbose ------------------------------------------------------


def test_ctrl_c(capsys, publish_args, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(publish_module, "publish", interrupted)
    code, line = run_cli(capsys, *publish_args, "--repo-id", "org/k", "--endpoint", refused_endpoint())
    assert code == EXIT_INTERRUPTED and line == "geglu-triton publish: error: interrupted (Ctrl-C)"


def test_an_unexpected_error_is_one_line_and_verbose_adds_the_traceback(capsys, publish_args, monkeypatch):
    def broken(*args, **kwargs):
        raise TypeError("a bug")

    monkeypatch.setattr(publish_module, "publish", broken)
    args = [*publish_args, "--repo-id", "org/k", "--endpoint", refused_endpoint()]
    code, line = run_cli(capsys, *args)
    assert code == 1 and "unexpected TypeError: a bug" in line and "--verbose" in line

    assert main([*args, "--verbose"]) == 1
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and err.splitlines()[-1].endswith("unexpected TypeError: a bug")


def test_hub_serve_takes_an_ipv6_address_as_urls_write_it():
    from geglu_triton.hub.cli import _host

    assert _host("[::1]") == _host("::1") == "::1"


def test_hub_serve_on_a_taken_port(capsys, tmp_path, hub):
    port = hub.endpoint.rsplit(":", 1)[1]
    code, line = run_cli(capsys, "hub", "serve", "--data", str(tmp_path / "data"), "--port", port)
    assert code == 1 and f"cannot listen on 127.0.0.1:{port}" in line

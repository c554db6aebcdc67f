"""The errors every command reports in one line, and the translation of Hub and network errors.

``UserError`` is a mistake or failure the user can act on: the command line
prints its message as one line on stderr and exits 1 (``UsageError``: 2, a
wrong argument). Modules raise these (or subclasses: ``PublishError``,
``BuildError``, ``ConfigError``); ``cli.main`` is the one place that prints
them. Errors of huggingface_hub and its HTTP clients (httpx2, requests) are
translated by ``from_hub_error`` into a ``UserError`` that says what was sent,
where, and what to do; the advice to request kernel-publishing access applies
to huggingface.co only.

Repository ids and endpoints are checked by ``validate_repo_id`` and
``validate_endpoint`` before any request is made, and the login a client would
send by ``check_client_login``; ``positive_int`` and ``positive_float`` are the
``type`` of every option that takes a count or an amount, ``directory_to_write``
of every option naming a directory a command creates or fills (``make_directory``
creates it, and checks that it can be written, before the command's work);
``check_token`` is the one rule for a Hub token, the local Hub's and a client's;
``file_error`` says an OSError in one line, with the file's name; ``DistinctValues`` refuses a value given twice
to an option of several; ``check_environment`` names a variable the libraries would fail on unnamed.
"""

from __future__ import annotations

import argparse
import errno
import math
import os
import re
import tempfile
from pathlib import Path
from urllib.parse import urlsplit

#: The Hub whose rules (kernel-publishing approval) the huggingface.co-only advice is about.
HUGGINGFACE_CO = "huggingface.co"
KERNEL_ACCESS_URL = "https://huggingface.co/settings/account"
LOCAL_HUB_HINT = "start a local Hub with `python -m geglu_triton hub serve --data DIR`, or fix {source}"

# What OpenSSL says when an https client gets a plain-HTTP answer.
_PLAIN_HTTP_ANSWER = ("WRONG_VERSION_NUMBER", "wrong version number", "record layer failure", "packet length too long")
# What the resolver says for a host name it cannot resolve (glibc, macOS, no DNS at all).
_UNRESOLVED_HOST = ("name or service not known", "nodename nor servname", "temporary failure in name resolution")
# A token in the text of an error (an HTTP client's message may quote the Authorization header it refused).
_BEARER_TOKEN = re.compile(r"(Bearer\s+)[^'\"\s]+")
# Visible ASCII: what an Authorization header carries unchanged.
_TOKEN = re.compile(r"[!-~]+")
# A Hub repository id: "<namespace>/<name>", each part as huggingface_hub's validator accepts it.
_REPO_PART = re.compile(r"(?![-.])(?!.*(--|\.\.))[A-Za-z0-9_.-]{1,96}(?<![-.])")
#: huggingface_hub's timeouts, in seconds, from the environment.
TIMEOUT_VARIABLES = ("HF_HUB_DOWNLOAD_TIMEOUT", "HF_HUB_ETAG_TIMEOUT")
#: What is_valid_repo_part accepts, as the errors say it.
REPO_PART_RULE = (
    "letters, digits, '-', '_', '.'; at most 96; no leading or trailing '-' or '.', no '--' or '..'; "
    "a repository name does not end in '.git'"
)


class UserError(Exception):
    """A mistake or failure the user can act on; the message says what went wrong and what to do."""

    exit_code = 1


class UsageError(UserError):
    """A wrong argument on the command line (exit code 2, as argparse's own errors)."""

    exit_code = 2


def positive_int(text: str) -> int:
    """An argparse ``type``: a whole number above zero, or argparse's one-line usage error naming the value."""
    if not text.isdecimal() or int(text) == 0:  # isdecimal, not isdigit: int() refuses "²"
        raise argparse.ArgumentTypeError(f"must be a positive whole number, got {text!r}")
    return int(text)


def positive_float(text: str) -> float:
    """An argparse ``type``: a finite number above zero (not nan, not inf), or argparse's one-line usage error."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (0 < value < math.inf):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text!r}")
    return value


class DistinctValues(argparse.Action):
    """An argparse ``action`` for an option of several values (``nargs``): refuses a value given twice, which
    a command would otherwise run twice."""

    def __call__(self, parser, namespace, values, option_string=None):
        repeated = [value for index, value in enumerate(values) if value in values[:index]]
        if repeated:
            raise argparse.ArgumentError(self, f"{', '.join(map(repr, dict.fromkeys(repeated)))} given more than once")
        setattr(namespace, self.dest, values)


def _as_int(value: str) -> int | None:
    """``int(value)`` as the libraries parse their variables, or None where it raises."""
    try:
        return int(value)
    except ValueError:
        return None


def check_environment(environ) -> None:
    """UsageError for an environment variable that a library of the toolkit parses and fails on without naming it.

    kernels reads ``DISABLE_KERNEL_MAPPING`` with ``int()`` when it is
    imported; huggingface_hub reads its timeouts (``TIMEOUT_VARIABLES``) with
    ``int()`` when it is imported, 0 for its default, and a negative one fails
    its first request.
    """
    mapping = environ.get("DISABLE_KERNEL_MAPPING")
    if mapping is not None and _as_int(mapping) is None:
        raise UsageError(
            f"DISABLE_KERNEL_MAPPING={mapping!r} is not a whole number: kernels reads it as one (1 keeps every "
            "module's own forward; 0, or unset, kernelizes)"
        )
    for name in TIMEOUT_VARIABLES:
        value = environ.get(name)
        seconds = None if value is None else _as_int(value)
        if value is not None and (seconds is None or seconds < 0):
            raise UsageError(
                f"{name}={value!r} is not a whole number of seconds (huggingface_hub reads it as one; 0, or unset, "
                "for its default)"
            )


def directory_to_write(text: str) -> Path:
    """An argparse ``type``: a directory path, refused where it is empty (Path('') is the current directory,
    which a command would fill unasked) or where something that is not a directory is in the way."""
    if not text:
        raise argparse.ArgumentTypeError("an empty path: name a directory ('.' for the current one)")
    path = Path(text)
    try:
        blocker = next((p for p in (path, *path.parents) if p.exists()), None)  # the nearest part that exists
    except OSError as err:  # a name longer than the file system takes
        raise argparse.ArgumentTypeError(f"{text!r}: {os_reason(err)}") from None
    if blocker is not None and not blocker.is_dir():
        if blocker == path:
            problem = "exists and is not a directory"
        else:
            problem = f"cannot be created: {str(blocker)!r} is not a directory"
        raise argparse.ArgumentTypeError(f"{text!r} {problem}")
    return path


def directory_to_read(text: str) -> Path:
    """An argparse ``type``: an existing directory, refused where the path is empty (Path('') would read the
    current directory) or names nothing, or something else."""
    if not text:
        raise argparse.ArgumentTypeError("an empty path: name a directory ('.' for the current one)")
    path = Path(text)
    try:
        if not path.is_dir():
            raise argparse.ArgumentTypeError(f"{text!r} {'is not a directory' if path.exists() else 'does not exist'}")
    except OSError as err:  # a name longer than the file system takes
        raise argparse.ArgumentTypeError(f"{text!r}: {os_reason(err)}") from None
    return path


def check_not_dangling(path: Path, option: str) -> None:
    """A UserError for a ``path`` that is a symbolic link to nothing (mkdir says only "File exists")."""
    if path.is_symlink() and not path.exists():
        raise UserError(f"{option} {path} is a symbolic link to {os.readlink(path)}, which does not exist")


def make_directory(path: Path, option: str) -> None:
    """``path.mkdir(parents=True, exist_ok=True)``, and a file created and removed in it, before a command does
    its work and then writes there; a failure (read-only, not allowed, a dangling link) is a UserError naming
    ``option``."""
    check_not_dangling(path, option)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UserError(f"cannot create {option} {path}: {os_reason(err)}") from None
    try:
        tempfile.TemporaryFile(dir=path).close()
    except OSError as err:
        raise UserError(f"cannot write in {option} {path}: {os_reason(err)}") from None


def os_reason(err: OSError) -> str:
    """What the system said of an OSError ("Permission denied"), without its errno and file."""
    return err.strerror or one_line(err)


#: Failures of the device written to, not of the file named with them (a copy names its source).
DEVICE_FULL = (errno.ENOSPC, errno.EDQUOT)


def file_error(err: OSError) -> str:
    """An OSError as one line: ``<file>: <reason>`` where it names a file (not its repr, PosixPath('...')); a full
    device or quota by the file written, or by its reason alone (the file a copy names first is its source, which
    is not at fault)."""
    if err.errno in DEVICE_FULL:  # the written file, where the error names it (a copy's destination)
        return f"{err.filename2}: {os_reason(err)}" if err.filename2 is not None else os_reason(err)
    if err.filename is None:
        return one_line(err)
    return f"{err.filename}: {os_reason(err)}"


def check_token(token: str) -> str:
    """``token`` if an HTTP client can send it as it is, else ValueError, whose message never quotes it.

    An empty token is refused, not taken to mean "no token" (a variable that
    expanded to nothing must not open a Hub's writes, nor send an empty header).
    """
    if not token:
        raise ValueError("the token is empty")
    if not _TOKEN.fullmatch(token):
        raise ValueError("the token must be visible ASCII characters without spaces (it is sent in an HTTP header)")
    return token


def client_token(text: str) -> str:
    """The ``type`` of a client's --token: ``check_token``'s rule, as a usage error that names no token."""
    try:
        return check_token(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(
            f"{error}: pass the token as the Hub issued it, or omit --token to use HF_TOKEN or the stored login"
        ) from None


def _login_sources() -> str:
    """Where huggingface_hub finds the token it sends when none is passed (``get_token``), as errors name them."""
    from huggingface_hub import constants

    return f"HF_TOKEN, HF_OIDC_RESOURCE or the stored login at {constants.HF_TOKEN_PATH}"


def _implicit_token() -> str | None:
    """The token huggingface_hub sends when none is passed: ``get_token()``'s, or None where there is none or
    HF_HUB_DISABLE_IMPLICIT_TOKEN is set; a UserError where it cannot be read."""
    from huggingface_hub import constants, get_token

    if constants.HF_HUB_DISABLE_IMPLICIT_TOKEN:
        return None
    try:
        return get_token()
    except Exception as err:  # a login file it may not read, or not UTF-8; a failed OIDC exchange
        reason = file_error(err) if isinstance(err, OSError) else f"{type(err).__name__}: {one_line(err)}"
        raise UserError(
            f"cannot read the Hub login ({_login_sources()}): {reason}; fix it, or pass --token"
        ) from None


def check_client_login(token: str | None) -> None:
    """Refuse, before any request, a login that huggingface_hub would fail to read or to send.

    ``token`` (a --token, already checked) is sent as given; without it the
    client sends ``_implicit_token``'s, which must pass ``check_token``.
    """
    if token is not None:
        return
    implicit = _implicit_token()
    if implicit is None:
        return
    try:
        check_token(implicit)
    except ValueError as err:
        raise UserError(f"the Hub login ({_login_sources()}) cannot be sent: {err}; fix it, or pass --token") from None


def sends_a_token(token: str | None = None) -> bool:
    """Whether a client given ``token`` sends one, as an error's translation asks: a login that cannot be read
    counts as none, so that translating never raises."""
    if token is not None:
        return True
    try:
        return _implicit_token() is not None
    except UserError:
        return False


def is_valid_repo_part(part: str, *, is_name: bool = False) -> bool:
    """Whether ``part`` is a valid Hub namespace, or with ``is_name`` repository name (``REPO_PART_RULE``,
    as huggingface_hub's ``validate_repo_id`` reads it)."""
    return bool(_REPO_PART.fullmatch(part)) and not (is_name and part.endswith(".git"))


def validate_repo_id(repo_id: str, *, option: str = "--repo-id") -> str:
    """``repo_id`` when it is ``<namespace>/<name>``; a UsageError naming the mistake otherwise."""
    parts = repo_id.split("/")
    if len(parts) != 2:
        raise UsageError(
            f"{option} {repo_id!r} is not a kernel repository id: expected <namespace>/<name> "
            f"(one '/', e.g. org/fused-geglu), got {len(parts)} part(s)"
        )
    bad = [part for part, is_name in zip(parts, (False, True)) if not is_valid_repo_part(part, is_name=is_name)]
    if bad:
        raise UsageError(f"{option} {repo_id!r}: {bad[0]!r} is not a valid namespace or name ({REPO_PART_RULE})")
    return repo_id


def validate_endpoint(endpoint: str, *, option: str = "--endpoint", token_option: str = "--token") -> str:
    """``endpoint`` without a trailing '/' when it is an http(s) URL; a UsageError otherwise (naming ``option``, and
    ``token_option`` as where a token goes instead of the URL)."""
    if not endpoint.strip():
        raise UsageError(f"{option} is empty: give the Hub's URL (http://127.0.0.1:8080 for a local Hub)")
    if endpoint != endpoint.strip():
        raise UsageError(f"{option} {endpoint!r} has spaces around it: give the URL alone")
    try:
        parts = urlsplit(endpoint)
    except ValueError as err:  # an unclosed IPv6 bracket
        raise UsageError(f"{option} {endpoint!r} is not a valid URL ({err}): write an IPv6 host as http://[::1]:8080") from None
    if parts.scheme not in ("http", "https") or not parts.netloc:
        guess = f"http://{endpoint}" if "://" not in endpoint else None
        suggestion = f": did you mean {guess}?" if guess else ""
        raise UsageError(f"{option} {endpoint!r} is not an http:// or https:// URL{suggestion}")
    try:
        parts.port  # noqa: B018 (raises ValueError for a bad port)
    except ValueError:
        raise UsageError(f"{option} {endpoint!r} has an invalid port") from None
    if not parts.hostname:
        raise UsageError(f"{option} {endpoint!r} has no host name")
    if parts.username is not None or parts.password is not None:  # never echoed back: it may hold a password
        raise UsageError(
            f"{option} carries a user name or password: give the Hub's URL without it, and the token with {token_option}"
        )
    if parts.query or parts.fragment:
        raise UsageError(
            f"{option} {endpoint!r} has a query or fragment: remove it (every request's path is appended to the URL)"
        )
    return endpoint.rstrip("/")


def is_huggingface_co(endpoint: str) -> bool:
    host = urlsplit(endpoint).hostname or ""
    return host == HUGGINGFACE_CO or host.endswith(f".{HUGGINGFACE_CO}")


def _request_of(err: BaseException):
    """The HTTP request an error belongs to (after redirects, the last one sent), or None when unknown."""
    response = getattr(err, "response", None)
    for holder in (err, response):
        if holder is None:
            continue
        try:
            request = holder.request
        except (AttributeError, RuntimeError):  # httpx raises RuntimeError when no request is attached
            continue
        if request is not None:
            return request
    return None


def _request_line(request, endpoint: str) -> str:
    """``METHOD URL`` of a request (``_request_of``), or the endpoint when it is unknown."""
    return endpoint if request is None else f"{request.method} {request.url}"


def one_line(text) -> str:
    """``text`` (or an exception's message) on one line, with any bearer token in it masked."""
    return _BEARER_TOKEN.sub(r"\1***", " ".join(str(text).split()))


def _network_error(err: BaseException, endpoint: str, source: str) -> UserError:
    text = str(err)
    request = _request_of(err)
    sent = _request_line(request, endpoint)
    target = endpoint if request is None else str(request.url)  # where it went: a redirect may lead elsewhere
    host = urlsplit(target).netloc or endpoint
    if any(sign in text for sign in _PLAIN_HTTP_ANSWER):
        plain = endpoint.replace("https://", "http://", 1)
        return UserError(
            f"{sent}: the TLS handshake with {host} failed ({one_line(text)}): that server speaks plain HTTP "
            f"(as the local Hub does); use {source} {plain}"
        )
    if "CERTIFICATE_VERIFY_FAILED" in text:
        return UserError(
            f"{sent}: the certificate of {host} is not trusted ({one_line(text)}); point SSL_CERT_FILE at the "
            "right CA bundle"
        )
    if "refused" in text.lower():
        local_hint = f"is the Hub running? {LOCAL_HUB_HINT.format(source=source)}"
        hint = "check your network" if is_huggingface_co(endpoint) else local_hint
        return UserError(f"{sent}: connection refused by {host}: {hint}")
    if any(sign in text.lower() for sign in _UNRESOLVED_HOST):
        return UserError(
            f"{sent}: unknown host {urlsplit(target).hostname!r} (no DNS answer): check the spelling of {source} "
            "and this machine's network"
        )
    if "Illegal header value" in text:
        return UserError(
            f"{sent}: the token cannot be sent in an HTTP header (it must be visible ASCII without spaces): check "
            "--token, HF_TOKEN or the stored login"
        )
    if "timed out" in text.lower() or "Timeout" in type(err).__name__:
        return UserError(f"{sent}: {host} did not answer in time; check that it is up and reachable")
    return UserError(f"{sent}: cannot reach {host}: {one_line(text) or type(err).__name__}")


def _http_error(err, endpoint: str, *, token_sent: bool) -> UserError:
    from huggingface_hub.errors import (
        EntryNotFoundError,
        GatedRepoError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    response = err.response
    status = response.status_code if response is not None else None
    sent = _request_line(_request_of(err), endpoint)
    reason = one_line(getattr(err, "server_message", None) or "") or "no reason given"
    if status == 401:
        if not token_sent:
            return UserError(
                f"{sent}: 401, the Hub at {endpoint} needs a token and none was sent: pass --token, set HF_TOKEN, "
                "or log in with `hf auth login`"
            )
        return UserError(
            f"{sent}: 401, the Hub at {endpoint} does not accept the token that was sent ({reason}): check --token "
            "or HF_TOKEN (the stored login is used only without them)"
        )
    if status == 403:
        if is_huggingface_co(endpoint):
            return UserError(
                f"{sent}: 403 Forbidden ({reason}): this account may not publish kernels there; publishing kernels "
                f"on {HUGGINGFACE_CO} needs approval: request it at {KERNEL_ACCESS_URL} (\"Request Kernels Creation\")"
            )
        return UserError(
            f"{sent}: 403 Forbidden ({reason}): the Hub at {endpoint} refuses this token for this write; "
            "use the token that Hub was started with (its --token or GEGLU_HUB_TOKEN)"
        )
    if isinstance(err, (RepositoryNotFoundError, GatedRepoError)):
        return UserError(f"{sent}: the repository does not exist on {endpoint} (or this token cannot see it)")
    if isinstance(err, RevisionNotFoundError):
        return UserError(f"{sent}: no such branch or revision on {endpoint}")
    if isinstance(err, EntryNotFoundError):
        return UserError(f"{sent}: no such file on {endpoint}")
    return UserError(f"{sent}: the Hub at {endpoint} answered {status}: {reason}")


def from_hub_error(
    err: BaseException, *, endpoint: str, token_sent: bool, endpoint_source: str = "--endpoint"
) -> UserError | None:
    """A one-line UserError for a Hub, HTTP or network error of a request to ``endpoint``; None for others.

    ``endpoint_source`` is where the endpoint came from, as the advice names it (``HF_ENDPOINT`` for the
    Python helpers, which have no --endpoint).
    """
    from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled

    if isinstance(err, OfflineModeIsEnabled):
        return UserError(f"HF_HUB_OFFLINE is set, so no request to {endpoint} was made: unset it to reach the Hub")
    if isinstance(err, HfHubHTTPError) and err.response is not None:
        return _http_error(err, endpoint, token_sent=token_sent)
    network_errors: list[type[BaseException]] = []
    try:
        import httpx2

        network_errors.append(httpx2.TransportError)
    except ImportError:
        pass
    try:
        import requests

        network_errors.append(requests.exceptions.ConnectionError)
        network_errors.append(requests.exceptions.Timeout)
    except ImportError:
        pass
    if network_errors and isinstance(err, tuple(network_errors)):
        return _network_error(err, endpoint, endpoint_source)
    return None

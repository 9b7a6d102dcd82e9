"""A scenario repository's git remotes: their config, and running git and git-lfs against them.

A remote is git's own ``[remote "<name>"]`` section in the repository's config, written so that
a fetch can never touch a ref reef writes::

    [remote "origin"]
        url = /srv/git/s.git
        fetch = +refs/heads/*:refs/remotes/origin/heads/*
        fetch = +refs/tags/*:refs/remotes/origin/tags/*
        fetch = +refs/reef/*:refs/remotes/origin/reef/*
        tagOpt = --no-tags       # else auto-follow would write the remote's vN into refs/tags
        prune = true

Everything lands in ``refs/remotes/<name>/…`` (the tracking refs); ``adopt.py`` adopts from there
into local refs, by compare-and-swap.  A ``git push`` to the named remote moves the tracking refs
itself, so "what the remote has" needs no state of reef's own.

Why the git CLI and not pygit2: libgit2 never asks for the ``atomic`` push capability and has no
``--force-with-lease``, so a release could land without its tag (and its first push is ten times
slower).  Each child gets no terminal (``GIT_TERMINAL_PROMPT=0``), stable English, its own process
group (``process_group=0``: killing the daemon's group does not cut an atomic push in half, and it
costs a vfork, not a fork) and ``nice``; a timeout kills its whole group.

Credentials are git's own (credential helpers, the ssh agent): a URL that carries one (a
password, a token as the user name, a token in the query string) is refused at ``remote add``,
so none is ever kept in reef's files; and every URL and every line of git or git-lfs output reef
shows or keeps goes through :func:`redact` (git-lfs 3.3.0 prints a URL's password in its errors,
and a remote configured by hand may carry one).

Transports are the ones a person means: https, http, ssh, git and local paths (``file://``).
``<transport>::<address>`` (``ext::``, ``fd::``, any remote helper) and other schemes are refused
at ``remote add``, and every git call reef makes runs with ``protocol.allow=never`` and only those
allowed, so a URL written into the config by hand cannot run a command either.

``remote.<name>.reefTrusted = true`` marks a remote whose releases are served without a person's
approval here (``reef remote add --trusted``; see ``reef_core.release.adoption``).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import pygit2

from reef_core.errors import InvalidInput, NotFound, StoreError
from reef_core.store.repo import repo_config, write_config

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "PROTOCOLS",
    "SCHEMES",
    "TRUSTED_KEY",
    "GitResult",
    "Outcome",
    "Progress",
    "PushRow",
    "Remote",
    "add_remote",
    "classify",
    "get_remote",
    "lfs_fetch",
    "lfs_push",
    "list_remotes",
    "redact",
    "remove_remote",
    "run_git",
    "tracking_ref",
    "validate_url",
]

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
#: ``scheme://user:password@``: the password goes
_USERINFO_PASSWORD = re.compile(r"([a-zA-Z][a-zA-Z0-9+.-]*://[^/@\s:]*):[^@/\s]*@")
#: ``scheme://<token>@``: a user name that is a token goes whole
_USERINFO_TOKEN = re.compile(r"([a-zA-Z][a-zA-Z0-9+.-]*://)([^/@\s:]+)@")
#: ``?access_token=…``, ``&private_token=…``: the value goes
_QUERY_SECRET = re.compile(
    r"([?&;](?:[A-Za-z0-9_.-]*(?:token|secret|password|passwd|pwd|auth|key|sig|signature|credential)"
    r"[A-Za-z0-9_.-]*)=)[^&#\s;]+",
    re.IGNORECASE,
)
#: the shapes of common git hosting tokens, wherever they stand
_TOKEN_SHAPES = re.compile(
    r"(?<![A-Za-z0-9_])(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|glpat-[A-Za-z0-9_-]{16,}"
    r"|gl(?:oas|dt|rt|cbt|ptt|ft|imt|agent|soat)-[A-Za-z0-9_-]{16,})"
)
#: a user name this long, of key characters with a digit, is taken for a token (GitHub's classic
#: 40-hex tokens, Bitbucket and Azure tokens passed as the user name)
_TOKENISH_USER = re.compile(r"^(?=.*[0-9])[A-Za-z0-9_.~+/=-]{20,}$")
#: ``ext::sh -c …``, ``fd::3``, ``file::…``: git's remote-helper syntax, which runs a helper
_HELPER_SYNTAX = re.compile(r"^[A-Za-z0-9][A-Za-z0-9+.-]*::")
#: the schemes a remote may use (``git+ssh`` and ``ssh+git`` are git's own spellings of ssh)
SCHEMES = ("file", "git", "git+ssh", "http", "https", "ssh", "ssh+git")
#: for every git call reef makes: only the transports a person means (``ext``, ``fd`` and any
#: remote helper are refused by git itself, whatever a URL in the config says)
PROTOCOLS = ["-c", "protocol.allow=never"] + [
    arg for name in ("file", "git", "http", "https", "ssh") for arg in ("-c", f"protocol.{name}.allow=always")
]
_NICE = shutil.which("nice")
#: the remote's config key that marks it trusted (``git config remote.<name>.reefTrusted true``)
TRUSTED_KEY = "reefTrusted"
#: how long one git command against a remote may take unless the caller says
DEFAULT_TIMEOUT_S = 120.0
#: told each line (or ``\r``-separated update) of a git command's stderr as it comes, redacted
Progress = Callable[[str], None]

#: for every git and git-lfs child: no prompt (a missing credential fails, never hangs), stable
#: messages to classify, ssh that never asks (unless a person configured their own ssh command)
_ENV = {"GIT_TERMINAL_PROMPT": "0", "GCM_INTERACTIVE": "never", "LC_ALL": "C"}
_SSH = "ssh -o BatchMode=yes -o ConnectTimeout=10"
#: a remote that stalls is given up on (and the subprocess timeout bounds the whole command)
_CONFIG = [
    *PROTOCOLS,
    "-c",
    "http.lowSpeedLimit=1000",
    "-c",
    "http.lowSpeedTime=20",
    "-c",
    "lfs.locksverify=false",
]
_CREDENTIAL_ADVICE = (
    "reef keeps no passwords or tokens in a remote's URL; use a credential helper "
    "(git config --global credential.helper …, or gh auth setup-git) or ssh"
)


def _token_user(match: re.Match[str]) -> str:
    user = match.group(2)
    if _TOKENISH_USER.match(user) or _TOKEN_SHAPES.search(user):
        return f"{match.group(1)}***@"
    return match.group(0)


def redact(text: str) -> str:
    """``text`` with every credential a URL in it may carry replaced by ``***``: a password
    (``user:***@``), a user name that is a token, a query-string secret (``access_token=***``),
    and the shapes of common hosting tokens (``ghp_…``, ``github_pat_…``, ``glpat-…``) anywhere."""
    text = _USERINFO_PASSWORD.sub(r"\1:***@", text)
    text = _USERINFO_TOKEN.sub(_token_user, text)
    text = _QUERY_SECRET.sub(r"\1***", text)
    return _TOKEN_SHAPES.sub("***", text)


def validate_url(url: str) -> str:
    """``url`` as reef keeps it: an https, http, ssh, git or ``file://`` URL, an scp-like
    ``user@host:path`` or a local path (made absolute); refused when it names another transport
    (``ext::…``, ``fd::…``, any ``<helper>::``) or carries a credential (see the module's docstring)."""
    text = url.strip()
    if not text or text.startswith("-") or any(ch in text for ch in "\n\r\0"):
        raise InvalidInput(f"{redact(url)!r} is not a git remote URL", field="url")
    if _HELPER_SYNTAX.match(text):
        helper = text.split("::", 1)[0]
        raise InvalidInput(
            f"{redact(text)!r} uses git's {helper}:: remote-helper syntax, which reef refuses: a remote "
            f"is an https, http, ssh or git URL, user@host:path, or a local path",
            field="url",
        )
    if redact(text) != text:
        raise InvalidInput(f"{redact(text)}: {_CREDENTIAL_ADVICE}", field="url")
    if "://" in text:
        try:
            parts = urlsplit(text)
            password = parts.password
        except ValueError as exc:
            raise InvalidInput(f"{redact(text)!r} is not a URL: {exc}", field="url") from None
        if parts.scheme.lower() not in SCHEMES:
            raise InvalidInput(
                f"{redact(text)!r}: reef's remotes use {', '.join(SCHEMES)} URLs or local paths, "
                f"not {parts.scheme}://",
                field="url",
            )
        if password is not None:
            raise InvalidInput(f"{redact(text)}: {_CREDENTIAL_ADVICE}", field="url")
        return text
    head = text.split("/", 1)[0]
    if ":" in head:  # scp-like user@host:path
        return text
    return str(Path(text).expanduser().resolve())


def _validate_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise InvalidInput(
            f"{name!r} is not a remote name (letters, digits, '.', '_', '-'; at most 64)", field="name"
        )
    return name


def tracking_ref(remote: str, ref: str) -> str:
    """Where a fetch from ``remote`` puts the remote's ``ref`` (``refs/heads/release`` →
    ``refs/remotes/<remote>/heads/release``)."""
    return f"refs/remotes/{remote}/{ref.removeprefix('refs/')}"


# -- config --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Remote:
    name: str
    url: str  # as configured (never holds a credential when added by reef: refused at add)
    #: ``remote.<name>.reefTrusted``: its releases are served here without a person's approval
    trusted: bool = False

    @property
    def shown_url(self) -> str:
        return redact(self.url)


def list_remotes(path: Path) -> list[Remote]:
    """The remotes configured in the repository at ``path``, by name."""
    found = {}
    trusted = set()
    for entry in repo_config(path):
        if not entry.name.startswith("remote."):
            continue
        if entry.name.endswith(".url") and entry.value is not None:
            found[entry.name[len("remote.") : -len(".url")]] = entry.value
        elif entry.name.lower().endswith(f".{TRUSTED_KEY.lower()}"):
            name = entry.name[len("remote.") : -len(TRUSTED_KEY) - 1]
            if (entry.value or "").strip().lower() in ("true", "yes", "on", "1"):
                trusted.add(name)
            else:
                trusted.discard(name)
    return [Remote(name, found[name], name in trusted) for name in sorted(found)]


def get_remote(path: Path, name: str) -> Remote:
    for remote in list_remotes(path):
        if remote.name == name:
            return remote
    raise NotFound(f"scenario {path.stem} has no remote {name!r}", field="remote")


def add_remote(path: Path, name: str, url: str, *, trusted: bool = False) -> Remote:
    """Configure remote ``name`` at ``url`` for the repository at ``path`` (see the module's
    docstring for what is written); refuses a name that exists, a URL that carries a credential
    and a transport other than https, http, ssh, git or a local path.  ``trusted``: its releases
    are served here without a person's approval (``remote.<name>.reefTrusted``)."""
    _validate_name(name)
    kept = validate_url(url)
    if any(remote.name == name for remote in list_remotes(path)):
        raise InvalidInput(f"scenario {path.stem} already has a remote {name!r}", field="name")
    section = f"remote.{name}"
    values: list[tuple[str, str]] = [
        (f"{section}.url", kept),
        (f"{section}.fetch", f"+refs/heads/*:refs/remotes/{name}/heads/*"),
        (f"{section}.fetch", f"+refs/tags/*:refs/remotes/{name}/tags/*"),
        (f"{section}.fetch", f"+refs/reef/*:refs/remotes/{name}/reef/*"),
        (f"{section}.tagOpt", "--no-tags"),
        (f"{section}.prune", "true"),
    ]
    if trusted:
        values.append((f"{section}.{TRUSTED_KEY}", "true"))

    def write(config: pygit2.Config) -> None:  # idempotent: tried again while config.lock is held
        for key, value in values:
            if not key.endswith(".fetch"):
                config[key] = value
            elif value not in list(config.get_multivar(key)):
                config.set_multivar(key, "^$", value)  # matches none: adds a value

    write_config(path, write, what=f"add remote {name}")
    return Remote(name, kept, trusted)


def remove_remote(path: Path, name: str) -> None:
    """Forget remote ``name``: its config section, its tracking refs and reef's sync state."""
    get_remote(path, name)
    result = run_git(path, ["remote", "remove", name], timeout=60)
    if result.rc != 0:
        raise StoreError(f"cannot remove remote {name}: {result.stderr.strip()}")
    (path / "reef-sync" / f"{name}.json").unlink(missing_ok=True)


# -- running git -----------------------------------------------------------------------------


@dataclass(frozen=True)
class PushRow:
    """One ref's line of ``git push --porcelain``: ``flag`` is ``*`` new, `` `` fast-forward,
    ``+`` forced, ``-`` deleted, ``=`` up to date, ``!`` rejected."""

    flag: str
    source: str
    destination: str
    summary: str

    @property
    def rejected(self) -> bool:
        return self.flag == "!"


@dataclass(frozen=True)
class GitResult:
    rc: int  # -1: killed at the timeout
    stdout: str  # redacted
    stderr: str  # redacted
    rows: tuple[PushRow, ...] = ()  # push --porcelain rows
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.rc == 0


def _parse_rows(stdout: str) -> tuple[PushRow, ...]:
    rows = []
    for line in stdout.splitlines():
        parts = line.split("\t")
        if len(parts) == 3 and len(parts[0]) == 1:
            source, _, destination = parts[1].rpartition(":")
            rows.append(PushRow(parts[0], source, destination, parts[2]))
    return tuple(rows)


def _env() -> dict[str, str]:
    env = {**os.environ, **_ENV}
    if "GIT_SSH_COMMAND" not in env and "GIT_SSH" not in env:
        env["GIT_SSH_COMMAND"] = _SSH
    return env


def _kill(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # git and its helpers (remote-http, ssh, git-lfs)


def run_git(
    path: Path,
    arguments: Sequence[str],
    *,
    timeout: float,
    progress: Progress | None = None,
) -> GitResult:
    """``git <arguments>`` in the repository at ``path``, as the module's docstring says; never
    raises for git's own failures (see :func:`classify`).  ``progress`` is given each line (or
    ``\\r``-separated update) of stderr as it comes, redacted."""
    command = ["git", *_CONFIG, "-C", str(path), *arguments]
    if _NICE:
        command = [_NICE, "-n", "5", *command]
    env = _env()
    if env.get("GIT_SSH_COMMAND") == _SSH and _has_ssh_command(path):
        del env["GIT_SSH_COMMAND"]  # the person's own ssh command wins over ours
    try:
        proc = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            process_group=0,
        )
    except OSError as exc:
        raise StoreError(f"cannot run git: {exc}") from exc
    killed = threading.Event()

    def expire() -> None:
        killed.set()
        _kill(proc)

    timer = threading.Timer(timeout, expire)
    timer.daemon = True
    timer.start()
    try:
        if progress is None:
            out, err = proc.communicate()
        else:
            out, err = _stream(proc, progress)
    finally:
        timer.cancel()
    timed_out = killed.is_set()
    stdout = redact(out.decode(errors="replace"))
    stderr = redact(err.decode(errors="replace"))
    if timed_out:
        verb = next((a for a in arguments if not a.startswith("-") and "=" not in a), "")
        stderr += f"\ngit {verb} gave no answer within {timeout:g} s"
    return GitResult(
        rc=-1 if timed_out else proc.returncode,
        stdout=stdout,
        stderr=stderr,
        rows=_parse_rows(stdout),
        timed_out=timed_out,
    )


def _stream(proc: subprocess.Popen[bytes], progress: Callable[[str], None]) -> tuple[bytes, bytes]:
    assert proc.stdout is not None and proc.stderr is not None
    stdout = proc.stdout
    collected: list[bytes] = []
    reader = threading.Thread(target=lambda: collected.append(stdout.read()), daemon=True)
    reader.start()
    err = bytearray()
    pending = b""
    while chunk := os.read(proc.stderr.fileno(), 4096):
        err += chunk
        pending += chunk
        *lines, pending = re.split(rb"[\r\n]", pending)
        for line in lines:
            if line.strip():
                progress(redact(line.decode(errors="replace")))
    proc.wait()
    reader.join()
    return (collected[0] if collected else b""), bytes(err)


def _has_ssh_command(path: Path) -> bool:
    """Whether the person set ``core.sshCommand`` (in the repository's, global or system config)."""
    try:
        repo = pygit2.Repository(str(path))
    except pygit2.GitError:
        return False
    try:
        return "core.sshCommand" in repo.config
    finally:
        repo.free()  # not left to the cyclic collector


# -- what happened ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    """What a git or git-lfs command against a remote came to.

    ``kind``: ``ok``; ``rejected`` (``reason``: ``stale`` lease, ``non-fast-forward``,
    ``atomic`` transaction failed, ``exists`` (a tag)); ``unreachable`` (connection, DNS, no
    repository there, timeout); ``auth`` (credentials missing or refused); ``no_lfs`` (the
    remote has no git-lfs API); ``failed`` (anything else).
    """

    kind: str
    reason: str = ""
    message: str = ""  # git's own words, redacted
    rows: tuple[PushRow, ...] = field(default=(), compare=False)

    @property
    def ok(self) -> bool:
        return self.kind == "ok"

    def describe(self) -> str:
        """What a person reads of it in a report or a warning: the kind in words, then git's."""
        what = {
            "unreachable": "unreachable",
            "auth": "credentials missing or refused",
            "no_lfs": "no git-lfs API",
            "failed": "failed",
            "rejected": f"rejected ({self.reason})",
        }.get(self.kind, self.kind)
        return f"{what}: {self.message}" if self.message else what


_NO_LFS = ("batch response: Repository or object not found",)
_AUTH = (
    "Authentication failed",
    "could not read Username",
    "could not read Password",
    "terminal prompts disabled",
    "credentials for",
    "Authentication required",
    "Authorization error",
    "Permission denied (publickey",
    "HTTP Basic: Access denied",
    "The requested URL returned error: 403",
    "The requested URL returned error: 401",
)
_UNREACHABLE = (
    "unable to access",
    "Failed to connect",
    "Could not resolve host",
    "Connection refused",
    "connection refused",
    "dial tcp",
    "Connection timed out",
    "does not appear to be a git repository",
    "Could not read from remote repository",
    "not found",
    "No such file or directory",
    "gave no answer within",
)
_REJECTIONS = (
    ("stale info", "stale"),
    ("atomic", "atomic"),
    ("already exists", "exists"),
    ("non-fast-forward", "non-fast-forward"),
    ("fetch first", "non-fast-forward"),
)


def classify(result: GitResult) -> Outcome:
    """One :class:`Outcome` for a finished git or git-lfs command (the patterns of git 2.39 and
    git-lfs 3.3.0, pinned by tests)."""
    words = _summary(result)
    if result.ok:
        return Outcome("ok", message=words, rows=result.rows)
    if result.timed_out:
        return Outcome("unreachable", "timeout", words, result.rows)
    rejected = [row for row in result.rows if row.rejected]
    if rejected:
        reasons = [reason for row in rejected for text, reason in _REJECTIONS if text in row.summary]
        # a lease or a tag lost anywhere explains the atomic failure of the others
        for reason in ("stale", "exists", "non-fast-forward", "atomic"):
            if reason in reasons:
                return Outcome("rejected", reason, words, result.rows)
        return Outcome("rejected", "other", words, result.rows)
    text = result.stderr
    if any(pattern in text for pattern in _NO_LFS):
        return Outcome("no_lfs", message=words, rows=result.rows)
    if any(pattern in text for pattern in _AUTH):
        return Outcome("auth", message=words, rows=result.rows)
    if any(pattern in text for pattern in _UNREACHABLE):
        return Outcome("unreachable", message=words, rows=result.rows)
    return Outcome("failed", message=words, rows=result.rows)


def _summary(result: GitResult) -> str:
    """git's words for a person: the error lines of stderr, else the rejected rows."""
    lines = [line.strip() for line in result.stderr.splitlines() if line.strip()]
    errors = [
        line
        for line in lines
        if line.startswith(("fatal:", "error:", "remote: error", "batch", "Remote", "git "))
        or "not found" in line
    ]
    rows = [f"{row.destination} {row.summary}" for row in result.rows if row.rejected]
    return "; ".join(errors or rows or lines[-2:])


# -- git-lfs ---------------------------------------------------------------------------------

_OIDS_PER_CALL = 200


def lfs_push(path: Path, remote: str, oids: Iterable[str], *, timeout: float) -> Outcome:
    """Upload LFS objects ``oids`` to ``remote`` (by its name, never a URL: git-lfs's standalone
    file transfer applies only to a named remote whose URL is a path), one ``--object-id`` call
    per 200 objects so git-lfs never walks a ref (it would scan the whole data branch)."""
    wanted = sorted(set(oids))
    if not wanted:
        return Outcome("ok")
    for start in range(0, len(wanted), _OIDS_PER_CALL):
        chunk = wanted[start : start + _OIDS_PER_CALL]
        outcome = classify(run_git(path, ["lfs", "push", "--object-id", remote, *chunk], timeout=timeout))
        if not outcome.ok:
            return outcome
    return Outcome("ok")


def lfs_fetch(path: Path, remote: str, commits: Iterable[str], *, timeout: float) -> Outcome:
    """Download the LFS objects the trees of ``commits`` point to from ``remote`` into the
    repository's ``lfs/objects`` (each commit's tree only, not its history)."""
    wanted = list(dict.fromkeys(commits))
    if not wanted:
        return Outcome("ok")
    return classify(run_git(path, ["lfs", "fetch", remote, *wanted], timeout=timeout))

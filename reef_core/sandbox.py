"""The OS sandbox for code nobody approved yet: a narrow bubblewrap, and a bridge to the daemon.

Two things run model-written code before a person has seen it: the release checks' live
``health`` run of a candidate that changes executable content (``adapters/health.py``, asked by
``recipes/reefine/checks.py``) and the agent proposer (``recipes/reefine/agent.py``).  Both run
it through :class:`Confinement`, and nowhere else (a host without a sandbox skips the live run:
:func:`bwrap_problem` says why and how to get one).

Owns: whether bwrap can isolate on this host (:func:`bwrap_problem`, the bwrap of
:func:`find_bwrap`: ``$REEF_BWRAP`` when set, else ``bwrap`` on PATH), the bwrap command line
(:func:`bwrap_command`), what a program needs bound to start (:func:`install_folders`), and the
one way out of the sandbox's network namespace, which holds nothing but its own loopback:

    harness ─▶ 127.0.0.1:<port> (inside) ─▶ unix socket (bind-mounted) ─▶ LoopbackBridge ─▶ daemon

What the sandbox sees (:func:`bwrap_command`): the system directories read-only (``/usr``,
``/bin``, ``/sbin``, ``/lib*``, ``/etc`` with its secrets masked: :data:`ETC_MASKED`), the
install folders of the programs it runs read-only (the harness, its node, the Python of the
forwarder), the folders the caller names writable (a candidate's config dir, home and cwd; the
agent's workspace), a fresh ``/dev``, ``/proc`` and ``/tmp``, and nothing else: no ``/run``, no
``/home`` or ``/root``, no state dir, so no unix socket outside is reachable by path, and a fresh
network namespace, so none by abstract name either.  Everything else is a read-only empty
root.  Every namespace is unshared, no capabilities, a new session (no terminal to type into),
killed with its parent, and the environment is exactly the one given (``--clearenv``).

Inside, :func:`main` (run as ``python -I -B sandbox.py --port P --socket S -- cmd …``, the base
interpreter, so neither the project nor its virtual environment is needed) listens on
127.0.0.1:<port>, starts the command, and copies bytes between each connection and the socket.
Outside, :class:`reef_core.bridge.LoopbackBridge` is the only thing that talks to the daemon:
only ``POST`` to the inference routes passes, carrying the run's own credential
(:attr:`Confinement.credential`, random, valid at this bridge only and only while it runs),
which the bridge swaps for the daemon's token (it never enters the sandbox), with the run's
scenario and capture off.

This module imports the standard library only: it is also the program that runs inside.  What
runs only outside is imported when it runs: the bridge (:mod:`reef_core.bridge`), and
:func:`reef_core.procs.run_brief`, which starts the bwrap probe.
"""

from __future__ import annotations

import argparse
import functools
import os
import secrets
import selectors
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from reef_core.bridge import LoopbackBridge

__all__ = [
    "BWRAP_ENV",
    "ENABLE_NAMESPACES",
    "ETC_MASKED",
    "INSTALL_BWRAP",
    "SYSTEM_DIRS",
    "Confinement",
    "bwrap_command",
    "bwrap_problem",
    "find_bwrap",
    "forwarder_command",
    "install_folders",
    "main",
]

#: the variable naming the bwrap to use (a path); unset: ``bwrap`` on PATH
BWRAP_ENV = "REEF_BWRAP"
#: bound read-only when they exist (a symlink, as on merged-/usr systems, stays a symlink)
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
#: what of ``/etc`` the sandbox does not see (a uid 0 inside could read them): password hashes,
#: sudo's rules, the host's ssh keys, TLS private keys
ETC_MASKED = (
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/sudoers",
    "/etc/sudoers.d",
    "/etc/ssh",
    "/etc/ssl/private",
)
#: how to get a sandbox, said with each reason there is none
INSTALL_BWRAP = "Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap"
ENABLE_NAMESPACES = (
    "enable unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1; Ubuntu 24.04+: "
    "sysctl kernel.apparmor_restrict_unprivileged_userns=0; in a container, a seccomp profile that "
    "allows them)"
)
_INSIDE_SOCKET_DIR = "/tmp/.reef-bridge"  # inside: the bridge's socket sits in the private /tmp
_SOCKET_NAME = "daemon.sock"
_INSIDE_FALLBACK_PORT = 8765
_CHUNK = 64 * 1024
_PROBE_TIMEOUT = 15.0


# ------------------------------------------------------------------------------------------ bwrap


def find_bwrap(env: Mapping[str, str] | None = None) -> tuple[str | None, str]:
    """The bwrap to use (``$REEF_BWRAP`` when set, else ``bwrap`` on PATH; ``env`` defaults to the
    process environment), or None and why there is none."""
    env = os.environ if env is None else env
    named = env.get(BWRAP_ENV)
    if named:
        if not (os.path.isfile(named) and os.access(named, os.X_OK)):
            return None, f"{BWRAP_ENV}={named} is not an executable file (point it at bwrap, or unset it)"
        return named, ""
    found = shutil.which("bwrap", path=env.get("PATH", os.defpath))
    return (found, "") if found else (None, f"bwrap is not installed ({INSTALL_BWRAP})")


def bwrap_problem(env: Mapping[str, str] | None = None) -> str | None:
    """Why no sandbox can run here, and how to get one; None when bwrap isolates (probed once per
    binary, with the namespaces and mounts a run gets: containers often refuse one of them)."""
    if not sys.platform.startswith("linux"):
        return f"no OS sandbox on {sys.platform}: reef's sandbox is bubblewrap, which needs Linux"
    bwrap, why = find_bwrap(env)
    if bwrap is None:
        return why
    problem = _probe(os.path.realpath(bwrap))
    return f"{problem}: {ENABLE_NAMESPACES}" if problem else None


@functools.lru_cache(maxsize=4)
def _probe(bwrap: str) -> str | None:
    from reef_core.procs import run_brief  # outside only (module docstring)

    argv = bwrap_command(["/bin/true"], env={}, writable=(), bwrap=bwrap)
    try:
        probe = run_brief(argv, timeout=_PROBE_TIMEOUT, env={})
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap cannot create namespaces here: {exc}"
    if probe.returncode != 0:
        said = " ".join(probe.stderr.split())[:300] or f"exit {probe.returncode}"
        return f"bwrap cannot create namespaces here: {said}"
    return None


def _under_system(path: Path) -> bool:
    return any(path == Path(d) or path.is_relative_to(d) for d in SYSTEM_DIRS)


def install_folders(programs: Iterable[Path | str]) -> list[Path]:
    """What must be bound for ``programs`` to start: for each, as named and as resolved, the
    outermost ``node_modules`` it lies in (an npm install: the harness, the node beside it); else,
    for the resolved file in a ``bin`` folder, the prefix above it (a Python or a node with its
    libraries), unless that prefix holds the home folder; else the folder it lies in.  Nothing
    under the system directories (bound anyway); outermost folders only."""
    home = Path(os.path.expanduser("~")).absolute()
    wanted: set[Path] = set()
    for program in programs:
        named = Path(program).absolute()
        resolved = named.resolve()
        for path in (named, resolved):
            parts = path.parts
            if "node_modules" in parts:
                folder = Path(*parts[: parts.index("node_modules") + 1])
            elif (
                path is resolved and path.parent.name == "bin" and not home.is_relative_to(path.parent.parent)
            ):
                folder = path.parent.parent
            else:
                folder = path.parent
            if not _under_system(folder) and folder != Path("/"):
                wanted.add(folder)
    return [p for p in sorted(wanted) if not any(p != q and p.is_relative_to(q) for q in wanted)]


def bwrap_command(
    inner: Sequence[str],
    *,
    env: Mapping[str, str],
    writable: Sequence[Path],
    readonly: Sequence[tuple[Path, Path] | Path] = (),
    chdir: Path | None = None,
    bwrap: str | None = None,
) -> list[str]:
    """``bwrap … -- inner``: the system directories read-only (see the module docstring), each of
    ``readonly`` (a folder, or ``(source, target)``) read-only, ``writable`` read-write at their
    own paths, a fresh ``/dev``, ``/proc`` and ``/tmp``, exactly ``env`` as the environment, every
    namespace unshared (the network one holds only loopback), no capabilities, killed with its
    parent; the root is an empty read-only folder otherwise."""
    argv = [bwrap or find_bwrap()[0] or "bwrap"]
    for name in SYSTEM_DIRS:
        if os.path.islink(name):
            argv += ["--symlink", os.readlink(name), name]
        elif os.path.isdir(name):
            argv += ["--ro-bind", name, name]
    for name in ETC_MASKED:
        if os.path.isdir(name) and not os.path.islink(name):
            argv += ["--tmpfs", name, "--remount-ro", name]
        elif os.path.lexists(name):
            argv += ["--ro-bind", "/dev/null", name]
    # /tmp before the binds: those below it are created inside the private tmpfs, not hidden by it
    argv += ["--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    for item in readonly:
        source, target = item if isinstance(item, tuple) else (item, item)
        argv += ["--ro-bind", str(source), str(target)]
    for path in writable:
        argv += ["--bind", str(path), str(path)]
    # as root, bwrap keeps every capability unless told: a root with CAP_SYS_ADMIN could remount
    argv += ["--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    argv += ["--clearenv"]
    for name, value in sorted(env.items()):
        argv += ["--setenv", name, value]
    if chdir is not None:
        argv += ["--chdir", str(chdir)]
    argv += ["--remount-ro", "/"]  # last: the mount points above are made in the root first
    return [*argv, "--", *inner]


def _python() -> str:
    """The base interpreter (not a virtual environment's): with ``-I`` the forwarder needs only
    its prefix, never the project's environment."""
    base = getattr(sys, "_base_executable", None) or sys.executable
    return base if os.path.isfile(base) else sys.executable


def forwarder_command(port: int, socket_path: str, inner: Sequence[str]) -> list[str]:
    """The command that runs ``inner`` inside the sandbox behind a 127.0.0.1:``port`` forwarder."""
    script = str(Path(__file__).resolve())
    return [_python(), "-I", "-B", script, "--port", str(port), "--socket", socket_path, "--", *inner]


class Confinement:
    """One sandboxed run: a bridge to the daemon at ``daemon_url`` for ``scenario`` holding
    ``token`` (the daemon's, or None), a fresh :attr:`credential` for the code inside, and the
    command line that runs a program in the sandbox behind it (:meth:`command`).

    Use as a context manager: the bridge listens between enter and exit.  Inside, the daemon is
    :attr:`inside_url`; pass it and :attr:`credential` in the harness's routing.
    """

    def __init__(
        self, daemon_url: str, scenario: str, token: str | None, *, env: Mapping[str, str] | None = None
    ) -> None:
        parts = urlsplit(daemon_url)
        if parts.scheme != "http" or parts.hostname is None:
            raise ValueError(
                f"daemon_url {daemon_url!r}: the sandbox's bridge forwards plain http to one host and port"
            )
        self.host = parts.hostname
        self.port = parts.port or 80
        self.scenario = scenario
        self.bwrap = find_bwrap(env)[0]
        # a privileged port inside needs a capability the sandbox lacks
        self.inside_port = self.port if self.port >= 1024 else _INSIDE_FALLBACK_PORT
        self.inside_url = f"http://127.0.0.1:{self.inside_port}"
        self.credential = "reef-sandbox-" + secrets.token_urlsafe(24)
        self._token = token
        self._socket_dir: Path | None = None
        self._bridge: LoopbackBridge | None = None

    @property
    def refused(self) -> list[str]:
        """The request lines the bridge turned away."""
        return self._bridge.refused if self._bridge else []

    def __enter__(self) -> Confinement:
        from reef_core.bridge import LoopbackBridge  # outside only (module docstring)

        # the socket's own short directory (0700): a unix socket path holds at most 107 bytes
        self._socket_dir = Path(tempfile.mkdtemp(prefix="reef-bridge-"))
        self._bridge = LoopbackBridge(
            self._socket_dir / _SOCKET_NAME,
            host=self.host,
            port=self.port,
            scenario=self.scenario,
            credential=self.credential,
            token=self._token,
        ).__enter__()
        return self

    def __exit__(self, *exc_info: object) -> None:
        try:
            if self._bridge is not None:
                self._bridge.__exit__(*exc_info)
        finally:
            if self._socket_dir is not None:
                shutil.rmtree(self._socket_dir, ignore_errors=True)
            self._bridge = self._socket_dir = None

    def command(
        self,
        inner: Sequence[str],
        *,
        env: Mapping[str, str],
        writable: Sequence[Path],
        programs: Iterable[Path | str] = (),
        readonly: Sequence[Path] = (),
        chdir: Path | None = None,
    ) -> list[str]:
        """``inner`` in the sandbox behind the forwarder: ``programs``' install folders and
        ``readonly`` read-only, ``writable`` read-write, ``env`` its whole environment."""
        if self._socket_dir is None:
            raise RuntimeError("Confinement.command outside its with block")
        python = _python()
        wrapped = forwarder_command(self.inside_port, f"{_INSIDE_SOCKET_DIR}/{_SOCKET_NAME}", inner)
        script = Path(wrapped[3])
        binds: list[tuple[Path, Path] | Path] = [*install_folders([*programs, python]), *readonly]
        if not _under_system(script.parent):
            binds.append(script)
        binds.append((self._socket_dir, Path(_INSIDE_SOCKET_DIR)))
        return bwrap_command(
            wrapped, env=env, writable=writable, readonly=binds, chdir=chdir, bwrap=self.bwrap
        )


# ------------------------------------------------------------------------------ inside: forwarder


def _pump(tcp: socket.socket, unix_path: str) -> None:
    """Copy bytes both ways between one loopback connection and the bridge, half-closes included."""
    with tcp, socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as bridge:
        try:
            bridge.connect(unix_path)
        except OSError:
            return
        selector = selectors.DefaultSelector()
        peers = {tcp: bridge, bridge: tcp}
        for sock in peers:
            selector.register(sock, selectors.EVENT_READ, data=sock)
        open_reads = 2
        try:
            while open_reads:
                for key, _ in selector.select():
                    conn: socket.socket = key.data
                    try:
                        data = conn.recv(_CHUNK)
                    except OSError:
                        return
                    if data:
                        try:
                            peers[conn].sendall(data)
                        except OSError:
                            return
                        continue
                    selector.unregister(conn)
                    open_reads -= 1
                    try:
                        peers[conn].shutdown(socket.SHUT_WR)
                    except OSError:
                        pass
        finally:
            selector.close()


def _serve_loopback(listener: socket.socket, unix_path: str) -> None:
    while True:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        threading.Thread(target=_pump, args=(conn, unix_path), daemon=True).start()


def main(argv: Sequence[str] | None = None) -> int:
    """Inside the sandbox: listen on 127.0.0.1:``--port``, run the command, exit with its code."""
    parser = argparse.ArgumentParser(prog="reef-sandbox-forwarder")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--socket", required=True)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command to run")
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind(("127.0.0.1", args.port))
    except OSError as exc:
        # taken: this is not a network namespace of its own, so the daemon's port is right here
        print(f"reef sandbox: cannot listen on 127.0.0.1:{args.port}: {exc}", file=sys.stderr)
        return 125
    listener.listen(64)
    threading.Thread(target=_serve_loopback, args=(listener, args.socket), daemon=True).start()
    try:
        return subprocess.call(command)
    except OSError as exc:
        print(f"reef sandbox: cannot start {command[0]}: {exc}", file=sys.stderr)
        return 127


if __name__ == "__main__":
    sys.exit(main())

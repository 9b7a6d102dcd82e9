"""``reef-codex``: the Codex CLI routed through reef, and reef's commands for the person at the terminal.

The verbs (``evolve``, ``versions``, ``update``, ``report``, ``learn``, ``doctor``) are the shared
launcher's (:mod:`adapters.verbs`, :mod:`adapters.doctor`), and so is the environment every run
gets (:func:`adapters.launcher.prepare_run`: ``CODEX_HOME`` = the installed home, the daemon, the
scenario, the run tag and the release).  What is Codex's own:

- **config.toml at every start.**  Codex writes into its config.toml while it runs, so the
  install carries ``reef-config.toml`` and each start writes ``config.toml`` from it plus the
  tables Codex keeps there (:func:`adapters.codex.render.merged_config`), mode 0600.
- **reef's hooks trusted.**  Codex runs no hook a person (or a trusted tool) has not trusted,
  keyed by the hook's place and a hash of its definition that only Codex computes.  When
  ``hooks.json`` changed since the last start, the launcher asks ``codex app-server`` (its
  JSON-RPC on stdin: ``hooks/list``, then ``config/batchWrite``) to trust the hooks of
  ``$CODEX_HOME/hooks.json``, and only those: reef wrote that file, and the tree's own hooks in it
  were approved by a person before they were released.  A project's hooks stay Codex's question.
  Failing that (an old Codex, a timeout), the run goes on and Codex asks the person.
- **The key.**  ``REEF_API_KEY`` (the provider's ``env_key``) is reef's token, else a placeholder.

``REEF_CODEX`` names the codex to run.  In a session, reef's commands are typed ``:versions``,
``:evolve <text>``, ``:good``, ``:bad`` and ``:feedback <text>``: Codex's TUI refuses a ``/``
command it does not know before any hook sees it.
"""

from __future__ import annotations

import hashlib
import json
import os
import queue
import subprocess
import threading
import time
import tomllib
from pathlib import Path
from typing import Any

from adapters import launcher as core
from adapters.codex.render import CONFIG_FILE, REEF_CONFIG, merged_config
from adapters.launcher import Context

__all__ = ["CODEX", "CODEX_MIN_VERSION", "main", "trust_hooks", "write_config"]

#: the oldest Codex reef accepts (hooks.json, session-id headers and env_http_headers as verified)
CODEX_MIN_VERSION = "0.171.0"
_PLACEHOLDER_KEY = "reef-local"
_TRUSTED = ".reef-hooks-trusted"  # the sha256 of the hooks.json last trusted, in CODEX_HOME
TRUST_TIMEOUT_S = 15.0
_CLIENT = {"name": "reef", "version": "1"}


def write_config(home: Path) -> None:
    """``home/config.toml`` from the installed ``reef-config.toml`` and Codex's own tables."""
    reef = (home / REEF_CONFIG).read_text(encoding="utf-8")
    try:
        current = tomllib.loads((home / CONFIG_FILE).read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError):
        current = {}
    text = merged_config(reef, current)
    path = home / CONFIG_FILE
    try:
        if path.read_text(encoding="utf-8") == text:
            return
    except OSError:
        pass
    temporary = path.with_suffix(".tmp")
    temporary.write_text(text, encoding="utf-8")
    os.chmod(temporary, 0o600)
    os.replace(temporary, path)


def trust_hooks(codex: str, home: Path, env: dict[str, str]) -> bool:
    """Trust the hooks of ``home/hooks.json`` through ``codex app-server``, once per content of
    that file; True when they are trusted (now or before)."""
    hooks = home / "hooks.json"
    try:
        digest = hashlib.sha256(hooks.read_bytes()).hexdigest()
    except OSError:
        return True  # no hooks: nothing to trust
    marker = home / _TRUSTED
    if marker.exists() and marker.read_text().strip() == digest:
        return True
    ours = f"{hooks}:"
    try:
        listed = _app_server(codex, env, [("hooks/list", {"cwds": [os.getcwd()]})])[0]
        keys = {
            hook["key"]: hook["currentHash"]
            for entry in listed.get("data", [])
            for hook in entry.get("hooks", [])
            if str(hook.get("key", "")).startswith(ours) and hook.get("currentHash")
        }
        if keys:
            edits = [
                {"keyPath": "hooks.state", "mergeStrategy": "upsert", "value": {key: {"trusted_hash": value}}}
                for key, value in keys.items()
            ]
            _app_server(codex, env, [("config/batchWrite", {"edits": edits})])
    except (OSError, ValueError, KeyError, TypeError, subprocess.SubprocessError):
        return False
    marker.write_text(digest + "\n")
    return True


def _app_server(codex: str, env: dict[str, str], calls: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    """The results of ``calls`` to one ``codex app-server`` (JSON-RPC lines on stdin/stdout),
    within :data:`TRUST_TIMEOUT_S` in all: its output is read on a thread of its own, so a server
    that hangs without a word costs the timeout, not the session."""
    messages: list[dict[str, Any]] = [
        {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"clientInfo": _CLIENT}},
        {"jsonrpc": "2.0", "method": "initialized"},
    ]
    messages += [{"jsonrpc": "2.0", "id": i, "method": m, "params": p} for i, (m, p) in enumerate(calls, 1)]
    server = subprocess.Popen(
        [codex, "app-server"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        text=True,
    )
    stdin, stdout = server.stdin, server.stdout
    assert stdin is not None and stdout is not None
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        for line in stdout:
            lines.put(line)
        lines.put(None)  # the end of its output: a server that exited answers nothing more

    # not closed here: closing a pipe another thread reads blocks on its lock; the reader ends
    # at the end of file once the server is killed, and the pipe goes with the object
    threading.Thread(target=read, daemon=True).start()
    results: dict[int, Any] = {}
    deadline = time.monotonic() + TRUST_TIMEOUT_S
    try:
        for message in messages:
            stdin.write(json.dumps(message) + "\n")
            stdin.flush()
            wanted = message.get("id")
            while wanted is not None and wanted not in results:
                try:
                    line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    raise subprocess.TimeoutExpired("codex app-server", TRUST_TIMEOUT_S) from None
                if line is None:
                    raise ValueError("codex app-server exited without answering")
                answer = json.loads(line)
                if "id" in answer and "method" not in answer:
                    if "error" in answer:
                        raise ValueError(f"codex app-server: {answer['error']}")
                    results[answer["id"]] = answer.get("result")
    finally:
        server.kill()
        server.wait()
        stdin.close()
    return [results[i] for i in range(1, len(calls) + 1)]


def _run_codex(ctx: Context, args: list[str]) -> int:
    _, codex, run_env = core.prepare_run(ctx, args, dict(ctx.env))
    home = Path(run_env[ctx.harness.config_env])
    run_env["REEF_API_KEY"] = ctx.token or ctx.env.get("REEF_API_KEY") or _PLACEHOLDER_KEY
    run_env["REEF_RUN_STARTED_MS"] = str(int(time.time() * 1000))
    if (home / REEF_CONFIG).exists():
        write_config(home)
        if not ctx.harness.info_only.intersection(args) and not trust_hooks(codex, home, run_env):
            print("reef-codex: could not trust reef's hooks; Codex will ask you about them", file=ctx.err)
    return core.exec_harness(ctx, codex, args, run_env)


CODEX = core.Harness(
    adapter="codex",
    binary="codex",
    label="Codex",
    config_dir="home",
    config_env="CODEX_HOME",
    min_version=CODEX_MIN_VERSION,
    run=_run_codex,
    command_prefix=":",
    in_session_install=":versions {name} install",
    extra={"hook": core.hook_verb},
)


main = core.entry(CODEX)

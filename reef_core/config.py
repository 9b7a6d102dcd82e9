"""Settings: the only reader of configuration files and the environment.

Every value comes from one of five layers, later layers winning::

    default  <  profile (--recipe NAME)  <  file (-c reef.toml)  <  environment  <  flags

Flags are dotted overrides, ``--reef.port 8901`` or ``--inference.upstream-url=http://…``;
keys may be spelled with ``-`` or ``_``.  Unknown keys are errors that name the key and where
it came from.  :func:`load_settings` is called once at an entry point and the resulting frozen
:class:`Settings` is passed down; nothing reads the environment at import time.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomlkit
import tomlkit.exceptions

from reef_core.errors import ConfigError
from reef_core.ids import NODE_PATTERN

__all__ = [
    "PROFILES",
    "InferenceSettings",
    "OpsSettings",
    "RecipeSettings",
    "ReefSettings",
    "Settings",
    "StorageSettings",
    "load_settings",
]


def _setting(
    default: Any,
    help: str,
    *,
    secret: bool = False,
    env: str | None = None,
    choices: tuple[str, ...] | None = None,
    pattern: tuple[str, str] | None = None,
) -> Any:
    """``pattern``: (regular expression, what it admits in words) a non-empty string must match."""
    meta = {"help": help, "secret": secret, "env": env, "choices": choices, "pattern": pattern}
    if isinstance(default, (dict, list)):
        return field(default_factory=lambda: type(default)(default), metadata=meta)
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class ReefSettings:
    host: str = _setting("127.0.0.1", "address the daemon listens on")
    port: int = _setting(8900, "port the daemon listens on")
    tokens: tuple[str, ...] = _setting(
        (),
        "bearer tokens accepted by the daemon (comma-separated in REEF_TOKEN)",
        secret=True,
        env="REEF_TOKEN",
    )
    allow_unauthenticated: bool = _setting(
        False,
        "listen beyond loopback with no token: anyone who can reach the port may read every record "
        "and publish releases (logs a warning at start and hourly)",
    )
    allowed_hosts: tuple[str, ...] = _setting(
        (),
        "names the daemon answers to besides loopback, its listen address and IP addresses (the Host a "
        "request was sent to, with or without a port; * for any): a web page that rebinds its own name "
        "to this machine is refused (comma-separated from a flag)",
    )
    allowed_origins: tuple[str, ...] = _setting(
        (),
        "web pages (scheme://host[:port]) whose requests the daemon answers besides its own: a request "
        "a browser sends from any other page is refused (comma-separated from a flag)",
    )
    implicit_scenarios: bool = _setting(True, "create a scenario on its first request")
    default_scenario: str | None = _setting(
        None,
        "the scenario of an inference request that names none (no x-reef-scenario header, no /s/<scenario>/ "
        "in its URL): for clients that can only set a base URL",
        pattern=(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", "a scenario name: letters, digits, '.', '_', '-'"),
    )
    max_body_bytes: int = _setting(64 * 1024 * 1024, "largest request body accepted")
    max_json_depth: int = _setting(128, "deepest nesting of arrays and objects accepted in a JSON body")
    header_timeout_s: float = _setting(
        60.0,
        "seconds a connection may take to send a request's head (from its opening, or from the end of "
        "its last answer); past that it is closed",
    )


@dataclass(frozen=True)
class InferenceSettings:
    upstream_url: str | None = _setting(
        None, "base URL of the upstream model server", env="REEF_UPSTREAM_URL"
    )
    upstream_model: str | None = _setting(
        None, "model name sent upstream (default: as the client sent it)", env="REEF_UPSTREAM_MODEL"
    )
    upstream_api: str = _setting("openai", "wire format the upstream speaks", choices=("openai", "anthropic"))
    upstream_api_key: str | None = _setting(
        None, "API key for the upstream", secret=True, env="REEF_UPSTREAM_API_KEY"
    )
    upstream_headers: dict[str, str] = _setting(
        {},
        "headers sent with every upstream request (--inference.upstream-header 'Name: value', "
        "repeatable; a value ${NAME} is read from the environment); never logged or recorded",
        secret=True,
    )
    model_path: str | None = _setting(None, "a local model to serve (builtin:tiny is the embedded one)")
    backend: str = _setting(
        "local",
        "engine for a local model (transformers: chosen for a model dir, a .gguf, a cached hub name)",
        choices=("local", "transformers", "sglang"),
    )
    model_cache: Path | None = _setting(
        None, "where pretrained local models are cached (default: <state>/models)"
    )
    timeout_s: float = _setting(600.0, "seconds to wait for an upstream answer")
    max_answer_bytes: int = _setting(
        256 * 1024 * 1024,
        "largest upstream answer read (a whole answer, or a stream's bytes all together, decoded); "
        "past it the answer is cut off with a 502",
    )
    responses: str = _setting(
        "auto",
        "how POST /v1/responses reaches an OpenAI upstream: forward it, translate it to chat "
        "completions, or auto (forward; translate from then on once the upstream answers "
        "404/405/501); the embedded model and Anthropic upstreams always translate",
        choices=("auto", "forward", "translate"),
    )


@dataclass(frozen=True)
class RecipeSettings:
    name: str = _setting("basic", "the learning recipe this deployment runs")
    implementation: str | None = _setting(None, "dotted reference package.module:Class overriding the name")
    config: dict[str, Any] = _setting({}, "recipe-specific settings (recipe.config.<field>)")
    proposer_sandbox: str | None = _setting(
        None,
        "run reefine's agent proposer: bwrap (sandboxed) or none (trusted host); unset: the text proposer",
        env="REEF_PROPOSER_SANDBOX",
        choices=("none", "bwrap"),
    )


@dataclass(frozen=True)
class StorageSettings:
    state_dir: Path = _setting(Path(".reef"), "where scenario repositories live")
    fsync: bool = _setting(False, "fsync every object (survives power loss; slower)")
    max_batch: int = _setting(256, "most items written per group commit")
    pack_every: int = _setting(2000, "items (or 1/20 as many batches) between background repacks (0: never)")
    max_open_scenarios: int = _setting(
        64, "most scenarios held open for writing at once (fewer when the open-file limit is low)"
    )
    max_scenarios: int = _setting(
        10_000, "most scenarios under the state directory: creating one more is refused (403)"
    )
    idle_close_s: float = _setting(300.0, "seconds a scenario may sit unused before it is closed (0: never)")
    sync_interval: float = _setting(
        0.0, "seconds between syncs of each open scenario with its git remotes (0: off; reef sync by hand)"
    )
    sync_timeout_s: float = _setting(
        120.0, "seconds a git push or fetch to a remote may take before it is given up (reef sync, publish)"
    )
    node: str = _setting(
        "",
        "this daemon's name among several serving the same scenarios: it writes refs/reef/data/<node> "
        "(empty: the one daemon, refs/heads/data); set per machine",
        pattern=(
            NODE_PATTERN,
            "a node name: 1-32 lowercase letters, digits, '_' or '-', starting with a letter or digit",
        ),
    )


@dataclass(frozen=True)
class OpsSettings:
    otlp_endpoint: str | None = _setting(
        None,
        "send OpenTelemetry traces to this OTLP/HTTP collector (http://127.0.0.1:4318); needs the otel extra",
        pattern=(r"https?://\S+", "an http(s) URL"),
    )
    log_format: str = _setting(
        "text",
        "the daemon's log lines: text, or json (one object a line, with the request's id, scenario, receipt)",
        choices=("text", "json"),
    )
    metrics: bool = _setting(True, "serve GET /metrics (Prometheus's format) and count what it shows")
    metrics_scenario_label: bool = _setting(
        False,
        "label /metrics' per-scenario counters with the scenario (one series per scenario: keep it off "
        "for a deployment with many)",
    )


_SECTIONS: dict[str, type] = {
    "reef": ReefSettings,
    "inference": InferenceSettings,
    "recipe": RecipeSettings,
    "storage": StorageSettings,
    "ops": OpsSettings,
}

#: built-in profiles: defaults that follow from the recipe a deployment runs
PROFILES: dict[str, dict[str, Any]] = {
    "basic": {},
    "reefine": {"reef.port": 8901, "storage.state_dir": ".reef/reefine"},
    "grpo": {"inference.model_path": "builtin:tiny", "storage.state_dir": ".reef/grpo"},
}


@dataclass(frozen=True)
class Settings:
    reef: ReefSettings
    inference: InferenceSettings
    recipe: RecipeSettings
    storage: StorageSettings
    ops: OpsSettings
    #: dotted key (``reef.port``) -> where its value came from
    sources: Mapping[str, str]

    def describe(self) -> list[tuple[str, str, str]]:
        """``(key, shown value, source)`` for every setting, secrets masked."""
        rows: list[tuple[str, str, str]] = []
        for section, cls in _SECTIONS.items():
            values = getattr(self, section)
            for f in dataclasses.fields(cls):
                key = f"{section}.{f.name}"
                value = getattr(values, f.name)
                if f.metadata["secret"]:
                    shown = "(unset)" if not value else "********"
                elif key == "recipe.config":
                    rows.extend(
                        (f"{key}.{_display(k)}", _show(v), self.sources.get(f"{key}.{k}", "?"))
                        for k, v in sorted(value.items())
                    )
                    continue
                else:
                    shown = _show(value)
                rows.append((_display(key), shown, self.sources.get(key, "default")))
        return rows


def _display(key: str) -> str:
    return key.replace("_", "-")


def _show(value: Any) -> str:
    if value is None:
        return "(unset)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ",".join(value)
    return str(value)


def _normalise(key: str) -> str:
    return key.strip().replace("-", "_")


def _known_keys() -> dict[str, dataclasses.Field]:
    return {f"{section}.{f.name}": f for section, cls in _SECTIONS.items() for f in dataclasses.fields(cls)}


def _type_of(key: str) -> Any:
    section, name = key.split(".", 1)
    return typing.get_type_hints(_SECTIONS[section])[name]


def load_settings(
    *,
    file: Path | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Sequence[str] = (),
    cwd: Path | None = None,
) -> Settings:
    """Resolve settings from every layer.  Raises :class:`ConfigError` naming a bad key."""
    env = os.environ if env is None else env
    known = _known_keys()
    layers: list[tuple[str, dict[str, Any]]] = []

    file_values: dict[str, Any] = {}
    file_source = ""
    if file is not None:
        file_source = f"file:{file}"
        file_values = _read_file(file)
    env_values = {
        key: (raw, f"env:{name}")
        for key, f in known.items()
        if (name := f.metadata["env"]) and (raw := env.get(name)) not in (None, "")
    }
    flag_values = _parse_flags(overrides)

    # which recipe, hence which profile: decided by every layer above the profile
    recipe_name: Any = known["recipe.name"].default
    if "recipe.name" in file_values:
        recipe_name = file_values["recipe.name"]
    if "recipe.name" in flag_values:
        recipe_name = flag_values["recipe.name"][0]
    profile = PROFILES.get(recipe_name, {}) if isinstance(recipe_name, str) else {}
    layers.append((f"profile:{recipe_name}", dict(profile)))
    layers.append((file_source, file_values))
    resolved: dict[str, Any] = {key: f.default for key, f in known.items()}
    resolved["recipe.config"] = {}
    sources: dict[str, str] = {}

    def put(key: str, raw: Any, source: str) -> None:
        if key.startswith("recipe.config."):
            sub = key[len("recipe.config.") :]
            if not sub:
                raise ConfigError(f"empty recipe.config key (from {source})", field=key)
            resolved["recipe.config"][sub] = _coerce_free(raw)
            sources[key] = source
            return
        if key not in known:
            hint = difflib.get_close_matches(key, list(known), n=1)
            suggestion = f"; did you mean {_display(hint[0])}?" if hint else ""
            raise ConfigError(f"unknown setting {_display(key)!r} (from {source}){suggestion}", field=key)
        if key == "recipe.config":
            if not isinstance(raw, Mapping):
                raise ConfigError(f"recipe.config must be a table (from {source})", field=key)
            for sub, value in raw.items():
                put(f"recipe.config.{_normalise(sub)}", value, source)
            return
        resolved[key] = _coerce(key, raw, known[key], source)
        sources[key] = source

    for source, values in layers:
        for key, raw in values.items():
            put(key, raw, source)
    for key, (raw, source) in [*env_values.items(), *flag_values.items()]:
        put(key, raw, source)

    state_dir = Path(resolved["storage.state_dir"]).expanduser()
    if not state_dir.is_absolute():
        state_dir = (cwd or Path.cwd()) / state_dir
    resolved["storage.state_dir"] = state_dir
    headers = resolved["inference.upstream_headers"]
    resolved["inference.upstream_headers"] = _from_environment(
        headers if isinstance(headers, Mapping) else {}, env
    )

    built = {}
    for section, cls in _SECTIONS.items():
        built[section] = cls(**{f.name: resolved[f"{section}.{f.name}"] for f in dataclasses.fields(cls)})
    return Settings(**built, sources=sources)


def _read_file(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}", field="config") from exc
    try:
        document = tomlkit.parse(text).unwrap()
    except tomlkit.exceptions.ParseError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}", field="config") from exc
    flat: dict[str, Any] = {}
    for section, table in document.items():
        section_key = _normalise(section)
        if section_key not in _SECTIONS:
            hint = difflib.get_close_matches(section_key, list(_SECTIONS), n=1)
            suggestion = f"; did you mean [{hint[0]}]?" if hint else ""
            raise ConfigError(f"unknown section [{section}] in {path}{suggestion}", field=section)
        if not isinstance(table, dict):
            raise ConfigError(f"{section} in {path} must be a table", field=section)
        for key, value in table.items():
            flat[f"{section_key}.{_normalise(key)}"] = value
    return flat


def _parse_flags(args: Sequence[str]) -> dict[str, tuple[Any, str]]:
    """``["--reef.port", "8901", "--x.y=z", "--storage.fsync"]`` -> key -> (raw, source)."""
    values: dict[str, tuple[Any, str]] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("--") or len(arg) == 2:
            raise ConfigError(
                f"unexpected argument {arg!r}: settings are given as --section.key value", field=arg
            )
        name, sep, raw = arg[2:].partition("=")
        flag = f"--{name}"
        if not sep:
            if i + 1 < len(args) and not args[i + 1].startswith("--"):
                raw = args[i + 1]
                i += 1
            else:
                raw = "true"  # a bare --storage.fsync switches a boolean on
        if name == "recipe":  # --recipe NAME picks a built-in profile
            name = "recipe.name"
        if "." not in name:
            raise ConfigError(f"unknown option {flag}: settings are dotted, like --reef.port", field=name)
        if _normalise(name) == "inference.upstream_header":  # repeatable: one 'Name: value' each
            table = values.get("inference.upstream_headers", ({}, ""))[0]
            header, colon, value = str(raw).partition(":")
            if not colon:
                raise ConfigError(
                    f"{flag} takes 'Name: value', got {raw!r}", field="inference.upstream_headers"
                )
            values["inference.upstream_headers"] = ({**table, header.strip(): value.strip()}, f"flag:{flag}")
            i += 1
            continue
        values[_normalise(name)] = (raw, f"flag:{flag}")
        i += 1
    return values


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _coerce(key: str, raw: Any, spec: dataclasses.Field, source: str) -> Any:
    kind = _type_of(key)
    optional = type(None) in typing.get_args(kind)
    base = next((t for t in typing.get_args(kind) if t is not type(None)), kind) if optional else kind

    def bad(expected: str) -> ConfigError:
        return ConfigError(f"{_display(key)} must be {expected}, got {raw!r} (from {source})", field=key)

    if optional and (raw is None or raw == ""):
        return None
    if base is bool:
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, str) and raw.lower() in _TRUE | _FALSE:
            return raw.lower() in _TRUE
        raise bad("true or false")
    if base is int:
        if isinstance(raw, bool):
            raise bad("an integer")
        try:
            return int(raw)
        except (TypeError, ValueError):
            raise bad("an integer") from None
    if base is float:
        try:
            return float(raw)
        except (TypeError, ValueError):
            raise bad("a number") from None
    if base is Path:
        if not isinstance(raw, (str, Path)) or not str(raw):
            raise bad("a path")
        return Path(raw)
    if typing.get_origin(base) is dict:
        return _header_table(key, raw, source)
    if typing.get_origin(base) is tuple:
        if isinstance(raw, str):
            return tuple(part.strip() for part in raw.split(",") if part.strip())
        if isinstance(raw, (list, tuple)) and all(isinstance(x, str) for x in raw):
            return tuple(raw)
        raise bad("a list of strings")
    if base is str:
        if not isinstance(raw, str):
            raise bad("a string")
        choices = spec.metadata["choices"]
        if choices and raw not in choices:
            raise bad("one of " + ", ".join(choices))
        pattern = spec.metadata["pattern"]
        if pattern and raw and re.fullmatch(pattern[0], raw) is None:
            raise bad(pattern[1])
        return raw
    raise ConfigError(f"{_display(key)} cannot be set from {source}", field=key)


_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # an HTTP token (RFC 9110)


def _header_table(key: str, raw: Any, source: str) -> dict[str, str]:
    """A table of header names to values, each checked (the values themselves are never shown)."""
    if not isinstance(raw, Mapping):
        raise ConfigError(
            f"{_display(key)} must be a table of header names to values (from {source})", field=key
        )
    table: dict[str, str] = {}
    for name, value in raw.items():
        if not isinstance(name, str) or not _HEADER_NAME.fullmatch(name):
            raise ConfigError(f"{_display(key)}: {name!r} is not a header name (from {source})", field=key)
        if not isinstance(value, str) or "\r" in value or "\n" in value:
            raise ConfigError(
                f"{_display(key)}: the value of {name} must be one line of text (from {source})", field=key
            )
        table[name] = value
    return table


_ENV_VALUE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def _from_environment(headers: Mapping[str, str], env: Mapping[str, str]) -> dict[str, str]:
    """Upstream header values with each ``${NAME}`` replaced by the variable's value; an unset
    variable stops the start, naming it (never its value)."""

    def value_of(name: str, header: str) -> str:
        found = env.get(name)
        if not found:
            raise ConfigError(
                f"inference.upstream-headers: {header} names ${{{name}}}, which is not set",
                field="inference.upstream_headers",
            )
        if "\r" in found or "\n" in found:
            raise ConfigError(
                f"inference.upstream-headers: ${{{name}}} (for {header}) holds more than one line",
                field="inference.upstream_headers",
            )
        return found

    resolved: dict[str, str] = {}
    for header, value in headers.items():

        def substitute(match: re.Match[str], header: str = header) -> str:
            return value_of(match.group(1), header)

        resolved[header] = _ENV_VALUE.sub(substitute, value)
    return resolved


def _coerce_free(raw: Any) -> Any:
    """A recipe.config value: typed already from TOML; from a flag or env, parsed as TOML."""
    if not isinstance(raw, str):
        return raw
    try:
        return tomlkit.parse(f"v = {raw}").unwrap()["v"]
    except tomlkit.exceptions.ParseError:
        return raw

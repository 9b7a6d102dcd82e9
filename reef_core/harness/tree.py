"""The harness tree: adapter-neutral skills, rules, commands, extensions and config as one value.

A release commit's tree is exactly :meth:`HarnessTree.files`, laid out so that ``git diff v1 v2``
reads naturally::

    skills/<name>/SKILL.md   rules/<name>.md   commands/<name>.md
    extensions/<name>.ts     config/<name>.json                     reef-release.json

Everything here is pure: file maps in, file maps out (the store turns them into git trees).
Names starting with ``reef`` are reef's own entries: they round-trip through
:meth:`HarnessTree.from_files` and :meth:`HarnessTree.files`, but a proposed change
(:meth:`HarnessTree.apply`) may not touch them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from reef_core.errors import InvalidInput

__all__ = [
    "APPROVAL_CONFIG_KEYS",
    "KINDS",
    "MANIFEST_PATH",
    "MAX_ENTRIES",
    "MAX_ENTRY_BYTES",
    "NAME_PATTERN",
    "OPS",
    "REEF_OWNED_CONFIG_KEYS",
    "Change",
    "Entry",
    "Frontmatter",
    "HarnessTree",
    "Manifest",
    "TreeError",
    "approval_changes",
    "changed_entries",
    "is_reserved",
    "needs_approval",
    "parse_frontmatter",
    "summarize_changes",
]

KINDS = ("skill", "rule", "command", "extension", "config")
OPS = ("create", "update", "remove")
MANIFEST_PATH = "reef-release.json"
MAX_ENTRIES = 200
MAX_ENTRY_BYTES = 64 * 1024

#: config keys reef itself sets (provider, model, what gets loaded from where); a tree may not
#: set them, or one release could point the harness at another endpoint or load unreviewed code
REEF_OWNED_CONFIG_KEYS = (
    "defaultModel",
    "defaultProvider",
    "extensions",
    "packages",
    "prompts",
    "providers",
    "skills",
)
#: config keys that run a program, let one run unasked or redirect traffic: changing one needs a
#: person's approval, like extension code (``env``, ``hooks``, ``permissions`` and ``statusLine``
#: are Claude Code's: a hook or status line is a command, a permission lets the model run one
#: without asking, a variable can load code such as ``NODE_OPTIONS``; ``approval_policy``,
#: ``mcp_servers``, ``notify``, ``sandbox_mode`` and ``shell_environment_policy`` are Codex's, for
#: the same reasons; ``experimental``, ``formatter``, ``lsp``, ``mcp``, ``permission``, ``plugin``
#: and ``tools`` are opencode's: they start programs, load code or let the model run tools
#: unasked; the rest are pi settings)
APPROVAL_CONFIG_KEYS = (
    "approval_policy",
    "env",
    "experimental",
    "externalEditor",
    "formatter",
    "hooks",
    "httpProxy",
    "lsp",
    "mcp",
    "mcp_servers",
    "notify",
    "npmCommand",
    "permission",
    "permissions",
    "plugin",
    "sandbox_mode",
    "shellCommandPrefix",
    "shellPath",
    "shell_environment_policy",
    "statusLine",
    "tools",
)

#: an entry's name (a JSON schema ``pattern`` too: reefine's proposer is held to it)
NAME_PATTERN = r"^[a-z0-9][a-z0-9-]{0,63}$"
_NAME = re.compile(NAME_PATTERN)
_RESERVED_PREFIX = "reef"
#: kind -> (path prefix, path suffix); the name sits between them
_LAYOUT: dict[str, tuple[str, str]] = {
    "skill": ("skills/", "/SKILL.md"),
    "rule": ("rules/", ".md"),
    "command": ("commands/", ".md"),
    "extension": ("extensions/", ".ts"),
    "config": ("config/", ".json"),
}
_KIND_ORDER = {kind: i for i, kind in enumerate(KINDS)}
_SKILL_FIELDS = frozenset(
    {
        "name",
        "description",
        "license",
        "compatibility",
        "metadata",
        "allowed-tools",
        "disable-model-invocation",
    }
)
_COMMAND_FIELDS = frozenset({"description", "argument-hint"})
_MAX_DESCRIPTION = 1024  # the Agent Skills limit; pi warns above it
_EXPORT_DEFAULT = re.compile(r"\bexport\s+default\b")


class TreeError(InvalidInput):
    """A harness tree, entry, change or manifest is malformed; the message names the entry or field."""

    code = "invalid_tree"


def is_reserved(name: str) -> bool:
    """Whether ``name`` belongs to reef's own entries (``reef``, ``reef-…``, ``reefine``…)."""
    return name.startswith(_RESERVED_PREFIX)


def _check_kind(kind: object, *, field: str) -> str:
    if not isinstance(kind, str) or kind not in KINDS:
        raise TreeError(
            f"{field} {kind!r} is not a harness entry kind: use one of {', '.join(KINDS)}", field=field
        )
    return kind


def _check_name(name: object, *, field: str) -> str:
    if not isinstance(name, str) or _NAME.match(name) is None:
        shown = repr(name) if not isinstance(name, str) or len(name) <= 70 else "(too long)"
        raise TreeError(
            f"{field} {shown} is not a valid entry name: use 1-64 lowercase letters, digits or '-', "
            "starting with a letter or digit",
            field=field,
        )
    return name


@dataclass(frozen=True)
class Entry:
    """One skill, rule, command, extension or config file of a harness tree."""

    kind: str
    name: str
    content: str

    def __post_init__(self) -> None:
        _check_kind(self.kind, field="kind")
        _check_name(self.name, field="name")
        if not isinstance(self.content, str):
            raise TreeError(f"{self.path}: content must be text", field="content")

    @property
    def path(self) -> str:
        prefix, suffix = _LAYOUT[self.kind]
        return f"{prefix}{self.name}{suffix}"

    @property
    def reserved(self) -> bool:
        return is_reserved(self.name)


def _check_change(op: object, kind: object, name: object, content: object, *, where: str) -> None:
    if not isinstance(op, str) or op not in OPS:
        raise TreeError(
            f"{where}.op {op!r} is not an operation: use one of {', '.join(OPS)}", field=f"{where}.op"
        )
    _check_kind(kind, field=f"{where}.kind")
    _check_name(name, field=f"{where}.name")
    if op == "remove":
        if content is not None:
            raise TreeError(f"{where}: a remove takes no content", field=f"{where}.content")
    elif not isinstance(content, str):
        raise TreeError(f"{where}: a {op} needs content (text)", field=f"{where}.content")


@dataclass(frozen=True)
class Change:
    """One proposed edit: create, update or remove an entry (a remove carries no content)."""

    op: str
    kind: str
    name: str
    content: str | None = None

    def __post_init__(self) -> None:
        _check_change(self.op, self.kind, self.name, self.content, where="change")

    @classmethod
    def from_json(cls, obj: Any, *, where: str = "changes[0]") -> Change:
        """Parse one change from model or HTTP output; errors name ``where`` and the field."""
        if not isinstance(obj, dict):
            raise TreeError(f"{where} must be an object with op, kind, name and content", field=where)
        unknown = sorted(set(obj) - {"op", "kind", "name", "content"})
        if unknown:
            raise TreeError(f"{where} has unknown field {unknown[0]!r}", field=f"{where}.{unknown[0]}")
        content = obj.get("content")
        if obj.get("op") == "remove" and content == "":
            content = None  # models often send "" with a remove; it means the same
        _check_change(obj.get("op"), obj.get("kind"), obj.get("name"), content, where=where)
        return cls(op=obj["op"], kind=obj["kind"], name=obj["name"], content=content)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"op": self.op, "kind": self.kind, "name": self.name}
        if self.content is not None:
            out["content"] = self.content
        return out


@dataclass(frozen=True)
class Manifest:
    """``reef-release.json``: the release number, the ask behind it, what it requires, the
    verdict, and what it learned from (``{"kind": "ask"}``, or ``{"kind": "usage", "sessions":
    n, "reports": m, "lessons": k}``)."""

    version: int | None = None
    ask: str | None = None
    requires: dict[str, str] = field(default_factory=dict)
    verdict: str | None = None
    learned_from: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.version is not None and (
            not isinstance(self.version, int) or isinstance(self.version, bool) or self.version < 1
        ):
            raise TreeError(f"manifest version {self.version!r} must be a positive integer", field="version")
        for name in ("ask", "verdict"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise TreeError(f"manifest {name} must be text", field=name)
        if not isinstance(self.requires, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in self.requires.items()
        ):
            raise TreeError("manifest requires must map names to text", field="requires")
        object.__setattr__(self, "requires", dict(sorted(self.requires.items())))
        if self.learned_from is not None and not (
            isinstance(self.learned_from, Mapping) and isinstance(self.learned_from.get("kind"), str)
        ):
            raise TreeError("manifest learned_from must be an object with a kind", field="learned_from")

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "ask": self.ask,
            "requires": dict(self.requires),
            "verdict": self.verdict,
            "version": self.version,
        }
        if self.learned_from is not None:
            out["learned_from"] = dict(self.learned_from)
        return out

    @classmethod
    def from_json(cls, obj: Any) -> Manifest:
        if not isinstance(obj, dict):
            raise TreeError(f"{MANIFEST_PATH} must hold a JSON object", field=MANIFEST_PATH)
        unknown = sorted(set(obj) - {"ask", "requires", "verdict", "version", "learned_from"})
        if unknown:
            raise TreeError(f"{MANIFEST_PATH} has unknown field {unknown[0]!r}", field=unknown[0])
        return cls(
            version=obj.get("version"),
            ask=obj.get("ask"),
            requires=obj.get("requires") or {},
            verdict=obj.get("verdict"),
            learned_from=obj.get("learned_from"),
        )


@dataclass(frozen=True)
class Frontmatter:
    """The ``---`` header of a markdown entry: simple ``key: value`` lines, and the body after it."""

    fields: Mapping[str, str]
    body: str
    errors: tuple[str, ...] = ()


def parse_frontmatter(text: str) -> Frontmatter | None:
    """Split ``text`` into frontmatter and body, or None when it has no frontmatter.

    Only the subset entries need: ``key: value`` lines, quoted values, and indented
    continuation lines (folded into the value, so ``description: >`` blocks work).
    Malformed lines are reported in ``errors`` rather than raised, for :meth:`HarnessTree.problems`.
    """
    lines = text.removeprefix("\ufeff").replace("\r\n", "\n").split("\n")
    if not lines or lines[0].rstrip() != "---":
        return None
    try:
        end = next(i for i in range(1, len(lines)) if lines[i].rstrip() == "---")
    except StopIteration:
        return Frontmatter({}, "", ("frontmatter starts with --- but has no closing --- line",))
    fields: dict[str, str] = {}
    errors: list[str] = []
    key: str | None = None
    for number, line in enumerate(lines[1:end], start=2):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if line[0] in " \t":
            if key is None:
                errors.append(f"frontmatter line {number} is indented but follows no key")
            else:
                fields[key] = f"{fields[key]} {line.strip()}".strip()
            continue
        match = re.match(r"^([A-Za-z0-9_-]+):(?:\s+(.*))?$", line.rstrip())
        if match is None:
            errors.append(f"frontmatter line {number} is not 'key: value'")
            key = None
            continue
        key, value = match.group(1), (match.group(2) or "").strip()
        if value in (">", "|", ">-", "|-", ">+", "|+"):
            value = ""
        elif len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        fields[key] = value
    return Frontmatter(fields, "\n".join(lines[end + 1 :]), tuple(errors))


def _entry_from_path(path: str, content: str) -> Entry:
    for kind, (prefix, suffix) in _LAYOUT.items():
        if path.startswith(prefix) and path.endswith(suffix) and len(path) > len(prefix) + len(suffix):
            name = path[len(prefix) : -len(suffix)]
            if "/" in name or _NAME.match(name) is None:
                raise TreeError(
                    f"harness tree path {path!r}: {name!r} is not a valid {kind} name (1-64 lowercase "
                    "letters, digits or '-', starting with a letter or digit)",
                    field=path,
                )
            return Entry(kind, name, content)
    layout = ", ".join(f"{prefix}<name>{suffix}" for prefix, suffix in _LAYOUT.values())
    raise TreeError(
        f"unknown path {path!r} in harness tree: expected {layout} or {MANIFEST_PATH}", field=path
    )


@dataclass(frozen=True)
class HarnessTree:
    """An immutable harness tree: entries keyed by ``(kind, name)`` and the release manifest."""

    entries: Mapping[tuple[str, str], Entry] = field(default_factory=dict)
    manifest: Manifest = field(default_factory=Manifest)

    def __post_init__(self) -> None:
        for key, entry in self.entries.items():
            if not isinstance(entry, Entry) or key != (entry.kind, entry.name):
                raise TreeError(f"harness tree entry {key!r} does not match its key", field=str(key))
        ordered = sorted(self.entries.items(), key=lambda item: (_KIND_ORDER[item[0][0]], item[0][1]))
        object.__setattr__(self, "entries", MappingProxyType(dict(ordered)))

    @classmethod
    def empty(cls) -> HarnessTree:
        return cls()

    @classmethod
    def of(cls, entries: Iterable[Entry], manifest: Manifest | None = None) -> HarnessTree:
        """A tree from a list of entries (a later entry with the same kind and name wins)."""
        return cls({(e.kind, e.name): e for e in entries}, manifest or Manifest())

    @classmethod
    def from_files(cls, files: Mapping[str, bytes]) -> HarnessTree:
        """Read a release tree's files; unknown paths and non-UTF-8 content raise :class:`TreeError`."""
        entries: dict[tuple[str, str], Entry] = {}
        manifest = Manifest()
        for path in sorted(files):
            try:
                text = files[path].decode("utf-8")
            except UnicodeDecodeError as exc:
                raise TreeError(f"harness tree file {path!r} is not UTF-8 text", field=path) from exc
            if path == MANIFEST_PATH:
                try:
                    manifest = Manifest.from_json(json.loads(text))
                except json.JSONDecodeError as exc:
                    raise TreeError(f"{MANIFEST_PATH} is not JSON: {exc.msg}", field=path) from exc
                continue
            entry = _entry_from_path(path, text)
            entries[(entry.kind, entry.name)] = entry
        return cls(entries, manifest)

    def files(self) -> dict[str, bytes]:
        """The tree as a file map, manifest included: what a release commit holds."""
        out = {entry.path: entry.content.encode("utf-8") for entry in self.entries.values()}
        manifest = json.dumps(self.manifest.to_json(), indent=2, sort_keys=True, ensure_ascii=False)
        out[MANIFEST_PATH] = (manifest + "\n").encode("utf-8")
        return dict(sorted(out.items()))

    def get(self, kind: str, name: str) -> Entry | None:
        return self.entries.get((kind, name))

    def of_kind(self, kind: str) -> list[Entry]:
        _check_kind(kind, field="kind")
        return sorted((e for e in self.entries.values() if e.kind == kind), key=lambda e: e.name)

    def apply(self, changes: Sequence[Change]) -> HarnessTree:
        """The tree after ``changes``, in order; the first bad change raises and nothing is applied."""
        entries = dict(self.entries)
        for i, change in enumerate(changes):
            where = f"changes[{i}]"
            key = (change.kind, change.name)
            if is_reserved(change.name):
                raise TreeError(
                    f"{where}: {change.kind} {change.name!r} is reserved for reef: "
                    f"choose a name that does not start with {_RESERVED_PREFIX!r}",
                    field=f"{where}.name",
                )
            if change.op == "create" and key in entries:
                raise TreeError(
                    f"{where}: {change.kind} {change.name!r} already exists: use update", field=f"{where}.op"
                )
            if change.op in ("update", "remove") and key not in entries:
                raise TreeError(
                    f"{where}: cannot {change.op} {change.kind} {change.name!r}: there is no such entry",
                    field=f"{where}.name",
                )
            if change.op == "remove":
                del entries[key]
            else:
                assert change.content is not None  # Change guarantees it for create and update
                entries[key] = Entry(change.kind, change.name, change.content)
        return HarnessTree(entries, self.manifest)

    def with_manifest(self, **fields: Any) -> HarnessTree:
        try:
            manifest = replace(self.manifest, **fields)
        except TypeError as exc:
            raise TreeError(f"unknown manifest field: {exc}", field="manifest") from exc
        return HarnessTree(self.entries, manifest)

    def problems(self) -> list[str]:
        """What makes this tree unfit to release, one line each, naming the path; empty when fine."""
        found: list[str] = []
        for entry in self.entries.values():
            size = len(entry.content.encode("utf-8"))
            if size > MAX_ENTRY_BYTES:
                found.append(f"{entry.path}: {size} bytes, over the limit of {MAX_ENTRY_BYTES}")
            found.extend(f"{entry.path}: {problem}" for problem in _entry_problems(entry))
        if len(self.entries) > MAX_ENTRIES:
            found.append(f"the tree has {len(self.entries)} entries, over the limit of {MAX_ENTRIES}")
        return found

    def describe(self) -> str:
        """The tree as text for a model prompt."""
        if not self.entries:
            return "(empty: no entries yet)"
        parts = []
        for entry in self.entries.values():
            note = " (reserved for reef: read-only)" if entry.reserved else ""
            parts.append(f"### {entry.path}{note}\n{entry.content.rstrip()}")
        return "\n\n".join(parts)


def _entry_problems(entry: Entry) -> list[str]:
    text = entry.content
    if entry.kind == "skill":
        return _skill_problems(entry.name, text)
    if entry.kind == "command":
        front = parse_frontmatter(text)
        problems = list(front.errors) if front else []
        if front:
            problems += [
                f"unknown frontmatter field {key!r} (commands take {', '.join(sorted(_COMMAND_FIELDS))})"
                for key in front.fields
                if key not in _COMMAND_FIELDS
            ]
        if not (front.body if front else text).strip():
            problems.append("the command has no prompt text")
        return problems
    if entry.kind == "rule":
        return [] if text.strip() else ["the rule is empty"]
    if entry.kind == "extension":
        return [] if _EXPORT_DEFAULT.search(text) else ["an extension must have an 'export default' function"]
    return _config_problems(text)


def _skill_problems(name: str, text: str) -> list[str]:
    front = parse_frontmatter(text)
    if front is None:
        return ["a skill must start with '---' frontmatter holding name and description"]
    problems = list(front.errors)
    declared = front.fields.get("name", "")
    if declared != name:
        problems.append(f"frontmatter name {declared!r} must equal the directory name {name!r}")
    if name.endswith("-") or "--" in name:
        problems.append("a skill name must not end with '-' or contain '--'")
    description = front.fields.get("description", "").strip()
    if not description:
        problems.append("frontmatter needs a non-empty description (pi does not load a skill without one)")
    elif len(description) > _MAX_DESCRIPTION:
        problems.append(f"description is {len(description)} characters, over the limit of {_MAX_DESCRIPTION}")
    problems += [f"unknown frontmatter field {key!r}" for key in front.fields if key not in _SKILL_FIELDS]
    if not front.body.strip():
        problems.append("the skill has no instructions after its frontmatter")
    return problems


def _config_problems(text: str) -> list[str]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        return [f"not JSON: {exc.msg} at line {exc.lineno}"]
    if not isinstance(value, dict):
        return ["a config entry must be a JSON object"]
    return [
        f"key {key!r} is owned by reef and cannot be set" for key in REEF_OWNED_CONFIG_KEYS if key in value
    ]


def changed_entries(base: HarnessTree | None, candidate: HarnessTree) -> list[Change]:
    """The changes that turn ``base`` (None: empty) into ``candidate``, ordered by kind then name."""
    before = base.entries if base is not None else {}
    changes: list[Change] = []
    for key in sorted(set(before) | set(candidate.entries), key=lambda k: (_KIND_ORDER[k[0]], k[1])):
        old, new = before.get(key), candidate.entries.get(key)
        if old is None and new is not None:
            changes.append(Change("create", new.kind, new.name, new.content))
        elif old is not None and new is None:
            changes.append(Change("remove", old.kind, old.name))
        elif old is not None and new is not None and old.content != new.content:
            changes.append(Change("update", new.kind, new.name, new.content))
    return changes


_CHANGE_WORDS = {"create": "new", "update": "changed", "remove": "removed"}


def _approval_view(entry: Entry | None) -> object:
    """The parts of a config entry that need approval; unparseable text stands for itself."""
    if entry is None:
        return {}
    try:
        value = json.loads(entry.content)
    except json.JSONDecodeError:
        return entry.content  # fail closed: any edit to unreadable config counts as a change
    if not isinstance(value, dict):
        return entry.content
    return {key: value[key] for key in APPROVAL_CONFIG_KEYS if key in value}


def approval_changes(base: HarnessTree | None, candidate: HarnessTree) -> list[str]:
    """What publishing ``candidate`` over ``base`` changes in executable behaviour, one line per
    file, for a person to approve: any extension added, changed or removed, and any config entry
    whose keys in :data:`APPROVAL_CONFIG_KEYS` changed.  Empty: nothing needs a person.

    ``extensions/format.ts (new)``, ``extensions/old.ts (removed)``,
    ``config/settings.json (shellCommandPrefix)``: the tree's own paths, as ``git diff`` shows them.
    """
    lines: list[str] = []
    for change in changed_entries(base, candidate):
        path = Entry(change.kind, change.name, "").path
        if change.kind == "extension":
            lines.append(f"{path} ({_CHANGE_WORDS[change.op]})")
        elif change.kind == "config":
            old = base.get("config", change.name) if base is not None else None
            before, after = _approval_view(old), _approval_view(candidate.get("config", change.name))
            if before == after:
                continue
            if isinstance(before, dict) and isinstance(after, dict):
                keys = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
                lines.append(f"{path} ({', '.join(keys)})")
            else:
                lines.append(f"{path} (not readable as JSON)")
    return lines


def needs_approval(base: HarnessTree | None, candidate: HarnessTree) -> bool:
    """Whether publishing ``candidate`` over ``base`` changes executable behaviour a person must approve
    (see :func:`approval_changes`)."""
    return bool(approval_changes(base, candidate))


def summarize_changes(changes: Iterable[Change]) -> str:
    """One line: ``create skill failing-test-first; update rule style`` (``no changes`` when empty)."""
    text = "; ".join(f"{c.op} {c.kind} {c.name}" for c in changes)
    return text or "no changes"

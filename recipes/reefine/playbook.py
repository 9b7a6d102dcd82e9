"""Learned rules as addressable bullets, and the delta edits a usage step makes to them.

A usage step never rewrites the harness: it adds, edits or removes one entry at a time (ACE's
finding: whole-context rewrites collapse; its ADD-only curator bloats).  Lessons land as bullets
in a rules file, one per line, each with a stable id the curator and the counters use::

    - [L7] Run the test suite before saying a change is done.

Ids are ``L<n>``, never reused (the next one is one more than the highest in the tree or in
any earlier step's record).  A bullet's helpful/harmful counts are not written into the file
(the rules go to the model with every request): they are summed from the step records
(see ``usage.py``).

What keeps the rules small and safe, all deterministic:

* **near-duplicates merge**: an ``add`` whose words mostly match an existing bullet's (Jaccard
  over lowercase words >= :data:`SIMILAR`) becomes an edit of that bullet, keeping its id;
* **a size budget per rules file**: rules are sent with every request, so an add that would
  take a file past the budget is refused (remove or shorten something first);
* **risky text waits for a person**: an edit that tells the agent to run a command line, reach
  a host or URL, or read credentials is never published by itself (``risks.py``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from reef_core.harness import Change, HarnessTree, TreeError

__all__ = [
    "BULLET_ID",
    "LEARNED_RULE",
    "MAX_BULLET_CHARS",
    "SIMILAR",
    "Bullet",
    "Edit",
    "EditError",
    "apply_edits",
    "bullets",
    "similar",
]

LEARNED_RULE = "learned"  # rules/learned.md: where new bullets go unless an edit names another file
SIMILAR = 0.6
MAX_BULLET_CHARS = 300
#: a bullet's id (a JSON schema ``pattern`` too)
BULLET_ID = r"^L[0-9]{1,6}$"
_BULLET = re.compile(r"^- \[(L\d+)\] (.+)$")
_HEADER = "Lessons reef learned from how this agent is used (one per line; ids are reef's).\n"
_WORD = re.compile(r"[a-z0-9]+")


class EditError(ValueError):
    """An edit that cannot be applied; the message says why (stored with the step)."""


@dataclass(frozen=True)
class Bullet:
    id: str
    rule: str  # the rules entry it sits in
    text: str


@dataclass(frozen=True)
class Edit:
    """One delta edit: a bullet (``target = "rule"``) or a whole skill or command entry."""

    op: str  # add | edit | remove
    target: str  # rule | skill | command
    text: str = ""  # the bullet's text, or the entry's whole content
    id: str | None = None  # the bullet an edit/remove is about
    name: str | None = None  # the skill/command; for an added bullet, its rules file
    lessons: tuple[int, ...] = ()
    why: str = ""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"op": self.op, "target": self.target}
        for key in ("id", "name"):
            if getattr(self, key):
                out[key] = getattr(self, key)
        if self.text:
            out["text"] = self.text
        out["lessons"] = list(self.lessons)
        out["why"] = self.why
        return out


def bullets(tree: HarnessTree) -> dict[str, Bullet]:
    """Every ``- [Ln] …`` line of the tree's rules, by id."""
    found: dict[str, Bullet] = {}
    for entry in tree.of_kind("rule"):
        for line in entry.content.splitlines():
            match = _BULLET.match(line.strip())
            if match:
                found[match.group(1)] = Bullet(match.group(1), entry.name, match.group(2).strip())
    return found


def _words(text: str) -> set[str]:
    return set(_WORD.findall(text.lower()))


def similar(a: str, b: str) -> float:
    """Jaccard similarity of the two texts' lowercase words (0 … 1)."""
    wa, wb = _words(a), _words(b)
    return len(wa & wb) / len(wa | wb) if wa and wb else 0.0


def _next_id(tree: HarnessTree, taken: set[str]) -> str:
    numbers = [int(i[1:]) for i in (*bullets(tree), *taken)]
    return f"L{max(numbers, default=0) + 1}"


def _render(rule_text: str, lines: list[tuple[str, str]]) -> str:
    """A rules file's text with its bullet lines replaced by ``lines`` (other text kept)."""
    kept = [line for line in rule_text.splitlines() if not _BULLET.match(line.strip())]
    while kept and not kept[-1].strip():
        kept.pop()
    head = "\n".join(kept).strip() or _HEADER.strip()
    body = "\n".join(f"- [{i}] {text}" for i, text in lines)
    return f"{head}\n\n{body}\n" if body else f"{head}\n"


def apply_edits(
    tree: HarnessTree, edits: list[Edit], *, budget: int, used_ids: set[str] | frozenset[str] = frozenset()
) -> tuple[HarnessTree, list[Edit]]:
    """The tree with ``edits`` applied, and the edits as applied (an add merged into a
    near-duplicate comes back as an edit of it).  ``used_ids``: bullet ids used before (removed
    ones too), which new bullets never take.  Raises :class:`EditError` for the first edit
    that cannot be applied, naming it."""
    rules: dict[str, list[tuple[str, str]]] = {}
    texts: dict[str, str] = {}
    for entry in tree.of_kind("rule"):
        texts[entry.name] = entry.content
        rules[entry.name] = [(b.id, b.text) for b in bullets(tree).values() if b.rule == entry.name]
    applied: list[Edit] = []
    changes: list[Change] = []
    new_ids: set[str] = set(used_ids)
    for n, edit in enumerate(edits):
        where = f"edit {n + 1} ({edit.op} {edit.target})"
        if edit.target == "rule":
            text = " ".join(edit.text.split())
            if edit.op != "remove" and not text:
                raise EditError(f"{where}: a bullet needs text")
            if len(text) > MAX_BULLET_CHARS:
                raise EditError(
                    f"{where}: a bullet holds at most {MAX_BULLET_CHARS} characters ({len(text)})"
                )
            if edit.op == "add":
                twin = max(
                    ((i, r) for r, lines in rules.items() for i, t in lines if similar(t, text) >= SIMILAR),
                    key=lambda pair: similar(dict(rules[pair[1]])[pair[0]], text),
                    default=None,
                )
                if twin is not None:
                    edit = Edit(
                        "edit", "rule", text, id=twin[0], lessons=edit.lessons, why=f"merged: {edit.why}"
                    )
                else:
                    rule = edit.name or LEARNED_RULE
                    taken = new_ids | {i for lines in rules.values() for i, _ in lines}
                    # a rebuilt step keeps its bullet's id where the new tip leaves it free
                    bullet_id = edit.id if edit.id and edit.id not in taken else _next_id(tree, new_ids)
                    new_ids.add(bullet_id)
                    rules.setdefault(rule, []).append((bullet_id, text))
                    texts.setdefault(rule, "")
                    applied.append(
                        Edit("add", "rule", text, id=bullet_id, name=rule, lessons=edit.lessons, why=edit.why)
                    )
                    continue
            owner = next((r for r, lines in rules.items() if any(i == edit.id for i, _ in lines)), None)
            if owner is None:
                raise EditError(f"{where}: no bullet {edit.id!r} in the rules")
            if edit.op == "edit":
                rules[owner] = [(i, text if i == edit.id else t) for i, t in rules[owner]]
            elif edit.op == "remove":
                rules[owner] = [(i, t) for i, t in rules[owner] if i != edit.id]
            else:
                raise EditError(f"{where}: op must be add, edit or remove")
            applied.append(
                Edit(
                    edit.op,
                    "rule",
                    text if edit.op == "edit" else "",
                    id=edit.id,
                    name=owner,
                    lessons=edit.lessons,
                    why=edit.why,
                )
            )
        elif edit.target in ("skill", "command"):
            op = {"add": "create", "edit": "update", "remove": "remove"}.get(edit.op)
            if op is None or not edit.name:
                raise EditError(f"{where}: a {edit.target} edit needs op add/edit/remove and a name")
            try:
                changes.append(Change(op, edit.target, edit.name, None if op == "remove" else edit.text))
            except TreeError as exc:
                raise EditError(f"{where}: {exc.message}") from exc
            applied.append(edit)
        else:
            raise EditError(f"{where}: target must be rule, skill or command")
    for rule, lines in rules.items():
        before = tree.get("rule", rule)
        content = _render(texts.get(rule, ""), lines)
        if len(content) > budget and (before is None or len(content) > len(before.content)):
            raise EditError(
                f"rules/{rule}.md would hold {len(content)} characters, over the budget of {budget} "
                "(rules go with every request): remove or shorten a bullet first"
            )
        if before is None:
            changes.append(Change("create", "rule", rule, content))
        elif not lines and content.strip() == _HEADER.strip():
            changes.append(Change("remove", "rule", rule))  # its last bullet went: nothing left to say
        elif before.content != content:
            changes.append(Change("update", "rule", rule, content))
    try:
        return tree.apply(changes), applied
    except TreeError as exc:
        raise EditError(exc.message) from exc

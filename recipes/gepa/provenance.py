"""What in a GEPA candidate a person must see before it is published: reefine's rules, applied
to whole-component rewrites.

A mutation rewrites a whole component, so what it changed is read line by line against the
release it would follow (``changed_entries``):

* **an added line** must be carried by the person's own words (``evidence.supported``: every
  content word of it in phrases of theirs that share content with it).  Their words are the
  sentences of their feedback and of their messages in the step's training sessions, each kept
  only where ``reflect.locate`` finds it the person's (a sentence that is also in tool output or
  harness text is not theirs).  A line with no content word (a blank, a rule of dashes) says
  nothing and passes; a list marker and a ``[Ln]`` bullet id are not words of the line;
* **the added text** must name no risky action (``risks.py``: a command line, a host, a URL,
  credentials; read across lines, so a code block counts whole);
* **a removed line of a rule** (a rewritten one is removed and added) changes what a person may
  have taught: it waits too.

Any of these makes the candidate pending (``Candidate.needs_approval``): it is kept for a person
to promote or reject, never published as a normal release.  The held lines, with the reasons and
the person's phrases nearest to them, go to the step record (``usage.held_for_a_person``, shown
on the step page).  No model decides any of it.
"""

from __future__ import annotations

import re
from typing import Any

from recipes.reefine import evidence, reflect
from recipes.reefine.risks import risks
from reef_core.harness import Entry, HarnessTree, changed_entries

__all__ = ["held_lines", "persons_phrases"]

_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
_MARK = re.compile(r"^\s*(?:[-*+]|\d+[.)])?\s*(?:\[L\d+\]\s*)?")


def persons_phrases(materials: list[reflect.Material]) -> list[tuple[str, str]]:
    """The person's sentences in these sessions, each with where it is (``user``, ``feedback``)."""
    found: list[tuple[str, str]] = []
    for stuff in materials:
        texts = [*stuff.feedback, *(m.text for m in stuff.messages if m.source == "user")]
        for text in texts:
            for sentence in _SENTENCE.split(text):
                sentence = sentence.strip()
                if not evidence.is_phrase(sentence) or any(sentence == s for _, s in found):
                    continue
                where = reflect.locate(sentence, stuff)
                if where in evidence.TRUSTED:
                    found.append((where, sentence))
    return found


def held_lines(base: HarnessTree, tree: HarnessTree, phrases: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """The lines of ``tree`` that changed from ``base`` and must wait for a person, with why."""
    said = [s for _, s in phrases]
    out: list[dict[str, Any]] = []
    for change in changed_entries(base, tree):
        path = Entry(change.kind, change.name, "").path
        before = base.get(change.kind, change.name)
        old = [line for line in (before.content if before else "").splitlines() if line.strip()]
        new = [line for line in (change.content or "").splitlines() if line.strip()]
        added = [line for line in new if line not in old]
        for found in risks("\n".join(added)):
            out.append({"component": path, "text": "\n".join(added)[:500], "why_held": [f"its text {found}"]})
        for line in added:
            text = _MARK.sub("", line).strip()
            if not evidence.content(text) or evidence.supported(text, said):
                continue
            missing = evidence.unsupported(text, said)
            near = [
                {"source": where, "quote": s}
                for where, s in phrases
                if evidence.content(s) & evidence.content(text)
            ]
            out.append(
                {
                    "component": path,
                    "text": text,
                    "why_held": ["the person's words do not carry it: " + ", ".join(missing[:8])],
                    "evidence": near[:3],
                }
            )
        if change.kind == "rule":
            for line in old:
                if line not in new:
                    reason = "it removes or rewrites this line of a rule, which a person may have taught"
                    out.append(
                        {"component": path, "text": line.strip(), "op": "remove", "why_held": [reason]}
                    )
    return out

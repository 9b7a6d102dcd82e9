"""The ``reefine`` recipe: a harness (pi's agent files) that keeps getting better.

| module | owns |
|---|---|
| ``recipe`` | the recipe contract (``ReefineRecipe``), its settings, batching, the ask step |
| ``checks`` | the release checks: well_formed, screens, health (each harness), reviewer, replay |
| ``usage_step`` | the usage step: following sessions, judging turns, the usage batch, proposing, rebuilding |
| ``usage`` | the session index, held-out sessions, the ledger of what earlier steps used, the step record |
| ``reflect`` | the reflector: a session's lessons, each quote looked up and labelled by where it is |
| ``curate`` | the curator: lessons become delta edits; harmful removals; what waits for a person |
| ``evidence`` | where a quote really is in a session, whether the person's words support an instruction |
| ``playbook`` | learned rules as addressable bullets, and delta edits of the tree |
| ``risks`` | what in a learned edit's text a person must see before it is published |
| ``judge`` | the next-turn judge: the next message is the verdict on the answer before it; verdicts stored |
| ``replay`` | the replay gate: the candidate against the current tree on held-out sessions |
| ``spending`` | how much error each replay gate may spend (online family-wise error control) |
| ``proposer`` | the text proposer: an ask becomes a design and entry changes |
| ``agent`` | the agent proposer (optional): the served model, as a pi agent, edits the tree itself |
| ``try_harness`` | the agent proposer's tool that checks the tree it is editing |
| ``structured`` | one checked JSON answer from the served model, unusable answers sent back |

Owns: turning asks and scored usage into harness candidates, and the release checks for them.
Does not own: the tree and its rendering (``reef_core.harness``, ``adapters/<name>/render.py``),
running a harness for the health check (``adapters/<name>/health.py``, found through
``reef_core.harness``), the worker that runs the steps (``reef_core.learning``), publishing
(``reef_core.release``).
May import: ``reef_core.errors``, ``reef_core.harness``, ``reef_core.learning``,
``reef_core.procs``, ``reef_core.release``, ``reef_core.sandbox``, ``reef_core.sessions``,
``reef_core.store``.
"""

from __future__ import annotations

__all__: list[str] = []

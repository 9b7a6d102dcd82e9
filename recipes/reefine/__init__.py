"""The ``reefine`` recipe: a harness (pi's agent files) that keeps getting better.

Owns: the release checks for harness candidates.  ``health.py`` starts the real pi 0.73.1 with a
candidate's rendered agent files against a model endpoint and checks that it loads them and
answers.
"""

from __future__ import annotations

__all__: list[str] = []

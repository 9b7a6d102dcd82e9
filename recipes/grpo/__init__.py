"""The ``grpo`` recipe: the embedded model learns from scored answers.

| module | owns |
|---|---|
| ``recipe`` | ``GrpoRecipe``: settings, batching, the training step, checks, releases, serving |
| ``samples`` | scored answers read from the scenario's records and reports, and which are recent enough |
| ``rewards`` | whose scores train (``recipe.config.reward``): people's reports, the judge's verdicts |
| ``objective`` | the policy-gradient step and the off-policy estimate of a policy's reward, on any scorer |
| ``policy`` | what every ``transformers`` policy shares: scoring, greedy answers, views of a state, digests |
| ``lora`` | a LoRA adapter as the policy, its settings and ``adapter_config.json`` |
| ``full`` | every weight of a ``transformers`` model as the policy |
| ``slime_backend`` | the optional GPU trainer: slime run as a batch job over a replay file |

Owns: turning reports on the served model's records into training groups (people's reports,
the next-turn judge's verdicts, or both: ``rewards``), one policy-gradient
step per candidate (group-normalised advantages, PPO-clip against the recorded log-probs, a
KL term to the pretrained model), the release checks for weights, publishing checkpoints
through git-lfs and swapping them into serving.  ``slime_backend.py`` is the optional GPU
trainer; nothing on the CPU path imports it.
Does not own: serving the model (``reef_core.upstream``), the models themselves
(``reef_core.models``), the worker that runs the steps (``reef_core.learning``).
May import: ``torch``, ``safetensors``, ``peft``, ``reef_core.errors``, ``reef_core.learning``,
``reef_core.memory``, ``reef_core.models``, ``reef_core.sessions``, ``reef_core.store``,
``reef_core.upstream``, ``recipes.reefine.judge``, ``recipes.reefine.usage`` (the next-turn judge and
its session index, for recipe.config.reward judge).
"""

"""The ``sao`` recipe: Single-rollout Asynchronous Optimization (arXiv 2607.07508).

| module | owns |
|---|---|
| ``recipe`` | ``SAORecipe``, ``SaoConfig``: one scored rollout a step, staleness, the release's critic |
| ``objective`` | the critic's advantages (GAE, length-adaptive lambda) and the DIS-masked policy step |
| ``critic`` | the value head on the frozen base model's hidden states |

Owns: turning one report with a finite score on one rollout of the served ``transformers`` model
into one step, the SAO loss and its critic.  Built on the grpo recipe (``recipes.grpo``): its
LoRA policy, release tree, serving, rollback and checks are reused, not copied.
Does not own: serving the model (``reef_core.upstream``), the worker that runs the steps
(``reef_core.learning``), the LoRA policy and the checks (``recipes.grpo``).
May import: ``torch``, ``safetensors``, ``recipes.grpo``, ``reef_core.errors``, ``reef_core.learning``,
``reef_core.memory``, ``reef_core.store``.
"""

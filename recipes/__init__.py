"""Built-in learning recipes, one package each, loaded by name or ``package.module:Class``.

| package | owns |
|---|---|
| ``grpo``    | weights: the embedded or a Hugging Face model learns from scored answers |
| ``reefine`` | the harness: skills, rules, commands and extensions learnt from asks and from usage |
| ``gepa``    | the harness's text (rules, skills) evolved by GEPA: reflective mutation, a Pareto archive |
| ``sao``     | weights: one scored rollout is one step (SAO: a critic's advantages, the DIS mask) |

The recipe contract lives in ``reef_core.learning``; nothing in ``reef_core`` imports this
package.  A recipe reaches a harness through ``reef_core.harness`` (renderers, health checks),
never an adapter directly.
May import: ``reef_core``.
"""

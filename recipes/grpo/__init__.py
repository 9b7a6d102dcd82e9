"""The ``grpo`` recipe: the embedded model learns from scored answers.

Owns: turning reports on ``builtin:tiny`` records into training groups, one policy-gradient
step per candidate (group-normalised advantages, PPO-clip against the recorded log-probs, a
KL term to the pretrained model), the release checks for weights, publishing checkpoints
through git-lfs and swapping them into serving.  ``slime_backend.py`` is the optional GPU
trainer; nothing on the CPU path imports it.
"""

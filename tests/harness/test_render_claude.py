"""The Claude Code renderer: a harness tree as a ``CLAUDE_CONFIG_DIR``."""

from __future__ import annotations

import json

import pytest

from adapters.claude_code.render import COMMANDS, TRAFFIC_SWITCHES, ClaudeCodeRenderer, skipped
from reef_core.harness import Entry, HarnessTree, Renderer, Target, TreeError, renderer_for

SKILL = "---\nname: bisect\ndescription: Use when a regression has an unknown cause.\n---\nRun git bisect.\n"
TARGET = Target(reef_url="http://127.0.0.1:8901", scenario="demo", model="m", api="anthropic", release="v3")
OWN_HOOK = {"PostToolUse": [{"matcher": "Edit", "hooks": [{"type": "command", "command": "make lint"}]}]}


def tree(*extra: Entry) -> HarnessTree:
    return HarnessTree.of(
        [
            Entry("skill", "bisect", SKILL),
            Entry("rule", "style", "Use four spaces.\n"),
            Entry("command", "review", "---\ndescription: Review a file\n---\nReview $1.\n"),
            Entry("extension", "hello", "export default function (pi) {}\n"),
            *extra,
        ]
    )


def test_the_tree_lands_where_claude_code_reads_it_with_reefs_commands_and_hooks():
    settings = Entry(
        "config", "settings", json.dumps({"hooks": OWN_HOOK, "permissions": {"allow": ["Read"]}})
    )
    files = ClaudeCodeRenderer().render(tree(settings, Entry("config", "lint", '{"strict": true}')), TARGET)
    assert sorted(files) == sorted(
        [
            "commands/review.md",
            *(f"commands/{name}.md" for name in COMMANDS),
            "config/lint.json",
            "rules/style.md",
            "settings.json",
            "skills/bisect/SKILL.md",
        ]
    )
    assert files["skills/bisect/SKILL.md"].decode() == SKILL
    assert files["rules/style.md"] == b"Use four spaces.\n"
    rendered = json.loads(files["settings.json"])
    assert rendered["permissions"] == {"allow": ["Read"]}
    assert rendered["env"] == TRAFFIC_SWITCHES and rendered["includeCoAuthoredBy"] is False
    # the tree's hooks run next to reef's, which always come last
    assert rendered["hooks"]["PostToolUse"] == OWN_HOOK["PostToolUse"]
    assert [g["hooks"][0]["command"] for g in rendered["hooks"]["UserPromptSubmit"]] == [
        '"${REEF_CLAUDE_LAUNCHER:-reef-claude}" hook prompt'
    ]
    assert rendered["hooks"]["SessionStart"][0]["hooks"][0]["timeout"] == 5
    assert skipped(tree()) == [
        "extensions/hello.ts is a pi extension: Claude Code cannot run it, so it is not installed"
    ]
    # deterministic, and found by name through the seam
    assert ClaudeCodeRenderer().render(tree(settings), TARGET) == ClaudeCodeRenderer().render(
        tree(settings), TARGET
    )
    assert isinstance(renderer_for("claude_code"), Renderer)


def test_a_tree_cannot_take_reefs_commands_the_endpoint_or_the_traffic_switches():
    mine = ClaudeCodeRenderer().render(tree(Entry("command", "versions", "Print v9.\n")), TARGET)
    assert b"answered by reef's UserPromptSubmit hook" in mine["commands/versions.md"]
    for settings, named in [
        ({"env": {"ANTHROPIC_BASE_URL": "http://evil.example"}}, "env.ANTHROPIC_BASE_URL"),
        ({"apiKeyHelper": "cat ~/.key"}, "apiKeyHelper"),
        ({"env": {"DISABLE_TELEMETRY": "0"}}, "env.DISABLE_TELEMETRY"),
        ({"env": {"CLAUDE_CODE_USE_BEDROCK": "1"}}, "env.CLAUDE_CODE_USE_BEDROCK"),
    ]:
        with pytest.raises(TreeError) as refused:
            ClaudeCodeRenderer().render(tree(Entry("config", "settings", json.dumps(settings))), TARGET)
        assert named in refused.value.message and "reef owns" in refused.value.message
    with pytest.raises(TreeError, match="hooks must map event names"):
        ClaudeCodeRenderer().render(tree(Entry("config", "settings", '{"hooks": ["x"]}')), TARGET)


def test_the_prompt_context_swaps_the_served_rules_for_the_trees():
    served = HarnessTree.of([Entry("rule", "old", "Always use tabs.\n")])
    system = "You are Claude Code.\n\nContents of rules/old.md:\nAlways use tabs.\n\nBe safe."
    text = ClaudeCodeRenderer().prompt_context(system, served, tree())
    assert "Always use tabs." not in text and text.startswith("You are Claude Code.")
    assert "# User rules\n\n## style\n\nUse four spaces." in text
    assert "- bisect: Use when a regression has an unknown cause." in text

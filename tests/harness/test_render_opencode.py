"""The opencode renderer: what a tree becomes in an OPENCODE_CONFIG_DIR, reef's keys always
last, the keys that would route around reef refused by name, and opencode's own substitutions
refused in a tree's config (the end-to-end tests with the real opencode are in
tests/adapters/test_reef_opencode.py)."""

from __future__ import annotations

import json

import pytest

from adapters.opencode.render import COMMANDS, NPM_STUBS, OWNED_KEYS, PLUGIN_FILE, OpencodeRenderer
from reef_core.harness import Entry, HarnessTree, Target, TreeError
from reef_core.harness.tree import approval_changes

TARGET = Target(
    "http://127.0.0.1:8900", "proj", "m", headers={"x-reef-tag-run": "REEF_RUN_TAG", "x-lit": "v1"}
)


def render(*entries: Entry) -> dict[str, bytes]:
    return OpencodeRenderer().render(HarnessTree.of(list(entries)), TARGET)


def config_of(files: dict[str, bytes]) -> dict:
    return json.loads(files["opencode.json"])


def opencode_config(value: dict) -> Entry:
    return Entry("config", "opencode", json.dumps(value) + "\n")


def test_the_provider_points_at_reef_reads_its_headers_from_the_environment_and_is_the_only_one():
    config = config_of(render())
    assert config["model"] == config["small_model"] == "reef/m"
    assert config["enabled_providers"] == ["reef"] and set(config["provider"]) == {"reef"}
    provider = config["provider"]["reef"]
    assert provider["npm"] == "@ai-sdk/openai-compatible" and set(provider["models"]) == {"m"}
    assert provider["options"]["baseURL"] == "http://127.0.0.1:8900/v1"
    assert provider["options"]["apiKey"] == "{env:REEF_API_KEY}"
    assert provider["options"]["headers"] == {
        "x-reef-scenario": "{env:REEF_SCENARIO}",
        "x-reef-tag-run": "{env:REEF_RUN_TAG}",
        "x-lit": "v1",  # a literal stays one
        "x-reef-harness": "opencode",
    }
    assert config["autoupdate"] is False and config["share"] == "disabled"


def test_entries_land_where_opencode_reads_them_with_reef_s_own_beside_them():
    skill = "---\nname: bisect\ndescription: Use for regressions.\n---\nRun git bisect.\n"
    files = render(
        Entry("skill", "bisect", skill),
        Entry("rule", "style", "Be brief.\n"),
        Entry("command", "review", "---\ndescription: Review.\n---\nReview $ARGUMENTS.\n"),
        Entry("config", "lint", '{"strict": true}\n'),
    )
    assert files["skills/bisect/SKILL.md"] == skill.encode()
    assert b"## style\n\nBe brief." in files["AGENTS.md"]
    assert files["commands/review.md"].endswith(b"Review $ARGUMENTS.\n")
    assert files["config/lint.json"] == b'{"strict": true}\n'
    for name in COMMANDS:
        assert b"reef's opencode plugin" in files[f"commands/{name}.md"]
    plugin = files[PLUGIN_FILE].decode()
    assert "command.execute.before" in plugin and '"good"' in plugin and "import " not in plugin
    for name, content in NPM_STUBS.items():
        assert files[name] == content  # opencode then runs no npm install in the config dir


def test_a_tree_s_command_named_like_reef_s_is_replaced_and_said():
    tree = HarnessTree.of(
        [
            Entry("command", "good", "---\ndescription: Mine.\n---\nPraise the code.\n"),
            Entry("extension", "x", "export default function (pi) {}\n"),
        ]
    )
    files = OpencodeRenderer().render(tree, TARGET)
    assert b"reef's opencode plugin" in files["commands/good.md"]
    assert not any(name.startswith("extensions/") for name in files)
    assert OpencodeRenderer().skipped(tree) == [
        "extensions/x.ts is a pi extension: opencode cannot run it, so it is not installed",
        "commands/good.md is replaced by reef's own /good",
    ]


def test_a_tree_s_own_config_is_kept_and_reef_s_keys_still_win():
    mine = {"theme": "tokyonight", "agent": {"review": {"prompt": "Review carefully.", "mode": "subagent"}}}
    config = config_of(render(opencode_config(mine)))
    assert config["theme"] == "tokyonight" and config["agent"] == mine["agent"]
    assert config["provider"] == config_of(render())["provider"]


@pytest.mark.parametrize("key", OWNED_KEYS)
def test_each_key_reef_owns_is_refused_naming_it(key):
    with pytest.raises(TreeError, match=rf"sets {key}\b.*reef owns"):
        render(opencode_config({key: "x"}))


@pytest.mark.parametrize("table", ["agent", "command"])
def test_a_model_for_one_agent_or_command_is_refused_naming_it(table):
    with pytest.raises(TreeError, match=rf"sets {table}\.x\.model\b.*reef owns"):
        render(opencode_config({table: {"x": {"model": "openai/gpt-5", "prompt": "p"}}}))
    with pytest.raises(TreeError, match=f"{table} must map names to objects"):
        render(opencode_config({table: {"x": "not an object"}}))


@pytest.mark.parametrize("text", ["{env:HOME}", "{ENV:AWS_KEY}", "{file:~/.ssh/id_rsa}", "{file:./x}"])
def test_opencode_s_substitutions_are_refused_anywhere_in_a_tree_s_config(text):
    with pytest.raises(TreeError, match=r"\{env:\.\.\.\} or \{file:\.\.\.\}"):
        render(opencode_config({"agent": {"build": {"prompt": f"say {text}"}}}))


@pytest.mark.parametrize("key", ["plugin", "mcp", "lsp", "formatter", "permission", "tools", "experimental"])
def test_keys_that_run_programs_wait_for_a_person(key):
    base = HarnessTree.of([opencode_config({"theme": "a"})])
    candidate = HarnessTree.of([opencode_config({"theme": "a", key: {"x": "y"}})])
    assert approval_changes(base, candidate), key
    assert not approval_changes(base, HarnessTree.of([opencode_config({"theme": "b"})]))


def test_the_prompt_context_swaps_the_served_rules_for_the_candidate_s():
    served = HarnessTree.of([Entry("rule", "old", "Old rule.\n")])
    candidate = HarnessTree.of([Entry("rule", "new", "New rule.\n")])
    agents = render(Entry("rule", "old", "Old rule.\n"))["AGENTS.md"].decode()
    system = f"You are opencode.\nInstructions from: /c/AGENTS.md\n{agents}\n<env>x</env>"
    context = OpencodeRenderer().prompt_context(system, served, candidate)
    assert "Old rule." not in context and "New rule." in context and "You are opencode." in context

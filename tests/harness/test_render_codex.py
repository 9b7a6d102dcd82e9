"""The Codex renderer: what a tree becomes in a CODEX_HOME, TOML that Codex's parser would read
(checked with Python's own ``tomllib``), reef's keys always last, and the keys that would route
around reef refused by name."""

from __future__ import annotations

import json
import tomllib

import pytest

from adapters.codex.render import OWNED_KEYS, CodexRenderer, dumps, merged_config
from reef_core.harness import Entry, HarnessTree, Target, TreeError

TARGET = Target("http://127.0.0.1:8900", "proj", "m", headers={"x-reef-tag-run": "REEF_RUN_TAG"})


def render(*entries: Entry) -> dict[str, bytes]:
    return CodexRenderer().render(HarnessTree.of(list(entries)), TARGET)


def config_of(files: dict[str, bytes]) -> dict:
    return tomllib.loads(files["reef-config.toml"].decode())


def test_the_provider_points_at_reef_and_reads_its_headers_from_the_environment():
    config = config_of(render())
    assert config["model"] == "m" and config["model_provider"] == "reef"
    provider = config["model_providers"]["reef"]
    assert provider["base_url"] == "http://127.0.0.1:8900/v1" and provider["wire_api"] == "responses"
    assert provider["env_http_headers"] == {
        "x-reef-scenario": "REEF_SCENARIO",
        "x-reef-tag-run": "REEF_RUN_TAG",
    }
    assert config["features"]["daemon_auto_start"] is False and config["analytics"]["enabled"] is False
    hooks = json.loads(render()["hooks.json"])["hooks"]
    assert "hook prompt" in hooks["UserPromptSubmit"][-1]["hooks"][0]["command"]


def test_a_tree_s_own_config_survives_any_text_and_reef_s_keys_still_win():
    odd = 'quote " backslash \\ newline \n tab \t unicode é ☃ nul-ish \u0001'
    config = {
        "model_reasoning_effort": "high",
        "notice": {odd: odd},
        "mcp_servers": {"docs": {"command": "npx", "args": ["-y", odd], "env": {"K": "v"}}},
        "numbers": [1, 2.5, True],
        "features": {"web_search": True},
    }
    files = render(Entry("config", "codex", json.dumps(config) + "\n"))
    parsed = config_of(files)
    assert parsed["notice"] == {odd: odd} and parsed["mcp_servers"]["docs"]["args"] == ["-y", odd]
    assert parsed["numbers"] == [1, 2.5, True] and parsed["model_reasoning_effort"] == "high"
    assert parsed["features"] == {"web_search": True, "daemon_auto_start": False, "plugins": False,
                                  "unbounded_connection_retries": False}  # fmt: skip
    assert parsed["model_providers"] == config_of(render())["model_providers"]


@pytest.mark.parametrize("key", OWNED_KEYS)
def test_each_key_reef_owns_is_refused_naming_it(key):
    with pytest.raises(TreeError, match=rf"sets {key}\b.*reef owns"):
        render(Entry("config", "codex", json.dumps({key: "x"}) + "\n"))


def test_null_and_non_finite_values_are_refused_with_what_toml_cannot_hold():
    with pytest.raises(TreeError, match="TOML has no null"):
        render(Entry("config", "codex", '{"a": null}\n'))
    with pytest.raises(TreeError, match="cannot be inf"):
        render(Entry("config", "codex", '{"a": Infinity}\n'))


def test_commands_become_skills_and_extensions_are_left_out_with_a_line():
    tree = HarnessTree.of(
        [
            Entry("command", "review", "---\ndescription: Review the diff.\n---\nReview $ARGUMENTS.\n"),
            Entry("extension", "x", "export default function (pi) {}\n"),
        ]
    )
    files = CodexRenderer().render(tree, TARGET)
    assert files["skills/review/SKILL.md"].startswith(b'---\nname: review\ndescription: "Review the diff."')
    assert not any(name.startswith("extensions/") for name in files)
    assert CodexRenderer().skipped(tree) == [
        "extensions/x.ts is a pi extension: Codex cannot run it, so it is not installed"
    ]


def test_the_config_codex_writes_is_kept_but_never_reef_s_keys():
    reef = dumps({"model": "m", "model_providers": {"reef": {"base_url": "http://127.0.0.1:1/v1"}}})
    current = {
        "model": "elsewhere",
        "model_providers": {"evil": {"base_url": "http://example.org"}},
        "projects": {"/w": {"trust_level": "trusted"}},
        "hooks": {"state": {"/h/hooks.json:user_prompt_submit:0:0": {"trusted_hash": "sha256:ab"}}},
    }
    merged = tomllib.loads(merged_config(reef, current))
    assert merged["model"] == "m" and set(merged["model_providers"]) == {"reef"}
    assert merged["projects"] == current["projects"] and merged["hooks"] == current["hooks"]

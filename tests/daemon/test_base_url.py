"""Clients that can set only a base URL and a key: the scenario in the URL (``/s/<scenario>/``),
``reef.default-scenario`` for those that send nothing, and headers reef sends its upstream
(``inference.upstream-headers``), which are never kept.  Real SDKs, real curl, a real daemon."""

from __future__ import annotations

import json
import logging
import subprocess

import anthropic
import httpx
import openai
import pytest

from reef_core.config import load_settings
from reef_core.errors import ConfigError

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def scenario_records(reef, scenario: str) -> list[dict]:
    response = httpx.get(f"{reef.url}/reef/scenarios/{scenario}/records", params={"limit": 100})
    assert response.status_code == 200, response.text
    return response.json()["records"]


def test_the_sdks_and_curl_with_only_a_base_url_record_into_the_scenario_it_names(make_reef):
    reef = make_reef()
    chat = openai.OpenAI(base_url=f"{reef.url}/s/editor/v1", api_key="k", max_retries=0)
    answer = chat.chat.completions.with_raw_response.create(
        model="m", messages=[{"role": "user", "content": "hi"}]
    )
    receipt = answer.headers["x-reef-agent-record-id"]
    assert [r["id"] for r in scenario_records(reef, "editor")] == [receipt]

    messages = anthropic.Anthropic(base_url=f"{reef.url}/s/claudeish", api_key="k", max_retries=0)
    answered = messages.messages.with_raw_response.create(
        model="m", max_tokens=16, messages=[{"role": "user", "content": "hi"}]
    )
    assert [r["id"] for r in scenario_records(reef, "claudeish")] == [
        answered.headers["x-reef-agent-record-id"]
    ]
    assert scenario_records(reef, "claudeish")[0]["route"] == "messages"

    curl = subprocess.run(
        ["curl", "-s", "-D", "-", "-H", "content-type: application/json", "--data", json.dumps(CHAT),
         f"{reef.url}/s/curled/v1/chat/completions"],
        capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    assert curl.stdout.startswith("HTTP/1.1 200")
    assert len(scenario_records(reef, "curled")) == 1
    listed = httpx.get(f"{reef.url}/s/editor/v1/models")
    assert listed.status_code == 200


def test_no_scenario_or_a_bad_one_is_a_400_that_says_how_and_records_nothing(make_reef, upstream):
    reef = make_reef()
    missing = httpx.post(f"{reef.url}/v1/chat/completions", json=CHAT)
    assert missing.status_code == 400
    assert "/s/<scenario>" in missing.json()["error"]["message"]
    bad = httpx.post(f"{reef.url}/s/no%20pe/v1/chat/completions", json=CHAT)
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "scenario"
    anthropic_shaped = httpx.post(f"{reef.url}/s/-bad/v1/messages", json={"model": "m", "max_tokens": 4})
    assert anthropic_shaped.status_code == 400 and anthropic_shaped.json()["type"] == "error"
    assert not upstream.requests
    assert httpx.get(f"{reef.url}/reef/scenarios").json()["scenarios"] == []


def test_the_header_beats_the_path_and_the_path_beats_the_default(make_reef):
    reef = make_reef("--reef.default-scenario", "fallback")
    assert httpx.post(f"{reef.url}/v1/chat/completions", json=CHAT).status_code == 200
    assert httpx.post(f"{reef.url}/s/named/v1/chat/completions", json=CHAT).status_code == 200
    headed = httpx.post(
        f"{reef.url}/s/named/v1/chat/completions", json=CHAT, headers={"x-reef-scenario": "headed"}
    )
    assert headed.status_code == 200
    counts = {
        s["name"]: s["counts"]["record"] for s in httpx.get(f"{reef.url}/reef/scenarios").json()["scenarios"]
    }
    assert counts == {"fallback": 1, "named": 1, "headed": 1}


def test_a_bad_default_scenario_stops_the_start():
    with pytest.raises(ConfigError, match=r"reef\.default-scenario"):
        load_settings(env={}, overrides=["--reef.default-scenario", "no/slash"])


def test_upstream_headers_reach_the_upstream_and_are_kept_nowhere(make_reef, upstream, caplog):
    caplog.set_level(logging.DEBUG)
    secret = "sk-upstream-0123456789abcdef"
    reef = make_reef(
        "--inference.upstream-header", "api-key: ${GATEWAY_KEY}",
        "--inference.upstream-header", "HTTP-Referer: https://reef.example",
        env={"GATEWAY_KEY": secret},
    )  # fmt: skip
    assert (
        httpx.post(
            f"{reef.url}/v1/chat/completions", json=CHAT, headers={"x-reef-scenario": "gw"}
        ).status_code
        == 200
    )
    streamed = httpx.post(
        f"{reef.url}/v1/chat/completions", json={**CHAT, "stream": True}, headers={"x-reef-scenario": "gw"}
    )
    assert streamed.status_code == 200
    for captured in upstream.requests:
        sent = {name.lower(): value for name, value in captured.headers.items()}
        assert sent["api-key"] == secret and sent["http-referer"] == "https://reef.example"
    everything = subprocess.run(
        ["git", "--git-dir", reef.repo("gw"), "cat-file", "--batch-all-objects", "--batch"],
        capture_output=True,
        check=True,
    ).stdout  # every object of the repository, uncompressed
    assert b"reef.example" not in everything and secret.encode() not in everything
    assert secret not in caplog.text
    shown = dict((key, value) for key, value, _ in reef.settings.describe())
    assert shown["inference.upstream-headers"] == "********"


@pytest.mark.parametrize(
    ("flags", "env", "named"),
    [
        (["--inference.upstream-header", "no colon here"], {}, "takes 'Name: value'"),
        (["--inference.upstream-header", "bad name: x"], {}, "is not a header name"),
        (
            ["--inference.upstream-header", "api-key: ${UNSET_KEY}"],
            {},
            "names ${UNSET_KEY}, which is not set",
        ),
    ],
)
def test_a_bad_upstream_header_stops_the_start_naming_it(flags, env, named):
    with pytest.raises(ConfigError) as failed:
        load_settings(env=env, overrides=flags)
    assert named in failed.value.message


def test_upstream_headers_from_a_config_file_table(tmp_path):
    config = tmp_path / "reef.toml"
    config.write_text('[inference]\nupstream-headers = { "x-reef-scenario" = "inner", "api-key" = "${K}" }\n')
    settings = load_settings(file=config, env={"K": "v"})
    assert settings.inference.upstream_headers == {"x-reef-scenario": "inner", "api-key": "v"}

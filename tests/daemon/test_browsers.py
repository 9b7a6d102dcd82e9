"""Issue 44: a web page cannot drive the daemon (``reef_core/daemon/browsers.py``, the JSON
content type in ``parsing.json_body``, no GET that writes).

A real headless Chromium opens a page on another origin whose script sends what any page can:
no-cors POSTs with ``text/plain`` bodies and GETs by ``<img>``; then a DNS-rebound name
(Chromium's resolver pointed at 127.0.0.1) is navigated to.  The same requests, and a foreign
``Host``, a foreign ``Origin``, ``Origin: null`` and non-JSON bodies, are refused over plain HTTP
by a daemon with and without a token; the official SDKs, reef's own client, a same-origin page
and configured hosts and origins keep working.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import anthropic
import httpx
import openai
import pytest

from reef_core.client import ReefClient
from reef_core.config import load_settings
from reef_core.daemon import build_app
from reef_core.errors import ConfigError
from reef_core.store import Store
from tests.conftest import git
from tests.daemon.conftest import RunningReef
from tests.fakes.fixed import FixedServer

S = "victim"
TOKEN = "t0ken-of-the-operator"
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
_METRIC = re.compile(r'^reef_http_requests_total\{route="([^"]*)",status="(\d+)"\} ([0-9.e+]+)$', re.M)


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    if os.environ.get("CI"):
        pytest.fail("chromium is missing: scripts/setup.sh --dev installs it (apt-get install chromium)")
    pytest.skip("chromium is missing (scripts/setup.sh --dev installs it): the browser test cannot run")


def _headless(tmp_path: Path, url: str, *flags: str) -> str:
    """Chromium's DOM of ``url`` once its scripts settled (``--virtual-time-budget`` runs the page
    until nothing is pending, network included); as root it needs ``--no-sandbox``."""
    profile = tmp_path / f"chromium-{len(list(tmp_path.glob('chromium-*')))}"
    run = subprocess.run(
        [
            _chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--no-first-run", "--no-default-browser-check", f"--user-data-dir={profile}",
            "--virtual-time-budget=20000", *flags, "--dump-dom", url,
        ],
        capture_output=True, text=True, timeout=90,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    return run.stdout


def _attack_page(reef_url: str, bare: Path) -> str:
    """What any page may do without asking: no-cors POSTs (the browser sends them, with
    ``Content-Type: text/plain``; the page cannot read the answers, but needs none) and GETs by
    ``<img>`` and no-cors fetch; a marker in the DOM once all of them settled."""
    posts = [
        (f"/reef/scenarios/{S}/remotes", {"name": "evil", "url": str(bare)}),
        (f"/s/{S}/v1/chat/completions", {**CHAT, "messages": [{"role": "user", "content": "from the page"}]}),
        ("/reef/report", {"score": 1, "feedback": "from the page", "references": []}),
        ("/reef/scenarios", {"name": "planted"}),
    ]
    return f"""<!doctype html><html><body><script>
const reef = {json.dumps(reef_url)};
const post = (path, body) =>
  fetch(reef + path, {{mode: "no-cors", method: "POST", body: JSON.stringify(body)}})
    .then(() => "sent " + path, (e) => "failed " + path + ": " + e);
const img = (src) => new Promise((done) => {{
  const i = new Image(); i.onload = i.onerror = () => done("img " + src); i.src = reef + src;
}});
(async () => {{
  const results = await Promise.all([
    ...{json.dumps(posts)}.map(([path, body]) => post(path, body)),
    img("/reef/harness/install?adapter=codex&scenario=imgplanted"),
    fetch(reef + "/reef/harness/install?adapter=claude_code&scenario=fetchplanted", {{mode: "no-cors"}})
      .then(() => "sent install GET", (e) => "failed install GET: " + e),
  ]);
  const done = document.createElement("pre");
  done.id = "settled";
  done.textContent = "SETTLED " + JSON.stringify(results);
  document.body.appendChild(done);
}})();
</script></body></html>"""


def _answered(reef: RunningReef, token: str | None = None) -> Counter[tuple[str, int]]:
    """How the daemon answered, by route pattern and status (its ``/metrics``)."""
    headers = {"authorization": f"Bearer {token}"} if token else {}
    text = httpx.get(f"{reef.url}/metrics", headers=headers, timeout=10).text
    counts: Counter[tuple[str, int]] = Counter()
    for route, status, value in _METRIC.findall(text):
        counts[(route, int(status))] += int(float(value))
    return counts


def _data_commits(reef: RunningReef, name: str) -> int:
    counted = git("--git-dir", reef.repo(name), "rev-list", "--count", "refs/heads/data", check=False)
    return int(counted.stdout) if counted.returncode == 0 else 0


def _remotes(reef: RunningReef, name: str) -> list[str]:
    return git("--git-dir", reef.repo(name), "remote").stdout.split()


def _scenario_with_a_record(reef: RunningReef, token: str | None = None) -> None:
    headers = {"x-reef-scenario": S, **({"authorization": f"Bearer {token}"} if token else {})}
    answered = httpx.post(f"{reef.url}/v1/chat/completions", json=CHAT, headers=headers, timeout=30)
    assert answered.status_code == 200, answered.text


@pytest.fixture
def bare(tmp_path: Path) -> Path:
    path = tmp_path / "page-owner.git"
    git("init", "-q", "--bare", str(path))
    return path


@pytest.mark.parametrize("token", [None, TOKEN], ids=["open", "token"])
def test_a_page_on_another_origin_changes_nothing(make_reef, tmp_path, bare, token):
    reef = make_reef(env={"REEF_TOKEN": token} if token else None)
    _scenario_with_a_record(reef, token)
    before = _data_commits(reef, S)
    assert before > 0
    # another origin: localhost on a port of its own
    with FixedServer(
        _attack_page(reef.url, bare).encode(), {"Content-Type": "text/html; charset=utf-8"}
    ) as page:
        dom = _headless(tmp_path, f"http://localhost:{page.port}/attack.html")
    assert "SETTLED" in dom, dom[-2000:]  # the page's script ran, and every request settled

    store = Store(reef.state_dir)
    assert _remotes(reef, S) == []  # no remote added
    assert git("--git-dir", str(bare), "for-each-ref").stdout == ""  # nothing pushed to the page's repository
    assert _data_commits(reef, S) == before  # no record, no report committed
    for planted in ("planted", "imgplanted", "fetchplanted"):
        assert not store.exists(planted), planted
    # each POST was refused by the browser guard (403), not by the token (401) or a parser (400)
    answered = _answered(reef, token)
    for route in ("/reef/scenarios/{name}/remotes", "/s/{scenario}/v1/chat/completions", "/reef/report"):
        assert answered[(route, 403)] == 1, (route, answered)
    # the install GETs carry no Origin: answered (the script) with no token, 401 with one; they wrote nothing
    assert answered[("/reef/harness/install", 401 if token else 200)] == 2, answered


def test_a_rebound_name_reads_nothing(make_reef, tmp_path):
    """DNS rebinding: the page's name now resolves to 127.0.0.1, so its requests are same-origin
    and it could read the answers; they still say ``Host: attacker.example``."""
    reef = make_reef()
    _scenario_with_a_record(reef)
    port = reef.url.rsplit(":", 1)[1]
    dom = _headless(
        tmp_path,
        f"http://attacker.example:{port}/reef/scenarios",
        "--host-resolver-rules=MAP attacker.example 127.0.0.1",
    )
    assert "foreign_request" in dom and "reef.allowed-hosts" in dom, dom[-2000:]
    assert S not in dom  # the scenario list did not reach the page
    seen = _headless(tmp_path, f"http://localhost:{port}/reef/scenarios")
    assert S in seen  # the same navigation under the daemon's own name reads it


# -- plain HTTP: the same refusals, token or not ----------------------------------------------------


@pytest.fixture(params=[None, TOKEN], ids=["open", "token"])
def guarded(request, make_reef) -> Iterator[tuple[RunningReef, dict[str, str]]]:
    token = request.param
    reef = make_reef(env={"REEF_TOKEN": token} if token else None)
    yield reef, ({"authorization": f"Bearer {token}"} if token else {})


def test_a_foreign_host_is_refused_and_reads_nothing(guarded):
    reef, auth = guarded
    for path in ("/reef/scenarios", "/healthz", "/reef/status"):
        refused = httpx.get(f"{reef.url}{path}", headers={**auth, "Host": "attacker.example"})
        assert refused.status_code == 403, (path, refused.text)
        error = refused.json()["error"]
        assert error["code"] == "foreign_request" and "reef.allowed-hosts" in error["message"]
        assert "attacker.example" in error["message"]
    made = httpx.post(
        f"{reef.url}/reef/scenarios",
        json={"name": "planted"},
        headers={**auth, "Host": "attacker.example:80"},
    )
    assert made.status_code == 403 and not Store(reef.state_dir).exists("planted")


@pytest.mark.parametrize("origin", ["http://evil.example", "http://localhost:1", "null", "file://"])
def test_a_foreign_origin_is_refused(guarded, origin):
    reef, auth = guarded
    made = httpx.post(
        f"{reef.url}/reef/scenarios", json={"name": "planted"}, headers={**auth, "Origin": origin}
    )
    assert made.status_code == 403, made.text
    error = made.json()["error"]
    assert error["code"] == "foreign_request" and error["param"] == "origin"
    assert ("reef.allowed-origins" in error["message"]) == (origin.startswith("http")), error["message"]
    chat = httpx.post(
        f"{reef.url}/v1/messages",
        json={"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]},
        headers={**auth, "Origin": origin, "x-reef-scenario": S},
    )
    assert chat.status_code == 403 and chat.json()["error"]["type"] == "permission_error"  # Anthropic's shape
    assert not Store(reef.state_dir).exists("planted") and not Store(reef.state_dir).exists(S)


@pytest.mark.parametrize(
    "content_type",
    [
        "text/plain;charset=UTF-8",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        None,
    ],
)
def test_a_body_that_is_not_json_is_refused(guarded, content_type):
    reef, auth = guarded
    headers = {**auth, **({"content-type": content_type} if content_type else {})}
    made = httpx.post(f"{reef.url}/reef/scenarios", content=json.dumps({"name": "planted"}), headers=headers)
    assert made.status_code == 415, made.text
    error = made.json()["error"]
    assert error["code"] == "unsupported_media_type" and "application/json" in error["message"]
    chat = httpx.post(f"{reef.url}/s/{S}/v1/chat/completions", content=json.dumps(CHAT), headers=headers)
    assert chat.status_code == 415, chat.text
    assert not Store(reef.state_dir).exists("planted") and not Store(reef.state_dir).exists(S)


# -- what keeps working -----------------------------------------------------------------------------


def test_the_sdks_reefs_client_and_a_same_origin_page_work(guarded):
    reef, auth = guarded
    key = auth.get("authorization", "Bearer k").split()[1]
    chat = openai.OpenAI(base_url=f"{reef.url}/s/{S}/v1", api_key=key, max_retries=0)
    assert chat.chat.completions.create(**CHAT).choices[0].message.role == "assistant"
    messages = anthropic.Anthropic(
        base_url=f"{reef.url}/s/{S}", api_key=key, max_retries=0, default_headers=auth
    )
    assert messages.messages.create(model="m", max_tokens=16, messages=CHAT["messages"]).content
    with ReefClient(reef.url, key if auth else None) as client:
        assert client.create_scenario("made")["name"] == "made"
    for body_type in ("application/json; charset=utf-8", "application/vnd.reef+json"):
        typed = httpx.post(
            f"{reef.url}/reef/scenarios",
            content=json.dumps({"name": "typed"}),
            headers={**auth, "content-type": body_type},
        )
        assert typed.status_code in (200, 201, 409), typed.text
    own = httpx.post(
        f"{reef.url}/reef/scenarios", json={"name": "own"}, headers={**auth, "Origin": reef.url}
    )  # reef's own pages: the Origin is the daemon's, as it was reached
    assert own.status_code in (200, 201), own.text
    port = reef.url.rsplit(":", 1)[1]
    beside = httpx.post(
        f"{reef.url}/reef/scenarios",
        json={"name": "beside"},
        headers={**auth, "Origin": f"http://localhost:{port}"},
    )  # the same port under another name is another origin (localhost may be ::1, another server's)
    assert beside.status_code == 403 and not Store(reef.state_dir).exists("beside")
    assert httpx.get(f"{reef.url}/healthz", headers={"Host": "localhost"}).status_code == 200
    assert httpx.get(f"{reef.url}/healthz", headers={"Host": "[::1]:1"}).status_code == 200
    an_address = httpx.get(f"{reef.url}/healthz", headers={"Host": "192.0.2.7:8900"})  # cannot be rebound
    assert an_address.status_code == 200
    assert {"made", "own", "typed", S} <= set(Store(reef.state_dir).names())


def test_configured_hosts_and_origins_are_answered(make_reef):
    reef = make_reef(
        "--reef.allowed-hosts", "reef.lan,box.example:8900", "--reef.allowed-origins", "http://localhost:3000"
    )
    assert httpx.get(f"{reef.url}/reef/scenarios", headers={"Host": "reef.lan:1234"}).status_code == 200
    assert httpx.get(f"{reef.url}/reef/scenarios", headers={"Host": "box.example:8900"}).status_code == 200
    assert httpx.get(f"{reef.url}/reef/scenarios", headers={"Host": "box.example:8901"}).status_code == 403
    made = httpx.post(
        f"{reef.url}/reef/scenarios", json={"name": "dev"}, headers={"Origin": "http://localhost:3000"}
    )
    assert made.status_code in (200, 201), made.text
    other = httpx.post(
        f"{reef.url}/reef/scenarios", json={"name": "dev2"}, headers={"Origin": "http://localhost:3001"}
    )
    assert other.status_code == 403
    anyone = make_reef("--reef.allowed-hosts", "*")
    assert httpx.get(f"{anyone.url}/reef/scenarios", headers={"Host": "proxied.example"}).status_code == 200


def test_a_malformed_allowed_origin_stops_the_start(tmp_path):
    settings = load_settings(
        overrides=["--storage.state-dir", str(tmp_path), "--reef.allowed-origins", "localhost:3000"], env={}
    )
    with pytest.raises(ConfigError, match=r"reef\.allowed-origins: 'localhost:3000' is not an origin"):
        build_app(settings)

"""The daemon: an aiohttp app that proxies inference and records every exchange.

| module | owns |
|---|---|
| ``app``            | wiring only: settings in, an aiohttp application out; the process around it |
| ``context``        | what every handler reaches through the app: settings, scenarios, the upstream |
| ``browsers``       | web pages cannot drive it: a foreign ``Host`` or ``Origin`` is refused, token or not |
| ``auth``           | bearer tokens: every route but ``/healthz`` needs one when tokens are set |
| ``errors``         | the one table from reef's errors to HTTP statuses, as middleware |
| ``parsing``        | JSON bodies (JSON content types only) within their limits, and the scenario header |
| ``headers``        | a request's capture flag, tags and harness, from its headers |
| ``admission``      | near the open-file limit: wait for room, briefly, then 503 |
| ``registry``       | the scenarios open for writing: opened on first use, closed when idle |
| ``inference``      | ``/v1/chat/completions``, ``/v1/messages``, ``/v1/responses`` |
| ``relay``          | a streamed answer relayed event by event, the receipt last |
| ``recording``      | what one proxied exchange becomes on the data branch |
| ``reports``        | feedback on receipts, validated before anything is stored |
| ``asks``           | plain-language asks, screened before anything is stored |
| ``imported``       | records in the original Reef's shape, made into reef's items |
| ``records_routes`` | ``POST /reef/records`` and ``/reef/records/batch`` |
| ``reef_routes``    | health, reports, scenarios, audit reads, sessions, status |
| ``harness_routes`` | asks in, their progress, the served tree's manifest, step pages |
| ``release_routes`` | the release chain and a person's operations on it |
| ``canary_routes`` | the canary: its state, stop and promote, and which tree a new harness session gets |
| ``install_routes`` | ``GET /reef/harness/install``: a POSIX sh script; which harnesses are installed |
| ``learners``       | the deployment's recipe, one learning worker per open scenario |
| ``model_calls``    | the served model, lent to recipes through reef's upstream client |
| ``syncing``        | the daemon and its scenarios' git remotes |
| ``metrics``        | ``GET /metrics``: counters, latency histograms and gauges in Prometheus's format |
| ``logs``           | log lines as text or JSON, each request's id, scenario and receipt in them |
| ``tracing``        | OpenTelemetry traces, opt-in: a span per request and per learning step |

Owns: HTTP routes, auth, the error → status table, streaming relay, recording exchanges.
Does not own: formats (``wire``), the upstream connection (``upstream``), storage (``store``).
Nothing imports it but entry points.
May import: ``aiohttp``, ``prometheus_client``, ``opentelemetry`` (only with ``ops.otlp-endpoint``)
and everything in ``reef_core``.
"""

from reef_core.daemon.app import build_app, serve

__all__ = ["build_app", "serve"]

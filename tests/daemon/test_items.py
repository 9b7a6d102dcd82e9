"""GET /reef/scenarios/{s}/items: records, reports and asks in write order, filtered by kind."""

from __future__ import annotations

import httpx

from tests.daemon.test_routes import post, receipt_of


def test_items_of_one_kind_page_by_page(make_reef):
    reef = make_reef()
    receipts = [receipt_of(reef) for _ in range(3)]
    for receipt in receipts:
        assert post(reef, "/reef/report", json={"score": 1, "references": [receipt]}).status_code == 200

    url = f"{reef.url}/reef/scenarios/s/items"
    everything = httpx.get(url, params={"limit": 100}).json()["items"]
    assert [item["kind"] for item in everything] == ["record"] * 3 + ["report"] * 3  # write order
    first = httpx.get(url, params={"kind": "report", "limit": 2}).json()
    assert [item["kind"] for item in first["items"]] == ["report", "report"]
    rest = httpx.get(url, params={"kind": "report", "after": first["next"]}).json()
    assert len(rest["items"]) == 1 and rest["next"] is None
    assert {r for item in first["items"] + rest["items"] for r in item["references"]} == set(receipts)


def test_a_bad_kind_or_cursor_is_named(make_reef):
    reef = make_reef()
    receipt_of(reef)
    url = f"{reef.url}/reef/scenarios/s/items"
    bad = httpx.get(url, params={"kind": "record,memo"})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "kind"
    assert httpx.get(url, params={"after": "nope"}).json()["error"]["param"] == "after"
    assert httpx.get(f"{reef.url}/reef/scenarios/missing/items").status_code == 404

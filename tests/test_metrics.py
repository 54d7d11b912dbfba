from __future__ import annotations

from conftest import with_config
from prometheus_client.parser import text_string_to_metric_families

from service.app import create_app
from service.metrics import METRICS


def samples(text: str) -> dict[tuple[str, frozenset], float]:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


async def test_metrics__absent_unless_enabled(client):
    response = await client.get("/metrics")
    assert response.status == 404
    assert (await response.json())["error"]["code"] == "not_found"


async def test_metrics__counts_and_times_requests_by_route_name(config, admin, aiohttp_client):
    client = await aiohttp_client(create_app(with_config(config, metrics={"enabled": True})))
    created = await client.post("/api/v1/rfps", json={"rfp": {"title": "x"}}, headers=admin.headers)
    rfp_id = (await created.json())["id"]
    for _ in range(3):
        assert (await client.get(f"/api/v1/rfps/{rfp_id}", headers=admin.headers)).status == 200
    assert (await client.get("/api/v1/rfps/rfp_nope", headers=admin.headers)).status == 404
    assert (await client.get("/no/such/path")).status == 404

    response = await client.get("/metrics")
    assert response.status == 200
    assert response.headers["Content-Type"].startswith("text/plain")
    got = samples(await response.text())
    get_rfp = {("route", "get_rfp"), ("method", "GET")}
    assert got[("rfp_http_requests_total", frozenset(get_rfp | {("status", "200")}))] == 3
    assert got[("rfp_http_requests_total", frozenset(get_rfp | {("status", "404")}))] == 1
    assert got[("rfp_http_requests_total", frozenset(
        {("route", "create_rfp"), ("method", "POST"), ("status", "201")}))] == 1
    assert got[("rfp_http_requests_total", frozenset(
        {("route", "unmatched"), ("method", "GET"), ("status", "404")}))] == 1
    assert got[("rfp_http_request_duration_seconds_count", frozenset(get_rfp))] == 4
    assert got[("rfp_http_request_duration_seconds_sum", frozenset(get_rfp))] > 0
    # Declared for the pipeline and credits even before anything counts them.
    families = {f.name for f in text_string_to_metric_families(await response.text())}
    assert {
        "rfp_pipeline_queue_depth", "rfp_pipeline_step_duration_seconds", "rfp_credits_debited",
        "rfp_credits_refunded", "rfp_rate_limit_rejections",
    } <= families


async def test_metrics__counts_rate_limit_rejections(config, admin, aiohttp_client):
    limited = with_config(
        config,
        metrics={"enabled": True},
        rate_limits={"search_rfps": {"limit": 1, "period_seconds": 3600}},
    )
    client = await aiohttp_client(create_app(limited))
    statuses = [
        (await client.get("/api/v1/rfps/search?query=a", headers=admin.headers)).status
        for _ in range(3)
    ]
    assert statuses == [200, 429, 429]
    got = samples(await (await client.get("/metrics")).text())
    assert got[("rfp_rate_limit_rejections_total", frozenset({("route", "search_rfps")}))] == 2


async def test_metrics__each_app_has_its_own_registry(config):
    first, second = create_app(config), create_app(config)
    first[METRICS].credits_debited.labels("question").inc(5)
    assert second[METRICS].registry.get_sample_value(
        "rfp_credits_debited_total", {"reason": "question"}
    ) is None
    assert first[METRICS].registry.get_sample_value(
        "rfp_credits_debited_total", {"reason": "question"}
    ) == 5

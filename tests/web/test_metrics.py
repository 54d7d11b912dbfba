from __future__ import annotations

import asyncio
import os
import subprocess
import sys

from conftest import with_config
from prometheus_client.parser import text_string_to_metric_families

from service.server import remove_orphaned_metrics_dirs
from service.web.app import create_app
from service.web.keys import METRICS


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
        (await client.get("/api/v1/rfps/search?query=abc", headers=admin.headers)).status
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


async def test_metrics__pipeline_steps_queue_depth_and_credits_after_a_question(
    config, admin, aiohttp_client
):
    from helpers_questions import ask, wait_complete

    client = await aiohttp_client(create_app(with_config(
        config, metrics={"enabled": True}, questions={"poll_seconds": 0.1}
    )))
    response = await ask(client, admin.headers, "Is data encrypted at rest?")
    assert response.status == 202
    await wait_complete(client, (await response.json())["id"], admin.headers)

    got = samples(await (await client.get("/metrics")).text())
    assert got[("rfp_credits_debited_total", frozenset({("reason", "question")}))] == 1
    for step in ("prepare", "fetch_references", "draft_answer", "calculate_confidence", "publish"):
        labels = frozenset({("step", step), ("outcome", "ok")})
        assert got[("rfp_pipeline_step_duration_seconds_count", labels)] == 1, step
    # The question leaves the pipeline's places after its final state is committed (and read
    # by the poll above): the gauge says 0 a moment later (CI through PgBouncer once read it 1).
    async with asyncio.timeout(5):
        while got[("rfp_pipeline_queue_depth", frozenset())] != 0:
            await asyncio.sleep(0.02)
            got = samples(await (await client.get("/metrics")).text())


async def test_metrics__a_refund_is_counted_once(conn, admin):
    import attrs

    from service.answering.pipeline import Work, persist
    from service.domain.questions import create_question
    from service.metrics import Metrics

    async with conn.transaction():
        question_id = await create_question(
            conn, account_id=admin.account_id, user_id=admin.user_id, text="q?"
        )
    await conn.execute(
        "UPDATE questions SET lease_owner = 'me', state = 'references_fetched' WHERE id = $1",
        question_id,
    )
    row = await conn.fetchrow("SELECT *, state::text AS state FROM questions WHERE id = $1", question_id)
    before = Work.from_row(row)
    failed = attrs.evolve(before, state="answered", engine_failure="boom")
    metrics = Metrics()
    assert await persist(conn, "me", before, failed, 30, metrics)
    later = attrs.evolve(failed, state="confidence_calculated")
    assert await persist(conn, "me", failed, later, 30, metrics)  # refund guarded: not again
    assert metrics.registry.get_sample_value(
        "rfp_credits_refunded_total", {"reason": "engine_failure"}
    ) == 1


async def test_metrics__credits_of_answering_an_rfp_are_counted(config, aiohttp_client, make_account):
    """POST /rfps/{id}/answer charges one question per item: counted like an ask, once committed,
    and not at all when refused."""
    client = await aiohttp_client(create_app(with_config(config, metrics={"enabled": True})))
    actor = await make_account(credits=3)
    items = [{"question": f"Do you do thing {n}?"} for n in range(3)]
    created = await client.post(
        "/api/v1/rfps", json={"rfp": {"title": "x", "items": items}}, headers=actor.headers
    )
    rfp_id = (await created.json())["id"]
    more = await client.post(
        "/api/v1/rfps", json={"rfp": {"title": "y", "items": items[:1]}}, headers=actor.headers
    )

    response = await client.post(f"/api/v1/rfps/{rfp_id}/answer", headers=actor.headers)
    assert response.status == 202
    assert (await response.json())["answering"]["credits_charged"] == 3
    # Out of credits now: refused, nothing charged, nothing counted.
    refused = await client.post(
        f"/api/v1/rfps/{(await more.json())['id']}/answer", headers=actor.headers
    )
    assert refused.status == 403

    got = samples(await (await client.get("/metrics")).text())
    assert got[("rfp_credits_debited_total", frozenset({("reason", "rfp_item")}))] == 3


def test_metrics__folders_of_serve_parents_gone_are_removed_at_start(tmp_path):
    """`serve --workers` with metrics keeps its samples in a folder named for its pid; a parent
    killed with SIGKILL never removed its own, so the next start removes those of the dead."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    gone = tmp_path / f"rfp-metrics-{dead.pid}-abc"
    alive = tmp_path / f"rfp-metrics-{os.getpid()}-def"
    other = tmp_path / "rfp-metrics-notapid"
    for folder in (gone, alive, other):
        folder.mkdir()
        (folder / "counter_1.db").write_bytes(b"x")
    assert remove_orphaned_metrics_dirs(str(tmp_path)) == [str(gone)]
    assert not gone.exists() and alive.exists() and other.exists()
    assert remove_orphaned_metrics_dirs(str(tmp_path / "missing")) == []


def test_metrics__a_folder_named_like_no_pid_is_left_and_the_start_goes_on(tmp_path):
    """A folder of this user's whose name reads as a pid no process can have (past a C long:
    OverflowError; a superscript digit: ValueError) stopped `serve --workers` at its start with a
    traceback; one of the older random names, all digits by chance, read as a dead pid and went,
    its living service's samples with it. Only `rfp-metrics-<pid>-…` with a real pid is removed."""
    odd = [tmp_path / name for name in (
        "rfp-metrics-99999999999999999999-a", "rfp-metrics-\u00b2-b", "rfp-metrics-12345678")]
    for folder in odd:
        folder.mkdir()
    assert remove_orphaned_metrics_dirs(str(tmp_path)) == []
    assert all(folder.exists() for folder in odd)

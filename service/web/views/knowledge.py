"""Knowledge base: an account's entries (question?, answer, title, tags, source) and CSV import."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Mapping

from aiohttp import web

from ...domain import knowledge, library
from ...domain.convert import structure, unstructure
from ...domain.errors import ParameterInvalid, UnsupportedMediaType, ValidationFailed
from ...domain.isolation import Unread
from ...domain.knowledge import (
    KnowledgeItem,
    KnowledgeItemInput,
    ParsedCsv,
    create_item,
    fetch_item,
    import_csv,
    parse_upload,
)
from ...domain.models import Page
from ...domain.preconditions import entry_tag
from ...domain.uploads import Limits
from ..actors import actor
from ..auth import Policy, acquire, check, connection, principal, requires
from ..body import one_of_members_uploads, read_json, read_object, receive_upload
from ..etags import if_match, tagged
from ..keys import CONFIG, DELIVERER, INDEXER, LIBRARY_JOBS, PARSERS
from ..responses import json_response

log = logging.getLogger(__name__)


def entries_written(app: web.Application) -> None:
    """Knowledge-base entries were created or changed (committed): wake the embeddings indexer,
    if any, and the webhook deliverer."""
    indexer = app.get(INDEXER)
    if indexer is not None:
        indexer.wake()
    deliverer = app.get(DELIVERER)
    if deliverer is not None:
        deliverer.wake()


_CSV_MEDIA_TYPES = ("text/csv", "application/csv", "text/plain")


async def _read_csv_body(request: web.Request) -> ParsedCsv:
    """The CSV of an import (a text/csv body, or a multipart field `file`), parsed in a worker
    process with the upload limits' time and memory (SECURITY.md "Uploads")."""
    if request.content_type != "multipart/form-data" and request.content_type not in _CSV_MEDIA_TYPES:
        raise UnsupportedMediaType(
            "send the CSV as text/csv, or as multipart/form-data with a field named file"
        )
    with one_of_members_uploads(request):
        upload = await receive_upload(request, request.app[CONFIG].server.max_upload_bytes)
        with upload.file:
            return await request.app[PARSERS].run(parse_upload, Unread(upload.file),
                                                  Limits.of(request.app[CONFIG].uploads),
                                                  owner=principal(request).account_id)


def _item_response(item: KnowledgeItem, status: int = 200) -> web.Response:
    """An entry with its ETag: what a PATCH's If-Match names to change this version alone."""
    return tagged(json_response(unstructure(item), status=status), entry_tag(item.version))


@requires("write", roles=("admin", "member"))
async def post_item(request: web.Request) -> web.Response:
    fields, _ = await read_object(request, "knowledge_base_item")
    data = structure(fields, KnowledgeItemInput, root="knowledge_base_item")
    async with connection(request) as conn:
        item = await create_item(conn, principal(request).account_id, data, actor=actor(request))
    entries_written(request.app)
    response = _item_response(item, status=201)
    response.headers["Location"] = f"/api/v1/knowledge_base_items/{item.id}"
    return response


@requires("read")
async def list_items(request: web.Request) -> web.Response:
    """Newest first; `?stale=true` only the entries past their review date, `?owner=` one
    member's (a member id, or `me`)."""
    page = Page.from_query(request.query)
    who = principal(request)
    stale = _flag(request.query, "stale")
    owner = request.query.get("owner") or None
    if owner == "me":
        owner = who.member_id
    elif owner is not None and not owner.startswith("mbr_"):
        # A user id (what the RFP items' assignee filter takes) matched no entry: an empty list
        # that read as "nobody owns any" rather than as a mistake.
        raise ParameterInvalid(
            f"owner must be me or a member id (mbr_…, as owner_id shows it); got {owner!r}"
        )
    async with connection(request) as conn:
        total, items = await library.list_items(
            conn, who.account_id, stale=stale, owner=owner, size=page.size, offset=page.offset
        )
    return json_response(
        {
            "knowledge_base_items": [unstructure(item) for item in items],
            "pagination": page.pagination(total, len(items)),
        }
    )


def _flag(query: Mapping[str, str], name: str) -> bool:
    raw = query.get(name)
    if raw in (None, "", "false", "0"):
        return False
    if raw in ("true", "1"):
        return True
    raise ParameterInvalid(f"{name} must be true or false; got {raw!r}")


@requires("read")
async def get_item(request: web.Request) -> web.Response:
    async with connection(request) as conn:
        item = await fetch_item(conn, principal(request).account_id, request.match_info["id"])
    return _item_response(item)


@requires("write", roles=("admin", "member"))
async def delete_item(request: web.Request) -> web.Response:
    item_id = request.match_info["id"]
    async with connection(request) as conn:
        await knowledge.delete_item(conn, principal(request).account_id, item_id, actor=actor(request),
                                    if_match=if_match(request))
    entries_written(request.app)
    return web.Response(status=204)


@requires("write", roles=("admin", "member"))
async def import_items(request: web.Request) -> web.Response:
    parsed = await _read_csv_body(request)
    async with connection(request) as conn:
        report = await import_csv(conn, principal(request).account_id, parsed, actor(request))
    entries_written(request.app)
    return json_response(unstructure(report))


# -- library care (issue 20) ---------------------------------------------------------------------


@requires("write", roles=("admin", "member"))
async def patch_item(request: web.Request) -> web.Response:
    """Change an entry's fields (absent ones keep their values); the previous version is kept."""
    fields, _ = await read_object(request, "knowledge_base_item")
    who = principal(request)
    async with connection(request) as conn:
        item = await library.update_item(
            conn, who.account_id, request.match_info["id"], who.member_id, fields, actor=actor(request),
            if_match=if_match(request),
        )
    entries_written(request.app)
    return _item_response(item)


@requires("write", roles=("admin", "member"))
async def post_reviewed(request: web.Request) -> web.Response:
    """Mark an entry reviewed: its next review is one review period away (or `review_by`)."""
    fields: dict = {}
    if request.body_exists and (await request.read()).strip():  # the body is optional
        body = await read_json(request)
        if not isinstance(body, dict):
            raise ValidationFailed(["the body must be a JSON object (or empty)"])
        fields = body
    data = structure(fields, library.ReviewedInput)
    who = principal(request)
    async with connection(request) as conn:
        item = await library.mark_reviewed(
            conn, who.account_id, request.match_info["id"], who.member_id, data.review_by,
            actor=actor(request),
        )
    return _item_response(item)


@requires("read")
async def get_versions(request: web.Request) -> web.Response:
    """An entry's versions, newest first, paginated (also of an entry since deleted or merged)."""
    page = Page.from_query(request.query)
    async with connection(request) as conn:
        found, total = await library.versions(
            conn, principal(request).account_id, request.match_info["id"], page
        )
    return json_response({"versions": [unstructure(v) for v in found],
                          "pagination": page.pagination(total, len(found))})


# Who may start a duplicate run at will (`?refresh=true`): a writer who may edit the knowledge
# base. A new run costs seconds of CPU at thousands of entries: a reader's GET must not start one
# at will (entries changing is what starts one otherwise, and takes a writer).
REFRESH_POLICY = Policy(scope="write", roles=frozenset(("admin", "member")))
# Pairs a page of findings holds, and how deep pages go: as deep as a run keeps findings.
DUPLICATES_PAGE_SIZE = 100
DUPLICATES_MAX_ROWS = library.MAX_FINDINGS


@requires("read")
async def get_duplicates(request: web.Request) -> web.Response:
    """The last duplicate/conflict findings; starts a background run when there are none yet or
    entries changed since (the response says `computing` or `outdated` then: ask again)."""
    who = principal(request)
    account_id = who.account_id
    refresh = _flag(request.query, "refresh")
    if refresh:
        check(REFRESH_POLICY, who)
    page = Page.from_query(request.query, size=DUPLICATES_PAGE_SIZE, max_rows=DUPLICATES_MAX_ROWS)
    async with connection(request) as conn:
        report = await library.duplicate_report(conn, account_id, page=page)
    if report["state"] != "fresh" or refresh:
        start_duplicate_run(request.app, account_id)
    report["running"] = account_id in request.app[LIBRARY_JOBS]
    return json_response(report)


async def library_context(app: web.Application) -> AsyncIterator[None]:
    """The review period from config into the database; background duplicate runs stopped at exit."""
    app[LIBRARY_JOBS] = {}
    async with acquire(app) as conn:
        await library.set_review_period(conn, app[CONFIG].library.review_period_days)
    yield
    tasks = list(app[LIBRARY_JOBS].values())
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def start_duplicate_run(app: web.Application, account_id: str) -> None:
    """Find an account's duplicates in the background (once at a time per account and process)."""
    jobs = app[LIBRARY_JOBS]
    if account_id in jobs:
        return
    settings = app[CONFIG].library

    async def run() -> None:
        try:
            async with acquire(app) as conn:
                await library.find_duplicates(
                    conn, account_id, duplicate_similarity=settings.duplicate_similarity,
                    conflict_similarity=settings.conflict_similarity,
                )
        except Exception:
            log.exception("finding duplicates of account %s failed", account_id)
        finally:
            jobs.pop(account_id, None)

    jobs[account_id] = asyncio.create_task(run(), name=f"duplicates-{account_id}")


@requires("write", roles=("admin", "member"))
async def post_merge(request: web.Request) -> web.Response:
    """Merge `duplicate_id` into this entry: what cited either cites this one."""
    body = await read_json(request)
    data = structure(body, library.MergeInput)
    who = principal(request)
    async with connection(request) as conn:
        kept, repointed = await library.merge(
            conn, who.account_id, request.match_info["id"], data.duplicate_id, who.member_id,
            actor=actor(request),
        )
    entries_written(request.app)
    return json_response({"knowledge_base_item": unstructure(kept), "merged_id": data.duplicate_id,
                          "questions_repointed": repointed})

"""The RFP workflow: add and import items, answer them all, review them, export the response.

Questionnaire uploads are streamed into a spooled temporary file (memory up to a few MiB, then
disk) up to `server.max_upload_bytes`; the app's `client_max_size` (`server.max_body_bytes`) only
bounds bodies read whole, i.e. JSON, so the JSON limit stays small while uploads may be large.
"""

from __future__ import annotations

import tempfile
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any

import asyncpg
import attrs
from aiohttp import hdrs, web

from ...config import ServerConfig
from ...domain import audit, questionnaires, writeback
from ...domain.convert import structure, unstructure
from ...domain.errors import PayloadTooLarge, ValidationFailed
from ...domain.isolation import IsolatedWorkers, Turns, Unread
from ...domain.models import Page, RfpItem, rfp_json
from ...domain.preconditions import item_tag
from ...domain.rfp_items import (
    EXPORT_FORMATS,
    AnswerOptions,
    BulkApproved,
    BulkStopped,
    answer_pending_items,
    append_items,
    approve_items,
    export_filename,
    export_format,
    fetch_item,
    import_items,
    import_options,
    review,
    spool_export,
)
from ...domain.rfps import (
    MAX_ITEMS_PER_CREATE,
    ItemInput,
    assigned_items,
    assigned_to,
    fetch_rfp,
    review_filter,
)
from ..actors import actor
from ..auth import connection, principal, requires
from ..body import Upload, one_of_members_uploads, read_body, read_json, receive_upload
from ..etags import if_match, tagged
from ..frontdoor import stream_headers
from ..keys import CONFIG, DELIVERER, EXPORTS, MAIL_SENDER, METRICS, PARSERS, PIPELINE
from ..responses import attachment, json_response

# A CSV export is written to the client in pieces of this size, from a file that stays in
# memory up to _SPOOL_IN_MEMORY and spills to disk past it.
_EXPORT_CHUNK = 64 * 1024
_SPOOL_IN_MEMORY = 4 * 1024 * 1024


@requires("write", roles=("admin", "member"))
async def post_rfp_items(request: web.Request) -> web.Response:
    """`{"rfp_item": {...}}` → 201 the item; `{"rfp_items": [...]}` → 201 `{"rfp_items": [...]}`."""
    body = await read_json(request)
    if not isinstance(body, dict) or not ({"rfp_item", "rfp_items"} & body.keys()):
        raise ValidationFailed(["the body must be {\"rfp_item\": {...}} or {\"rfp_items\": [...]}"])
    single = "rfp_item" in body and isinstance(body["rfp_item"], dict)
    key = "rfp_item" if "rfp_item" in body else "rfp_items"
    raw = [body[key]] if single else body[key]
    if not isinstance(raw, list):
        raise ValidationFailed([f"{key}: must be an object or an array of objects"])
    if not raw:
        raise ValidationFailed([f"{key}: must not be empty"])
    if len(raw) > MAX_ITEMS_PER_CREATE:
        raise ValidationFailed([f"{key}: at most {MAX_ITEMS_PER_CREATE} items per request"])
    items = structure(raw, list[ItemInput], root=key)
    who = principal(request)
    rfp_id = request.match_info["id"]
    async with connection(request) as conn:
        _, rows = await append_items(
            conn, who.account_id, rfp_id, [i.question.strip() for i in items],
            [i.section for i in items], returning=True, actor=actor(request),
        )
    created = [unstructure(RfpItem.from_row(row)) for row in rows]
    if single:
        response = json_response(created[0], status=201)
        response.headers["Location"] = f"/api/v1/rfps/{rfp_id}/rfp_items/{created[0]['id']}"
        return response
    return json_response({"rfp_items": created}, status=201)


def export_turns(server: ServerConfig) -> Turns:
    """The turns of the exports being read and built in this process (server.export_workers)."""
    return Turns(workers=server.export_workers, timeout=server.export_wait_seconds,
                 busy=f"all {server.export_workers} exports (server.export_workers)")


async def parsers_context(app: web.Application) -> AsyncIterator[None]:
    """The upload parsers of this process; children still running at shutdown are killed."""
    uploads = app[CONFIG].uploads
    app[PARSERS] = IsolatedWorkers(workers=uploads.parse_workers, timeout=uploads.parse_timeout_seconds,
                                   memory_bytes=uploads.parse_memory_bytes)
    yield
    app[PARSERS].close()


@requires("write", roles=("admin", "member"))
async def import_rfp_items(request: web.Request) -> web.Response:
    options = import_options(request.query)
    who = principal(request)
    rfp_id = request.match_info["id"]
    async with connection(request) as conn:
        await fetch_rfp(conn, rfp_id, who.account_id)  # 404 before reading a large body
    with one_of_members_uploads(request):
        upload = await receive_upload(request, request.app[CONFIG].server.max_upload_bytes)
        report, _ = await import_upload(request, who.account_id, rfp_id, upload, options)
    return json_response({"import": report}, status=201)


async def import_upload(
    request: web.Request, account_id: str, rfp_id: str, upload: Upload,
    options: questionnaires.ImportOptions, *, keep_report: bool = False, items_held: int | None = None,
) -> tuple[dict, str | None]:
    """Parse an uploaded questionnaire and store its rows as the RFP's items, audited and
    announced to webhooks: the import report, and its id when kept (else None). The API's import
    and the web app's upload form both come here; the form's (`keep_report`) keeps the report for
    its page in the import's transaction (domain/rfp_items.py import_items) and imports only into
    the RFP as its form showed it (`items_held`)."""
    config = request.app[CONFIG]
    with upload.file:
        # In a child process with a time and memory limit (service/domain/isolation.py): a hostile
        # file costs at most that, and never the threads other requests need.
        found = await request.app[PARSERS].run(
            questionnaires.parse_upload, Unread(upload.file), options, upload.media_type,
            upload.filename, questionnaires.Limits.of(config.uploads), owner=account_id,
        )
        upload.file.seek(0)
        data = upload.file.read()
    kept = writeback.kept_file(data, upload.media_type, upload.filename, config.library.max_kept_file_bytes)
    async with connection(request) as conn:
        report, queued, report_id = await import_items(
            conn, actor(request), account_id, rfp_id, found, kept, filename=upload.filename,
            keep_report=keep_report, items_held=items_held,
        )
    if queued:
        request.app[DELIVERER].wake()
    return report, report_id


@requires("read")
async def get_rfp_item(request: web.Request) -> web.Response:
    async with connection(request) as conn:
        row = await fetch_item(
            conn, principal(request).account_id, request.match_info["id"], request.match_info["item_id"]
        )
    return _item_response(RfpItem.from_row(row))


def _item_response(item: RfpItem) -> web.Response:
    """An item with its ETag: what a PATCH's If-Match names to change this version alone."""
    return tagged(json_response(unstructure(item)), item_tag(item.updated_at))


@requires("read")
async def list_assigned_items(request: web.Request) -> web.Response:
    """`?assignee=me|<user id>&state=…`: one page of the account's items assigned to that
    member, across its RFPs, each as the item API shows it with its RFP's id, title and deadline."""
    page = Page.from_query(request.query)
    who = principal(request)
    user_id = assigned_to(request.query.get("assignee"), who.user_id)
    state = review_filter(request.query.get("state"))
    async with connection(request) as conn:
        rows, total = await assigned_items(conn, who.account_id, user_id, state, page)
    return json_response({
        "rfp_items": [unstructure(RfpItem.from_row(row)) | {"rfp": {
            "id": row["rfp_id"], "title": row["rfp_title"],
            "deadline": None if row["rfp_deadline"] is None else row["rfp_deadline"].isoformat(),
        }} for row in rows],
        "pagination": page.pagination(total, len(rows)),
    })


@requires("write", roles=("admin", "member"))
async def patch_rfp_item(request: web.Request) -> web.Response:
    body = await read_json(request)
    if not isinstance(body, dict) or not isinstance(body.get("rfp_item"), dict):
        raise ValidationFailed(["rfp_item: is required and must be an object"])
    item = await review_and_announce(
        request, request.match_info["id"], request.match_info["item_id"], body["rfp_item"],
        if_match=if_match(request),
    )
    return _item_response(item)


async def review_and_announce(
    request: web.Request, rfp_id: str, item_id: str, fields: dict[str, Any],
    if_match: tuple[str, ...] | None = None,
) -> RfpItem:
    """Review one item (domain rfp_items.review_item) with its audit events, webhooks
    (rfp_item.approved; rfp.approved once the last item is) and an assignee's e-mail; the item
    as stored. The API's PATCH and the web app's item buttons both come here; `if_match`, the
    versions the client read (preconditions.check)."""
    who = principal(request)
    async with connection(request) as conn:
        reviewed = await review(
            conn, who.account_id, rfp_id, item_id, fields, who.member_id, actor=actor(request),
            web_base_url=request.app[CONFIG].server.web_base_url,
            mail_config=request.app[CONFIG].mail, if_match=if_match,
        )
    if reviewed.queued:
        request.app[DELIVERER].wake()
    if reviewed.mailed:  # the assignee's e-mail
        request.app[MAIL_SENDER].wake()
    return RfpItem.from_row(reviewed.row)


async def approve_and_announce(
    request: web.Request, rfp_id: str, item_ids: list[str], *, save_to_knowledge_base: bool = False,
    unchanged_since: datetime | None = None,
) -> BulkApproved:
    """Approve many items (domain rfp_items.approve_items: each as review_and_announce approves
    one), the webhook deliverer woken once, also when an item's failure stopped the run
    (BulkStopped: the items before it are approved). The web app's bulk approval comes here."""
    who = principal(request)
    try:
        async with connection(request) as conn:
            done = await approve_items(
                conn, who.account_id, rfp_id, item_ids, who.member_id,
                save_to_knowledge_base=save_to_knowledge_base, actor=actor(request),
                web_base_url=request.app[CONFIG].server.web_base_url, unchanged_since=unchanged_since,
            )
    except BulkStopped as stopped:
        if stopped.done.queued:
            request.app[DELIVERER].wake()
        raise
    if done.queued:
        request.app[DELIVERER].wake()
    return done


@requires("read", hold_connection=False)
async def export_rfp(request: web.Request) -> web.StreamResponse:
    """The items as CSV or XLSX, read from a cursor into a spooled file while a pooled connection
    is held, then sent from it with no connection held: a client that reads slowly, or never,
    must not keep a connection from other requests."""
    fmt = export_format(request.query)
    rfp_id = request.match_info["id"]
    if fmt == "original":
        return await _export_original(request, rfp_id)
    account_id = principal(request).account_id
    with tempfile.SpooledTemporaryFile(max_size=_SPOOL_IN_MEMORY) as spool:
        # A turn before the connection: an export waiting for one holds neither a pooled
        # connection nor the RFP's items, and a client's parallel exports read one at a time.
        async with request.app[EXPORTS].taken(account_id):
            async with connection(request) as conn:
                rfp = await fetch_rfp(conn, rfp_id, account_id)
                # Not a change, but data leaving the service: the audit log shows who took it.
                await audit.record(conn, actor(request), "rfp.exported", record_id=rfp_id,
                                   after={"format": fmt})
                await spool_export(conn, rfp, fmt, spool)
        headers = {hdrs.CONTENT_DISPOSITION: attachment(export_filename(rfp["title"], rfp_id, fmt))}
        response = web.StreamResponse(headers={**headers, **stream_headers(request)})
        response.content_type = EXPORT_FORMATS[fmt]
        if fmt == "csv":
            response.charset = "utf-8"
        response.content_length = spool.tell()
        spool.seek(0)
        await response.prepare(request)
        while chunk := spool.read(_EXPORT_CHUNK):
            await response.write(chunk)
        await response.write_eof()
        return response


async def _export_original(request: web.Request, rfp_id: str) -> web.Response:
    """The imported questionnaire with the answers written into their cells (write-back)."""
    options = writeback.write_options(request.query)
    account_id = principal(request).account_id
    async with request.app[EXPORTS].taken(account_id), connection(request) as conn:
        rfp = await fetch_rfp(conn, rfp_id, account_id)
        await audit.record(conn, actor(request), "rfp.exported", record_id=rfp_id,
                           after={"format": "original"})
        file, cells = await writeback.load(conn, account_id, rfp_id, options,
                                           request.app[CONFIG].uploads.max_text_chars)
    # The kept file is an upload too: written back in a child with the parsers' time and memory
    # limits (service/domain/isolation.py). In a thread, a workbook built to be slow to search
    # held the GIL, and so every request of the process, for minutes; resolving a dropdown's list
    # loaded the whole workbook into this process.
    try:
        body = await request.app[PARSERS].run(writeback.write, dict(file), cells,
                                              questionnaires.Limits.of(request.app[CONFIG].uploads),
                                              owner=account_id)
    except PayloadTooLarge as exc:
        raise ValidationFailed(
            [f"file: the kept questionnaire could not be written back: {detail}"
             for detail in exc.details or [exc.message]],
            "the questionnaire could not be written back; export it as CSV instead",
        ) from None
    name = file["filename"] or export_filename(rfp["title"], rfp_id, file["format"])
    headers = {hdrs.CONTENT_DISPOSITION: attachment(name)}
    return web.Response(body=body, content_type=writeback.media_type(file), headers=headers)


@requires("write", roles=("admin", "member"))
async def answer_rfp(request: web.Request) -> web.Response:
    """Answer every pending item through the question pipeline; 202 with what was started."""
    fields: dict[str, Any] = {}
    if request.body_exists and (await read_body(request)).strip():  # the body is optional
        body = await read_json(request)
        if not isinstance(body, dict):
            raise ValidationFailed(["the body must be a JSON object (or empty)"])
        fields = body
    options = structure(fields, AnswerOptions)
    settings = request.app[CONFIG].questions
    limit = settings.max_custom_prompt_chars
    if options.custom_prompt is not None and len(options.custom_prompt) > limit:
        raise ValidationFailed([f"custom_prompt: must be at most {limit} characters"])
    if options.custom_prompt is not None and not options.custom_prompt.strip():
        options = attrs.evolve(options, custom_prompt=None)
    who = principal(request)
    rfp_id = request.match_info["id"]
    async with connection(request) as conn:
        answering = await start_answering(request, conn, rfp_id, options)
        row = await fetch_rfp(conn, rfp_id, who.account_id)
    rfp = rfp_json(row, request.app[CONFIG].server.web_base_url, with_context=True)
    response = json_response(
        {"rfp": rfp, "answering": answering}, status=202
    )
    response.headers["Location"] = f"/api/v1/rfps/{rfp_id}"
    return response


async def start_answering(
    request: web.Request, conn: asyncpg.Connection, rfp_id: str, options: AnswerOptions
) -> dict[str, int]:
    """Answer every pending item (domain answer_pending_items), audited, the pipeline woken and
    the credits counted; what was started. The API's "answer all" and the web app's button."""
    cost = request.app[CONFIG].questions.credits_per_question
    answering = await answer_pending_items(
        conn, principal(request), rfp_id, options, cost, actor=actor(request)
    )
    if answering["started"]:
        request.app[PIPELINE].wake()
    if answering["credits_charged"]:  # counted once committed (answer_pending_items commits)
        request.app[METRICS].credits_debited.labels("rfp_item").inc(answering["credits_charged"])
    return answering

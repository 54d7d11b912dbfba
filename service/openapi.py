"""The OpenAPI 3.1 description of every route, served at GET /api/v1/openapi.json.

Kept by hand beside service/app.py; tests/test_openapi.py fails when a registered route is not
described here, and every response the test suite receives is validated against it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aiohttp import web

from .auth import public
from .errors import NotFound

SWAGGER_UI_DIR = Path(__file__).resolve().parent / "static" / "swagger-ui"
_ASSETS = {"swagger-ui-bundle.js": "application/javascript", "swagger-ui.css": "text/css"}

JSON = "application/json"


def _ref(name: str) -> dict:
    return {"$ref": f"#/components/schemas/{name}"}


def _nullable(schema: dict) -> dict:
    return {"anyOf": [schema, {"type": "null"}]}


def _json(schema: dict, description: str) -> dict:
    return {"description": description, "content": {JSON: {"schema": schema}}}


def _error(description: str) -> dict:
    return _json(_ref("Error"), description)


# Errors any authenticated route may answer with.
_AUTH_ERRORS = {
    "401": _error("missing, unknown, revoked or expired token (unauthorized)"),
    "403": _error("the token lacks the scope, or the member the role (insufficient_scope, forbidden)"),
    "429": _error("rate limited (rate_limited); Retry-After says when to retry"),
}
_BODY_ERRORS = {
    "400": _error("malformed JSON or a missing/invalid parameter"),
    "413": _error("the body is larger than the service accepts"),
    "415": _error("the body is not JSON"),
    "422": _error("the record could not be saved (validation_failed, with details)"),
}

SCHEMAS: dict[str, Any] = {
    "Error": {
        "type": "object",
        "required": ["error"],
        "properties": {
            "error": {
                "type": "object",
                "required": ["code", "message"],
                "properties": {
                    "code": {"type": "string"},
                    "message": {"type": "string"},
                    "details": {"type": "array", "items": {"type": "string"}},
                },
            }
        },
    },
    "MemberRef": {
        "type": "object",
        "required": ["id", "name", "email"],
        "properties": {"id": {"type": "integer"}, "name": {"type": "string"},
                       "email": {"type": "string", "format": "email"}},
    },
    "RfpStats": {
        "type": "object",
        "required": ["total_items", "needs_input_items", "auto_answered_items", "approved_items",
                     "overall_completion_percentage"],
        "properties": {
            "total_items": {"type": "integer", "minimum": 0},
            "needs_input_items": {"type": "integer", "minimum": 0},
            "auto_answered_items": {"type": "integer", "minimum": 0},
            "approved_items": {"type": "integer", "minimum": 0},
            "overall_completion_percentage": {"type": "integer", "minimum": 0, "maximum": 100},
        },
    },
    "Rfp": {
        "type": "object",
        "required": ["id", "web_link", "title", "description", "deadline", "state", "framework",
                     "portal_url", "created_at", "updated_at", "owner", "stats"],
        "properties": {
            "id": {"type": "string"},
            "web_link": {"type": "string", "format": "uri"},
            "title": {"type": "string"},
            "description": _nullable({"type": "string"}),
            "deadline": _nullable({"type": "string", "format": "date"}),
            "state": {"enum": ["new", "items_generated", "processing_items", "needs_input",
                               "approved"]},
            "framework": _nullable({"enum": ["nist-csf-2.0", "hecvat-3.06", "hecvat-4.1",
                                             "rh-1.0", "cjis-5", "cjis-6"]}),
            "portal_url": _nullable({"type": "string", "format": "uri"}),
            "context": _nullable({"type": "string"}),
            "created_at": {"type": "string", "format": "date-time"},
            "updated_at": {"type": "string", "format": "date-time"},
            "owner": _ref("MemberRef"),
            "stats": _ref("RfpStats"),
        },
    },
    "RfpInput": {
        "type": "object",
        "properties": {
            "title": {"type": "string", "minLength": 1, "maxLength": 500},
            "description": _nullable({"type": "string"}),
            "deadline": _nullable({"type": "string", "format": "date"}),
            "framework": _nullable({"enum": ["nist-csf-2.0", "hecvat-3.06", "hecvat-4.1",
                                             "rh-1.0", "cjis-5", "cjis-6"]}),
            "portal_url": _nullable({"type": "string", "format": "uri"}),
            "context": _nullable({"type": "string"}),
            "items": {"type": "array", "items": {
                "type": "object", "required": ["question"],
                "properties": {"question": {"type": "string"},
                               "section": _nullable({"type": "string"})}}},
        },
    },
    "RfpItem": {
        "type": "object",
        "required": ["id", "rfp_id", "question", "answer", "state", "confidence", "section",
                     "position", "created_at", "updated_at"],
        "properties": {
            "id": {"type": "string"}, "rfp_id": {"type": "string"},
            "question": {"type": "string"}, "answer": _nullable({"type": "string"}),
            "state": {"enum": ["pending", "auto_answered", "needs_input", "approved", "discarded"]},
            "confidence": _nullable({"type": "number", "minimum": 0, "maximum": 1}),
            "section": _nullable({"type": "string"}), "position": {"type": "integer"},
            "created_at": {"type": "string", "format": "date-time"},
            "updated_at": {"type": "string", "format": "date-time"},
            "question_id": _nullable({"type": "string", "description":
                                      "the question answering (or that answered) the item"}),
            "knowledge_item_id": _nullable({"type": "string", "description":
                                            "the knowledge-base entry its answer was saved as"}),
        },
    },
    "RfpItemInput": {
        "type": "object", "required": ["question"],
        "properties": {"question": {"type": "string", "minLength": 1},
                       "section": _nullable({"type": "string"})},
    },
    "RfpItemReview": {
        "type": "object",
        "properties": {
            "question": {"type": "string", "minLength": 1},
            "section": _nullable({"type": "string"}),
            "answer": _nullable({"type": "string"}),
            "state": {"enum": ["approved", "discarded", "pending"],
                      "description": "approve (needs an answer), discard, or reopen (pending)"},
            "save_to_knowledge_base": {"type": "boolean",
                                       "description": "store the approved answer in the knowledge base"},
        },
    },
    "ImportReport": {
        "type": "object",
        "required": ["import"],
        "properties": {"import": {
            "type": "object",
            "required": ["rfp_id", "sheet", "header_row", "question_column", "section_column",
                         "imported", "first_position", "skipped_count", "skipped"],
            "properties": {
                "rfp_id": {"type": "string"},
                "sheet": _nullable({"type": "string"}),
                "header_row": _nullable({"type": "integer"}),
                "question_column": {"type": "string"},
                "section_column": _nullable({"type": "string"}),
                "imported": {"type": "integer", "minimum": 1},
                "first_position": {"type": "integer", "minimum": 1},
                "skipped_count": {"type": "integer", "minimum": 0},
                "skipped": {"type": "array", "description": "at most 1,000 listed", "items": {
                    "type": "object", "required": ["row", "reason"],
                    "properties": {"row": {"type": "integer"}, "reason": {"type": "string"}}}},
            },
        }},
    },
    "AnswerStarted": {
        "type": "object",
        "required": ["rfp", "answering"],
        "properties": {
            "rfp": _ref("Rfp"),
            "answering": {
                "type": "object", "required": ["started", "in_flight", "credits_charged"],
                "properties": {"started": {"type": "integer", "minimum": 0},
                               "in_flight": {"type": "integer", "minimum": 0},
                               "credits_charged": {"type": "integer", "minimum": 0}},
            },
        },
    },
    "Pagination": {
        "type": "object",
        "required": ["current_page", "total_pages", "total_count", "items_per_page", "from", "to"],
        "properties": {
            "current_page": {"type": "integer", "minimum": 1},
            "total_pages": {"type": "integer", "minimum": 0},
            "total_count": {"type": "integer", "minimum": 0,
                            "description": "exact up to 10,000; at 10,000 the response carries "
                                           "X-Total-Count-Capped: true (search)"},
            "items_per_page": {"type": "integer"},
            "from": _nullable({"type": "integer"}),
            "to": _nullable({"type": "integer"}),
        },
    },
    # Members routes: shapes owned by service/members.py; described loosely until refined.
    "Object": {"type": "object"},
}

_ID = {"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}
_TOKEN = {"name": "token", "in": "path", "required": True, "schema": {"type": "string"}}
_PAGE = {"name": "page", "in": "query", "required": False,
         "schema": {"type": "integer", "minimum": 1}}
_BEARER = [{"bearer": []}]


def _op(op_id: str, summary: str, responses: dict, *, security: list | None = None,
        params: list | None = None, body: dict | None = None) -> dict:
    op: dict[str, Any] = {"operationId": op_id, "summary": summary, "responses": responses,
                          "security": security if security is not None else _BEARER}
    if params:
        op["parameters"] = params
    if body:
        op["requestBody"] = {"required": True, "content": {JSON: {"schema": body}}}
        op["responses"] = {**_BODY_ERRORS, **responses}
    if op["security"]:
        op["responses"] = {**_AUTH_ERRORS, **op["responses"]}
    return op


def _wrapped(key: str, schema: dict) -> dict:
    return {"type": "object", "required": [key], "properties": {key: schema}}


_ITEM_ID = {"name": "item_id", "in": "path", "required": True, "schema": {"type": "string"}}
_XLSX = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"


def _query(name: str, description: str, schema: dict | None = None) -> dict:
    return {"name": name, "in": "query", "required": False, "description": description,
            "schema": schema or {"type": "string"}}


def _workflow_paths() -> dict[str, Any]:
    """Items, import, answering, review and export (service/workflow.py)."""
    item = _ref("RfpItem")
    no_rfp = _error("no such RFP in this account")
    create = _op("create_rfp_items", "add one item, or a list, after the RFP's last", {
        "201": _json({"anyOf": [item, _wrapped("rfp_items", {"type": "array", "items": item})]},
                     "the item (for rfp_item), or {rfp_items: [...]} (for rfp_items)"),
        "404": no_rfp}, params=[_ID],
        body={"anyOf": [_wrapped("rfp_item", _ref("RfpItemInput")),
                        _wrapped("rfp_items", {"type": "array", "items": _ref("RfpItemInput")})]})
    upload = _op("import_rfp_items", "import a CSV or XLSX questionnaire as items, in file order", {
        "201": _json(_ref("ImportReport"), "what was imported and every row skipped, with why"),
        "400": _error("a malformed option (parameter_invalid)"), "404": no_rfp,
        "413": _error("the file is larger than server.max_upload_bytes"),
        "422": _error("no question column (the columns found are named), no questions, "
                      "unknown sheet, or an unreadable file")},
        params=[_ID,
                _query("sheet", "sheet name; default: the first with a question-like header"),
                _query("question_column", "header name or column letter"),
                _query("section_column", "header name or column letter"),
                _query("header_row", "1-based header row; 0 = none; default: detected",
                       {"type": "integer", "minimum": 0})])
    upload["requestBody"] = {"required": True, "content": {
        "text/csv": {"schema": {"type": "string"}},
        _XLSX: {"schema": {"type": "string", "format": "binary"}},
        "multipart/form-data": {"schema": {"type": "object", "required": ["file"], "properties": {
            "file": {"type": "string", "format": "binary"}}}},
    }}
    answer = _op("answer_rfp", "answer every pending item through the question pipeline", {
        "202": _json(_ref("AnswerStarted"), "answering started (items already in flight are "
                     "not asked or charged again)"),
        "403": _error("no active subscription or not enough credits for every item "
                      "(usage_blocked), or a viewer"),
        "404": no_rfp}, params=[_ID],
        body={"type": "object", "properties": {
            "answer_detail_level": {"enum": [0, 1, 2]},
            "custom_prompt": _nullable({"type": "string"})}})
    answer["requestBody"]["required"] = False
    return {
        "/api/v1/rfps/{id}/rfp_items": {"post": create},
        "/api/v1/rfps/{id}/rfp_items/import": {"post": upload},
        "/api/v1/rfps/{id}/rfp_items/{item_id}": {
            "get": _op("get_rfp_item", "read one item", {
                "200": _json(item, "the item"), "404": _error("no such item in this RFP")},
                params=[_ID, _ITEM_ID]),
            "patch": _op("review_rfp_item", "edit, approve, discard or reopen an item", {
                "200": _json(item, "the reviewed item"),
                "404": _error("no such item in this RFP"),
                "422": _error("approving without an answer, saving an unapproved answer, "
                              "or an invalid field")},
                params=[_ID, _ITEM_ID], body=_wrapped("rfp_item", _ref("RfpItemReview"))),
        },
        "/api/v1/rfps/{id}/answer": {"post": answer},
        "/api/v1/rfps/{id}/export": {"get": _op("export_rfp", "the RFP's items as a file", {
            "200": {"description": "attachment: question, answer, state, confidence, section",
                    "content": {"text/csv": {"schema": {"type": "string"}},
                                _XLSX: {"schema": {"type": "string", "format": "binary"}}}},
            "400": _error("format is not csv or xlsx (parameter_invalid)"), "404": no_rfp},
            params=[_ID, _query("format", "csv (default) or xlsx", {"enum": ["csv", "xlsx"]})])},
    }


def document() -> dict[str, Any]:
    obj = _ref("Object")
    paths = {
        "/healthz": {"get": _op("healthz", "liveness", {"200": _json(obj, "alive")}, security=[])},
        "/readyz": {"get": _op("readyz", "readiness: the database answers", {
            "200": _json(obj, "ready"), "503": _error("the database is unreachable")}, security=[])},
        "/api/v1/rfps": {"post": _op("create_rfp", "create an RFP (with items)", {
            "201": _json(_ref("Rfp"), "the created RFP, with context")},
            body=_wrapped("rfp", _ref("RfpInput")))},
        "/api/v1/rfps/search": {"get": _op("search_rfps", "search RFPs (case-insensitive substring)", {
            "200": _json({"type": "object", "required": ["rfps", "pagination"], "properties": {
                "rfps": {"type": "array", "items": _ref("Rfp")},
                "pagination": _ref("Pagination")}}, "matching RFPs, newest first, 20 per page"),
            "400": _error("query missing or page invalid")},
            params=[{"name": "query", "in": "query", "required": True, "schema": {"type": "string"}},
                    _PAGE])},
        "/api/v1/rfps/{id}": {
            "get": _op("get_rfp", "read an RFP", {
                "200": _json(_ref("Rfp"), "the RFP, with context"),
                "404": _error("no such RFP in this account")}, params=[_ID]),
            "patch": _op("update_rfp", "change an RFP's fields", {
                "200": _json(_ref("Rfp"), "the updated RFP"),
                "404": _error("no such RFP in this account")}, params=[_ID],
                body=_wrapped("rfp", _ref("RfpInput"))),
        },
        "/api/v1/rfps/{id}/rfp_items": {"get": _op("list_rfp_items", "an RFP's items", {
            "200": _json({"type": "object", "required": ["rfp_items", "pagination"], "properties": {
                "rfp_items": {"type": "array", "items": _ref("RfpItem")},
                "pagination": _ref("Pagination")}}, "one page of items in order"),
            "400": _error("page invalid"), "404": _error("no such RFP in this account")},
            params=[_ID, _PAGE])},
        "/api/v1/users": {"post": _op("create_user", "create a user (admin)", {
            "201": _json(obj, "the created member (SPEC 2.3)")}, body=obj)},
        "/api/v1/users/confirmation": {
            "post": _op("confirm_email", "confirm an e-mail address", {
                "200": _json(obj, "confirmed"), "404": _error("unknown or used link")},
                security=[], body=obj),
            "get": _op("confirm_email_link", "the link from the confirmation mail", {
                "200": {"description": "confirmed (a sentence for the browser)",
                        "content": {"text/plain": {"schema": {"type": "string"}}}},
                "400": _error("token missing"),
                "404": _error("unknown or used link")}, security=[],
                params=[{"name": "token", "in": "query", "required": True,
                         "schema": {"type": "string"}}]),
        },
        "/api/v1/tokens": {"post": _op("create_token", "sign in: e-mail and password to a token", {
            "201": _json(obj, "the token, shown once"), "401": _error("wrong e-mail or password"),
            "403": _error("e-mail not confirmed"), "429": _error("too many attempts")},
            security=[], body=obj)},
        "/api/v1/invitations": {"post": _op("create_invitation", "invite someone (admin)", {
            "201": _json(obj, "the invitation")}, body=obj)},
        "/api/v1/invitations/{token}": {"get": _op("get_invitation", "what an invitation offers", {
            "200": _json(obj, "the invitation"), "404": _error("unknown or expired")},
            security=[], params=[_TOKEN])},
        "/api/v1/invitations/{token}/accept": {"post": _op(
            "accept_invitation", "accept an invitation: a confirmed user and membership", {
                "201": _json(obj, "the new member"), "404": _error("unknown or expired")},
            security=[], params=[_TOKEN], body=obj)},
        "/api/v1/members": {"get": _op("list_members", "the account's members", {
            "200": _json(obj, "members")}, params=[_PAGE])},
        "/api/v1/openapi.json": {"get": _op("openapi", "this description", {
            "200": _json(obj, "OpenAPI 3.1")}, security=[])},
        "/docs/init.js": {"get": _op("docs_init", "Swagger UI start-up script", {
            "200": {"description": "JavaScript",
                    "content": {"application/javascript": {"schema": {"type": "string"}}}}},
            security=[])},
        "/docs/assets/{name}": {"get": _op("docs_asset", "Swagger UI assets (vendored)", {
            "200": {"description": "the asset"}, "404": _error("no such asset")},
            security=[], params=[{"name": "name", "in": "path", "required": True,
                                  "schema": {"type": "string"}}])},
        "/docs": {"get": _op("docs", "browsable API documentation (Swagger UI, served locally)", {
            "200": {"description": "HTML", "content": {"text/html": {"schema": {"type": "string"}}}}},
            security=[])},
        "/metrics": {"get": _op("metrics", "Prometheus metrics (only with [metrics] enabled)", {
            "200": {"description": "Prometheus text format",
                    "content": {"text/plain": {"schema": {"type": "string"}}}}}, security=[])},
    }
    for path, operations in _workflow_paths().items():
        paths[path] = {**paths.get(path, {}), **operations}
    return {
        "openapi": "3.1.0",
        "info": {"title": "RFP response service", "version": "1",
                 "description": "Errors always have the Error shape; see README."},
        "servers": [{"url": "/"}],
        "paths": paths,
        "components": {
            "schemas": SCHEMAS,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer",
                                           "description": "rfpk_… API token"}},
        },
    }


@public
async def get_openapi(request: web.Request) -> web.Response:
    return web.json_response(document())


_DOCS_HTML = """<!doctype html>
<html><head><meta charset="utf-8"><title>RFP response service API</title>
<link rel="stylesheet" href="/docs/assets/swagger-ui.css"></head>
<body><div id="ui"></div><script src="/docs/assets/swagger-ui-bundle.js"></script>
<script src="/docs/init.js"></script></body></html>"""
_DOCS_INIT = 'SwaggerUIBundle({url: "/api/v1/openapi.json", dom_id: "#ui"});'


@public
async def get_docs(request: web.Request) -> web.Response:
    return web.Response(text=_DOCS_HTML, content_type="text/html")


@public
async def get_docs_init(request: web.Request) -> web.Response:
    # A separate script, so a strict Content-Security-Policy need not allow inline scripts.
    return web.Response(text=_DOCS_INIT, content_type="application/javascript")


@public
async def get_docs_asset(request: web.Request) -> web.StreamResponse:
    name = request.match_info["name"]
    if name not in _ASSETS:
        raise NotFound("no such asset")
    return web.FileResponse(
        SWAGGER_UI_DIR / name,
        headers={"Content-Type": _ASSETS[name], "Cache-Control": "public, max-age=86400"},
    )

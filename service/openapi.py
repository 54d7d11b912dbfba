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

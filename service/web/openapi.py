"""The OpenAPI 3.1 description of every route, served at GET /api/v1/openapi.json.

Kept by hand beside service/app.py; tests/test_openapi.py fails when a registered route is not
described here, and every response the test suite receives is validated against it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aiohttp import web

from ..domain.convert import FRAMEWORKS
from ..domain.errors import NotFound
from .auth import public
from .responses import json_response

SWAGGER_UI_DIR = Path(__file__).resolve().parent / "static" / "swagger-ui"
_ASSETS = {"swagger-ui-bundle.js": "application/javascript", "swagger-ui.css": "text/css"}

JSON = "application/json"
STRING = {"type": "string"}


def _ref(name: str) -> dict:
    return {"$ref": f"#/components/schemas/{name}"}


def _nullable(schema: dict) -> dict:
    return {"anyOf": [schema, {"type": "null"}]}


def _header(description: str, schema: dict | None = None, required: bool = False) -> dict:
    return {"description": description, "schema": schema or STRING, "required": required}


_LOCATION = {"Location": _header("the path of the created resource", required=True)}
_RATE_HEADERS = {
    "RateLimit-Limit": _header("requests allowed per period (limited routes only)",
                               {"type": "integer"}),
    "RateLimit-Remaining": _header("requests left now", {"type": "integer"}),
    "RateLimit-Reset": _header("seconds until the bucket is full again", {"type": "integer"}),
}


def _json(schema: dict, description: str, headers: dict | None = None) -> dict:
    response: dict[str, Any] = {"description": description, "content": {JSON: {"schema": schema}}}
    if headers:
        response["headers"] = headers
    return response


def _error(description: str, headers: dict | None = None) -> dict:
    return _json(_ref("Error"), description, headers)


_UNAUTHORIZED = _error(
    "missing, unknown, revoked or expired token (unauthorized)",
    {"WWW-Authenticate": _header('Bearer realm="api" (RFC 6750)', required=True)},
)
# POST /invitations and /users: the account's e-mails of the hour (mail.account_mails_per_hour),
# and those to the address (mail.invitation_mails_per_hour).
_ACCOUNT_MAILS = _error(
    "rate limited (rate_limited): this account's members had mail.account_mails_per_hour e-mails "
    "sent in the last hour (invitations, new users, assignments; one SMTP quota serves every "
    "account), or mail.invitation_mails_per_hour invitations and welcome e-mails to this address; "
    "nothing was written; or a route listed under [rate_limits]",
    {"Retry-After": _header("seconds until one of the hour's e-mails leaves it",
                            {"type": "integer", "minimum": 1}, required=True),
     **_RATE_HEADERS},
)
_RATE_LIMITED = _error(
    "rate limited (rate_limited): a route listed under [rate_limits], or repeated failed sign-ins",
    {"Retry-After": _header("seconds to wait", {"type": "integer", "minimum": 1}, required=True),
     **_RATE_HEADERS},
)
# Errors any authenticated route may answer with (every route name can be rate limited).
_AUTH_ERRORS = {
    "401": _UNAUTHORIZED,
    "403": _error("the token lacks the scope, or the member the role (insufficient_scope, forbidden)"),
    "429": _RATE_LIMITED,
    "503": _error("the database is unavailable; retry after Retry-After seconds "
                  "(service_unavailable)"),
}
_BODY_ERRORS = {
    "400": _error("malformed JSON or a missing/invalid parameter (invalid_json, parameter_*)"),
    "408": _error("the body did not arrive within server.body_timeout_seconds (request_timeout)"),
    "413": _error("the body is larger than the service accepts (payload_too_large)"),
    "415": _error("the body is not JSON (unsupported_media_type)"),
    "422": _error("the record could not be saved (validation_failed, with details)"),
}

_FRAMEWORKS = list(FRAMEWORKS)
_DATE_TIME = {"type": "string", "format": "date-time"}
_ROLE = {"enum": ["admin", "member", "viewer"]}


_PAGE_INVALID = _error("page is not a positive integer (parameter_invalid)")


def _object(properties: dict, required: list[str] | None = None, *, closed: bool = False,
            description: str | None = None) -> dict:
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    if closed:
        schema["additionalProperties"] = False
    if description:
        schema["description"] = description
    return schema


def _page_of(key: str, item: str) -> dict:
    return _object({key: {"type": "array", "items": _ref(item)}, "pagination": _ref("Pagination")},
                   [key, "pagination"])


# -- library care (issue 20) --
_DATE = {"type": "string", "format": "date"}
_LIBRARY_ITEM_FIELDS = {
    "owner_id": _nullable({"type": "string", "description": "the member (mbr_…) who keeps it right"}),
    "review_by": _DATE,
    "reviewed_at": _nullable(_DATE_TIME),
    "stale": {"type": "boolean", "description": "past its review date: answers drawn from it "
              "ask for attention and are never auto-answered"},
    "version": {"type": "integer", "minimum": 1},
}
_KB_ENTRY = _object({"id": STRING, "question": _nullable(STRING), "answer": STRING},
                    ["id", "question", "answer"])
# What a knowledge entry's create (KnowledgeBaseItemInput) and PATCH (KnowledgeBaseItemChange) take.
_KB_INPUT_FIELDS: dict[str, Any] = {
    "answer": {"type": "string", "minLength": 1, "maxLength": 100_000},
    "question": _nullable({"type": "string", "maxLength": 10_000}),
    "title": _nullable({"type": "string", "maxLength": 500}),
    "tags": {"type": "array", "maxItems": 50,
             "items": {"type": "string", "minLength": 1, "maxLength": 500}},
    "source": _nullable({"type": "string", "maxLength": 500}),
    "yes_no": _nullable({"type": "boolean"}),
}
LIBRARY_SCHEMAS: dict[str, Any] = {
    "KnowledgeBaseItemChange": _object({
        **_KB_INPUT_FIELDS,
        "owner_id": _nullable({"type": "string"}),
        "review_by": _DATE,
    }, closed=True, description="absent fields keep their values"),
    "KnowledgeBaseItemVersion": _object({
        "version": {"type": "integer", "minimum": 1},
        "current": {"type": "boolean"},
        "question": _nullable(STRING), "answer": STRING, "title": _nullable(STRING),
        "tags": {"type": "array", "items": STRING}, "source": _nullable(STRING),
        "yes_no": _nullable({"type": "boolean"}), "owner_id": _nullable(STRING),
        "review_by": _nullable(_DATE),
        "written_by": _nullable({"type": "string", "description": "member id; null: an import "
                                 "or the system"}),
        "written_at": _DATE_TIME,
        "replaced_by": _nullable(STRING), "replaced_at": _nullable(_DATE_TIME),
        "change": _nullable({"enum": ["updated", "deleted", "merged"]}),
    }, ["version", "current", "question", "answer", "written_by", "written_at", "change"]),
    "KnowledgeBaseDuplicates": _object({
        "state": {"enum": ["fresh", "outdated", "computing"]},
        "running": {"type": "boolean", "description": "a background run is under way"},
        "computed_at": _nullable(_DATE_TIME),
        "entries": _nullable({"type": "integer", "minimum": 0}),
        "seconds": _nullable({"type": "number"}),
        "pairs": {"type": "array", "items": _object({
            "kind": {"enum": ["duplicate", "conflict"]},
            "reason": STRING,
            "similarity": {"type": "number", "minimum": 0, "maximum": 1},
            "items": {"type": "array", "items": _KB_ENTRY, "minItems": 2, "maxItems": 2},
        }, ["kind", "reason", "similarity", "items"])},
        "pagination": _ref("Pagination"),
    }, ["state", "running", "computed_at", "pairs", "pagination"]),
}


SCHEMAS: dict[str, Any] = {
    "Error": _object({"error": _object({
        "code": STRING, "message": STRING, "details": {"type": "array", "items": STRING},
    }, ["code", "message"])}, ["error"]),
    "MemberRef": _object({"id": {"type": "integer"}, "name": STRING,
                          "email": {"type": "string", "format": "email"}}, ["id", "name", "email"]),
    "RfpStats": _object({
        "total_items": {"type": "integer", "minimum": 0},
        "needs_input_items": {"type": "integer", "minimum": 0},
        "auto_answered_items": {"type": "integer", "minimum": 0},
        "approved_items": {"type": "integer", "minimum": 0},
        "overall_completion_percentage": {"type": "integer", "minimum": 0, "maximum": 100},
    }, ["total_items", "needs_input_items", "auto_answered_items", "approved_items",
        "overall_completion_percentage"]),
    "Rfp": _object({
        "id": STRING,
        "web_link": {"type": "string", "format": "uri"},
        "title": STRING,
        "description": _nullable(STRING),
        "deadline": _nullable({"type": "string", "format": "date"}),
        "state": {"enum": ["new", "items_generated", "processing_items", "needs_input", "approved"]},
        "framework": _nullable({"enum": _FRAMEWORKS}),
        "portal_url": _nullable({"type": "string", "format": "uri"}),
        "context": _nullable(STRING),
        "created_at": _DATE_TIME,
        "updated_at": _DATE_TIME,
        "owner": _ref("MemberRef"),
        "stats": _ref("RfpStats"),
    }, ["id", "web_link", "title", "description", "deadline", "state", "framework", "portal_url",
        "created_at", "updated_at", "owner", "stats"]),
    "RfpInput": _object({
        "title": {"type": "string", "minLength": 1, "maxLength": 500},
        "description": _nullable({"type": "string", "maxLength": 100_000}),
        "deadline": _nullable({"type": "string", "format": "date"}),
        "framework": _nullable({"enum": _FRAMEWORKS}),
        "portal_url": _nullable({"type": "string", "format": "uri", "maxLength": 2048}),
        "context": _nullable({"type": "string", "maxLength": 100_000}),
        "items": {"type": "array", "description": "create only; at most 5,000", "items": _object(
            {"question": {"type": "string", "minLength": 1},
             "section": _nullable({"type": "string", "maxLength": 500})},
            ["question"], closed=True)},
    }, closed=True, description="create: title required; update: absent fields stay unchanged"),
    "RfpItem": _object({
        "id": STRING, "rfp_id": STRING, "question": STRING, "answer": _nullable(STRING),
        "state": {"enum": ["pending", "auto_answered", "needs_input", "approved", "discarded"]},
        "confidence": _nullable({"type": "number", "minimum": 0, "maximum": 1}),
        "section": _nullable(STRING), "position": {"type": "integer"},
        "created_at": _DATE_TIME, "updated_at": _DATE_TIME,
        "question_id": _nullable({"type": "string", "description":
                                  "the question answering (or that answered) the item"}),
        "knowledge_item_id": _nullable({"type": "string", "description":
                                        "the knowledge-base entry its answer was saved as"}),
        "assignee": _nullable({**_ref("MemberRef"), "description":
                               "the member who answers it (their user id, name, e-mail)"}),
    }, ["id", "rfp_id", "question", "answer", "state", "confidence", "section", "position",
        "created_at", "updated_at", "assignee"]),
    "AssignedRfpItem": {"allOf": [_ref("RfpItem"), _object({
        "rfp": _object({"id": STRING, "title": STRING,
                        "deadline": _nullable({"type": "string", "format": "date"})},
                       ["id", "title", "deadline"], description="the item's RFP"),
    }, ["rfp"])], "description": "an item as the item API shows it, with its RFP"},
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
            "assignee_id": _nullable({"type": "integer", "minimum": 1, "description":
                                      "assign the item to this member (their user id: admin or "
                                      "member of the account; they are e-mailed a link to it "
                                      "unless they assign themselves, at most "
                                      "mail.assignment_mails_per_hour an hour from one "
                                      "assigner); null unassigns"}),
        },
    },
    "RfpItemImportReport": {
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
                "answer_column": _nullable({"type": "string", "description": "where an export "
                                            "with format=original writes answers"}),
                "kept_for_export": {"type": "boolean", "description": "the file was kept for "
                                    "format=original (not past library.max_kept_file_bytes)"},
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
    "Pagination": _object({
        "current_page": {"type": "integer", "minimum": 1},
        "total_pages": {"type": "integer", "minimum": 0},
        "total_count": {"type": "integer", "minimum": 0,
                        "description": "exact up to 10,000; at 10,000 the response carries "
                                       "X-Total-Count-Capped: true (search, whose pages stop "
                                       "at 500)"},
        "items_per_page": {"type": "integer"},
        "from": _nullable({"type": "integer"}),
        "to": _nullable({"type": "integer"}),
    }, ["current_page", "total_pages", "total_count", "items_per_page", "from", "to"]),
    # -- questions (SPEC 2.2, plus references and the RFP link) --
    "QuestionReference": _object({
        "id": STRING, "external_id": _nullable(STRING), "title": _nullable(STRING),
        "score": {"type": "number"},
        "version": _nullable({"type": "integer", "description": "the entry's version it used"}),
    }, ["id", "external_id", "title", "score"],
        description="a knowledge-base entry the answer drew on"),
    "Question": _object({
        "id": STRING,
        "question": STRING,
        "answer": _nullable(STRING),
        "verbatim_answer": {"type": "boolean"},
        "state": {"enum": ["new", "ready_to_answer", "references_fetched", "answered",
                           "confidence_calculated", "complete"]},
        "confidence": _nullable({"type": "number", "minimum": 0, "maximum": 1}),
        "confidence_rationale": _nullable(STRING),
        "answer_detail_level": {"enum": ["low", "normal", "high"]},
        "custom_prompt": _nullable(STRING),
        "requires_attention": {"type": "boolean"},
        "attention_points": _nullable({"type": "array", "items": STRING}),
        "sufficient_context": _nullable({"type": "boolean"}),
        "created_at": _DATE_TIME,
        "updated_at": _DATE_TIME,
        "user": _ref("MemberRef"),
        "references": {"type": "array", "items": _ref("QuestionReference")},
        "rfp_id": _nullable(STRING),
        "rfp_item_id": _nullable(STRING),
    }, ["id", "question", "answer", "verbatim_answer", "state", "confidence",
        "confidence_rationale", "answer_detail_level", "custom_prompt", "requires_attention",
        "attention_points", "sufficient_context", "created_at", "updated_at", "user",
        "references", "rfp_id", "rfp_item_id"]),
    "AskInput": _object({
        "question": _object({
            "question": {"type": "string", "minLength": 1, "maxLength": 10_000},
            "custom_prompt": _nullable({"type": "string", "maxLength": 4_000}),
            "answer_detail_level": _nullable({"enum": [0, 1, 2]}),
        }, ["question"], closed=True),
        "custom_prompt": _nullable({"type": "string", "maxLength": 4_000}),
        "answer_detail_level": _nullable({"enum": [0, 1, 2],
                                          "description": "0 low, 1 normal (default), 2 high"}),
    }, ["question"], closed=True,
        description="the options may sit inside the question object or beside it, not both "
                    "with different values"),
    "ReviewInput": _object({
        "approved": {"type": "boolean"},
        "answer": _nullable({"type": "string", "minLength": 1, "maxLength": 100_000,
                             "description": "the corrected answer; absent: the drafted one"}),
    }, ["approved"], closed=True),
    # -- knowledge base --
    "KnowledgeBaseItem": _object({
        "id": STRING, "question": _nullable(STRING), "answer": STRING, "title": _nullable(STRING),
        "tags": {"type": "array", "items": STRING}, "source": _nullable(STRING),
        "external_id": _nullable(STRING),
        "yes_no": _nullable({"type": "boolean", "description": "the entry's own Yes (true) or No"}),
        "created_at": _DATE_TIME, "updated_at": _DATE_TIME,
        **_LIBRARY_ITEM_FIELDS,
    }, ["id", "question", "answer", "title", "tags", "source", "external_id", "yes_no",
        "created_at", "updated_at", *_LIBRARY_ITEM_FIELDS]),
    "KnowledgeBaseItemInput": _object({
        **_KB_INPUT_FIELDS,
    }, ["answer"], closed=True),
    "ImportReport": _object({
        "imported": {"type": "integer", "minimum": 0},
        "created": {"type": "integer", "minimum": 0},
        "updated": {"type": "integer", "minimum": 0},
        "rejected": {"type": "array", "items": _object(
            {"row": {"type": "integer", "description": "the header is row 1"}, "reason": STRING},
            ["row", "reason"])},
        "ignored_columns": {"type": "array", "items": STRING},
    }, ["imported", "created", "updated", "rejected", "ignored_columns"]),
    # -- members (SPEC 2.3), invitations, tokens --
    "Member": _object({
        "id": STRING, "email": {"type": "string", "format": "email"}, "name": STRING,
        "first_name": STRING, "last_name": STRING, "role": _ROLE,
        "roles": {"type": "array", "items": _ROLE}, "owner": {"type": "boolean"},
        "created_at": _DATE_TIME, "updated_at": _DATE_TIME,
    }, ["id", "email", "name", "first_name", "last_name", "role", "roles", "owner", "created_at",
        "updated_at"]),
    "UserInput": _object({"user": _object({
        "email": {"type": "string", "format": "email"},
        "password": {"type": "string", "format": "password", "minLength": 12, "maxLength": 128},
        "first_name": _nullable({"type": "string", "maxLength": 100}),
        "last_name": _nullable({"type": "string", "maxLength": 100}),
        "role": _nullable(_ROLE),
        "terms_of_service": {"anyOf": [{"const": True}, STRING],
                             "description": 'true or "accepted" ("true", "1", "yes")'},
    }, ["email", "password", "terms_of_service"], closed=True)}, ["user"]),
    "Invitation": _object({
        "id": STRING, "email": {"type": "string", "format": "email"}, "role": _ROLE,
        "state": {"enum": ["pending", "accepted", "revoked", "expired"]},
        "expires_at": _DATE_TIME, "created_at": _DATE_TIME,
        "account_name": {"type": "string", "description": "GET of an invitation link only"},
    }, ["id", "email", "role", "state", "expires_at", "created_at"]),
    "InvitationInput": _object({"invitation": _object({
        "email": {"type": "string", "format": "email"}, "role": _nullable(_ROLE),
    }, ["email"], closed=True)}, ["invitation"]),
    "InvitationAcceptance": _object({
        "password": {"type": "string", "format": "password", "minLength": 12, "maxLength": 128},
        "terms_of_service": {"anyOf": [{"const": True}, STRING]},
        "first_name": _nullable({"type": "string", "maxLength": 100}),
        "last_name": _nullable({"type": "string", "maxLength": 100}),
    }, ["password", "terms_of_service"], closed=True),
    "SignIn": _object({
        "email": STRING, "password": {"type": "string", "format": "password"},
        "scopes": {"type": "array", "minItems": 1, "items": {"enum": ["read", "write"]}},
        "account_id": _nullable({"type": "string", "description": "default: the oldest membership"}),
    }, ["email", "password"], closed=True),
    "Token": _object({
        "token": {"type": "string", "description": "rfpk_…; shown once"},
        "scopes": {"type": "array", "items": {"enum": ["read", "write"]}},
        "expires_at": _nullable(_DATE_TIME), "account_id": STRING, "member_id": STRING,
    }, ["token", "scopes", "expires_at", "account_id", "member_id"]),
    "ConfirmationInput": _object({
        "token": STRING,
        "password": {"type": "string", "format": "password", "minLength": 12, "maxLength": 128,
                     "description": "the password the user chooses; required unless they have "
                                    "one of their own"},
    }, ["token"], closed=True),
    "Confirmation": _object({
        "confirmed": {"const": True}, "email": {"type": "string", "format": "email"},
        "confirmed_at": _DATE_TIME,
    }, ["confirmed", "email", "confirmed_at"]),
    # -- accounts hardening (issue 17): member roles, token management, passwords --
    "RoleChange": _object({"member": _object({"role": _ROLE}, ["role"], closed=True)}, ["member"]),
    "TokenInfo": _object({
        "id": {"type": "integer"}, "member_id": STRING,
        "scopes": {"type": "array", "items": {"enum": ["read", "write"]}},
        "source": {"enum": ["sign_in", "cli", "demo"]},
        "state": {"enum": ["live", "expired", "revoked"]},
        "created_at": _DATE_TIME, "expires_at": _nullable(_DATE_TIME),
        "revoked_at": _nullable(_DATE_TIME),
    }, ["id", "member_id", "scopes", "source", "state", "created_at", "expires_at", "revoked_at"]),
    "PasswordChange": _object({
        "current_password": {"type": "string", "format": "password"},
        "new_password": {"type": "string", "format": "password", "minLength": 12, "maxLength": 128},
    }, ["current_password", "new_password"], closed=True),
    "PasswordResetRequest": _object({"email": STRING}, ["email"], closed=True),
    "PasswordReset": _object({
        "token": STRING,
        "password": {"type": "string", "format": "password", "minLength": 12, "maxLength": 128},
    }, ["token", "password"], closed=True),
    "Health": _object({"status": {"const": "ok"}}, ["status"]),
    "Ready": _object({"status": {"const": "ready"}, "database": {"const": "ok"}},
                     ["status", "database"]),
}

_ID = {"name": "id", "in": "path", "required": True, "schema": STRING}
_TOKEN = {"name": "token", "in": "path", "required": True, "schema": STRING}
_PAGE = {"name": "page", "in": "query", "required": False,
         "schema": {"type": "integer", "minimum": 1}}
_IDEMPOTENCY_KEY = {"name": "Idempotency-Key", "in": "header", "required": False,
                    "description": "a retry with the same key returns the first question",
                    "schema": {"type": "string", "minLength": 1, "maxLength": 255}}
_LAST_EVENT_ID = {"name": "Last-Event-ID", "in": "header", "required": False,
                  "description": "a reconnecting client's last event id (1-6, or the state's "
                                 "name): only the events after it are sent; other values are "
                                 "ignored",
                  "schema": {"type": "string"}}
_BEARER = [{"bearer": []}]
# Conditional writes (service/web/etags.py): a record's ETag, and the If-Match a PATCH may send.
_ETAG = {"ETag": {"description": "the record's version: send it as If-Match to change this "
                                 "version alone", "schema": STRING}}
_IF_MATCH = {"name": "If-Match", "in": "header", "required": False,
             "description": "the ETag of the version read (or *): the change applies only while "
                            "the record is still that version, else 412 and nothing is written",
             "schema": {"type": "string"}}
_PRECONDITION = _error("If-Match names another version than the record's: it changed since it "
                       "was read (precondition_failed; the current ETag in ETag)", _ETAG)


def _op(op_id: str, summary: str, responses: dict, *, security: list | None = None,
        params: list | None = None, body: dict | None = None,
        body_content: dict | None = None) -> dict:
    op: dict[str, Any] = {"operationId": op_id, "summary": summary, "responses": responses,
                          "security": security if security is not None else _BEARER}
    if params:
        op["parameters"] = params
        op["responses"] = {"400": _error("a NUL character (%00) in the path or query "
                                         "(parameter_invalid)"), **responses}
    if body or body_content:
        op["requestBody"] = {"required": True,
                             "content": body_content or {JSON: {"schema": body}}}
        op["responses"] = {**_BODY_ERRORS, **responses}
    if op["security"]:
        op["responses"] = {**_AUTH_ERRORS, **op["responses"]}
    elif body or body_content:  # a public route that writes: the database may be unavailable too
        op["responses"] = {"503": _AUTH_ERRORS["503"], **op["responses"]}
    return op


def _wrapped(key: str, schema: dict) -> dict:
    return {"type": "object", "required": [key], "properties": {key: schema}}


def _text(media: str, description: str) -> dict:
    return {"description": description, "content": {media: {"schema": STRING}}}


_ITEM_ID = {"name": "item_id", "in": "path", "required": True, "schema": {"type": "string"}}
_XLSX = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"


def _query(name: str, description: str, schema: dict | None = None) -> dict:
    return {"name": name, "in": "query", "required": False, "description": description,
            "schema": schema or {"type": "string"}}


_WRITEBACK_PARAMS = [  # export?format=original (issue 20)
    _query("answers", "approved (default): only approved answers are written; drafted: every "
           "drafted answer too", {"enum": ["approved", "drafted"]}),
    _query("unanswered", "text written into the answer cells left without an answer "
           "(default: left as they are)", {"type": "string", "maxLength": 200}),
    _query("answer_column", "the column letter answers go into, instead of the one detected at "
           "import"),
]


def _workflow_paths() -> dict[str, Any]:
    """Items, import, answering, review and export (service/workflow.py)."""
    item = _ref("RfpItem")
    no_rfp = _error("no such RFP in this account")
    create = _op("create_rfp_items", "add one item, or a list, after the RFP's last", {
        "201": _json({"anyOf": [item, _wrapped("rfp_items", {"type": "array", "items": item})]},
                     "the item (for rfp_item), or {rfp_items: [...]} (for rfp_items)"),
        "404": no_rfp,
        "422": _error("an invalid item, more than 5,000 in one request, or more than the 20,000 "
                      "an RFP holds (validation_failed)")}, params=[_ID],
        body={"anyOf": [_wrapped("rfp_item", _ref("RfpItemInput")),
                        _wrapped("rfp_items", {"type": "array", "items": _ref("RfpItemInput")})]})
    upload = _op("import_rfp_items", "import a CSV or XLSX questionnaire as items, in file order", {
        "201": _json(_ref("RfpItemImportReport"), "what was imported and every row skipped, with why"),
        "400": _error("a malformed option (parameter_invalid)"), "404": no_rfp,
        "408": _error("the upload did not arrive within server.upload_timeout_seconds "
                      "(request_timeout)"),
        "413": _error("the file is larger than server.max_upload_bytes, or over a limit of "
                      "[uploads] (rows, columns, cells, items, zip parts, parse time or memory; "
                      "the message names it)"),
        "422": _error("no question column (the columns found are named), no questions, "
                      "unknown sheet, an unreadable file, or more items than the 20,000 an "
                      "RFP holds")},
        params=[_ID,
                _query("sheet", "sheet name; default: the first with a question-like header"),
                _query("question_column", "header name or column letter"),
                _query("section_column", "header name or column letter"),
                _query("header_row", "1-based header row; 0 = none; default: detected",
                       {"type": "integer", "minimum": 0}),
                _query("answer_column", "header name or column letter answers are written back "
                       "into (export?format=original); default: detected")])
    upload["requestBody"] = {"required": True, "content": {
        "text/csv": {"schema": {"type": "string"}},
        _XLSX: {"schema": {"type": "string", "format": "binary"}},
        "multipart/form-data": {"schema": {"type": "object", "required": ["file"], "properties": {
            "file": {"type": "string", "format": "binary"}}}},
    }}
    answer = _op("answer_rfp", "answer every pending item through the question pipeline", {
        "202": _json(_ref("AnswerStarted"), "answering started (items already in flight are "
                     "not asked or charged again)"),
        "403": _error("no active subscription (usage_blocked, even with no item pending), "
                      "not enough credits for every item, or for max_items (usage_blocked), or a "
                      "viewer"),
        "404": no_rfp}, params=[_ID],
        body={"type": "object", "properties": {
            "answer_detail_level": {"enum": [0, 1, 2]},
            "custom_prompt": _nullable({"type": "string"}),
            "max_items": _nullable({
                "type": "integer", "minimum": 1, "maximum": 20_000,
                "description": "answer at most this many pending items, the first by position "
                               "(what the credits pay for); default: every pending item"})}})
    answer["requestBody"]["required"] = False
    return {
        "/api/v1/rfps/{id}/rfp_items": {"post": create},
        "/api/v1/rfps/{id}/rfp_items/import": {"post": upload},
        "/api/v1/rfps/{id}/rfp_items/{item_id}": {
            "get": _op("get_rfp_item", "read one item", {
                "200": _json(item, "the item", _ETAG), "404": _error("no such item in this RFP")},
                params=[_ID, _ITEM_ID]),
            "patch": _op("review_rfp_item", "edit, approve, discard or reopen an item", {
                "200": _json(item, "the reviewed item", _ETAG),
                "404": _error("no such item in this RFP"), "412": _PRECONDITION,
                "422": _error("approving without an answer, saving an unapproved answer, "
                              "an assignee_id who is not an admin or member of the account, "
                              "or an invalid field")},
                params=[_ID, _ITEM_ID, _IF_MATCH], body=_wrapped("rfp_item", _ref("RfpItemReview"))),
        },
        "/api/v1/rfps/{id}/answer": {"post": answer},
        "/api/v1/rfps/{id}/export": {"get": _op("export_rfp", "the RFP's items as a file", {
            "200": {"description": "attachment: question, answer, state, confidence, section",
                    "content": {"text/csv": {"schema": {"type": "string"}},
                                _XLSX: {"schema": {"type": "string", "format": "binary"}}}},
            "400": _error("format is not csv, xlsx or original, or a write-back option is "
                          "invalid (parameter_invalid)"), "404": no_rfp,
            "422": _error("format=original without a kept questionnaire, without an answer "
                          "column, with answers of more than uploads.max_text_chars characters, "
                          "or a file the parse workers' limits refuse to write back"),
            "503": _error("the database is unavailable, or the account's exports kept every turn "
                          "(server.export_workers) busy for server.export_wait_seconds; retry "
                          "after Retry-After seconds (service_unavailable)")},
            params=[_ID, _query("format", "csv (default), xlsx, or original: the imported "
                                "questionnaire with the answers written into their cells",
                                {"enum": ["csv", "xlsx", "original"]}),
                    *_WRITEBACK_PARAMS])},
    }


def _library_paths() -> dict[str, Any]:
    """Library care (issue 20): review, versions, duplicates, merges."""
    kb = _error("no such knowledge base item in this account (not_found)")
    item = _ref("KnowledgeBaseItem")
    paths = {
        "/api/v1/knowledge_base_items/{id}": {
            "patch": _op("update_knowledge_base_item", "change an item (its previous version is "
                         "kept)", {"200": _json(item, "the changed item", _ETAG), "404": kb,
                                   "412": _PRECONDITION,
                                   "422": _error("an invalid field, or an owner who is not a "
                                                 "member of the account")},
                         params=[_ID, _IF_MATCH], body=_wrapped("knowledge_base_item",
                                                     _ref("KnowledgeBaseItemChange")))},
        "/api/v1/knowledge_base_items/{id}/reviewed": {"post": _op(
            "review_knowledge_base_item", "mark an item reviewed: next review one review period "
            "away (or review_by)", {"200": _json(item, "the reviewed item"), "404": kb},
            params=[_ID], body=_object({"review_by": _DATE}, closed=True))},
        "/api/v1/knowledge_base_items/{id}/versions": {"get": _op(
            "knowledge_base_item_versions", "an item's versions, newest first, paginated (also "
            "of an item since deleted or merged)", {
                "200": _json(_page_of("versions", "KnowledgeBaseItemVersion"), "one page"),
                "400": _PAGE_INVALID, "404": kb}, params=[_ID, _PAGE])},
        "/api/v1/knowledge_base_items/{id}/merge": {"post": _op(
            "merge_knowledge_base_items", "merge a duplicate into this item: questions and RFP "
            "items that cited either cite this one", {
                "200": _json(_object({"knowledge_base_item": item, "merged_id": STRING,
                                      "questions_repointed": {"type": "integer", "minimum": 0}},
                                     ["knowledge_base_item", "merged_id", "questions_repointed"]),
                             "merged"),
                "404": kb, "422": _error("duplicate_id missing, the same item, or not in this "
                                         "account")},
            params=[_ID], body=_object({"duplicate_id": STRING}, ["duplicate_id"], closed=True))},
        "/api/v1/knowledge_base_items/duplicates": {"get": _op(
            "knowledge_base_duplicates", "near-duplicate entries and conflicts (Yes vs No, "
            "different numbers), from the last background run; a run starts when there is none "
            "or entries changed since", {
                "200": _json(_ref("KnowledgeBaseDuplicates"), "one page of the findings (100 pairs, "
                             "conflicts first; a run keeps the first 10,000)"),
                "400": _error("refresh is not true or false, or page is not a page number of the "
                              "first 10,000 pairs (parameter_invalid)"),
                "403": _error("the token lacks the read scope; or refresh=true without the write "
                              "scope (insufficient_scope) or by a viewer (forbidden)")},
            params=[_query("refresh", "true: start a new run now (needs the write scope and the "
                           "admin or member role)", {"enum": ["true", "false"]}), _PAGE])},
    }
    paths["/api/v1/knowledge_base_items/{id}/reviewed"]["post"]["requestBody"]["required"] = False
    return paths


def _webhook_audit_paths() -> dict[str, Any]:
    """Webhook endpoints, their deliveries, and the audit log (issue 21; docs/webhooks.md)."""
    from ..domain.webhooks import EVENT_TYPES

    SCHEMAS.update({
        "WebhookEndpoint": _object({
            "id": STRING, "url": {"type": "string", "format": "uri"},
            "event_types": {"type": "array", "items": {"enum": list(EVENT_TYPES)}},
            "description": _nullable(STRING), "enabled": {"type": "boolean"},
            "disabled_reason": _nullable({"type": "string", "description":
                                          "why the service disabled it (persistent failure)"}),
            "secret": {"type": "string", "description": "whsec_…; only in the 201 of create"},
            "created_at": _DATE_TIME, "updated_at": _DATE_TIME,
        }, ["id", "url", "event_types", "description", "enabled", "disabled_reason",
            "created_at", "updated_at"]),
        "WebhookEndpointInput": _object({"webhook_endpoint": _object({
            "url": {"type": "string", "format": "uri", "maxLength": 2048},
            "event_types": {"type": "array", "minItems": 1, "items": {"enum": list(EVENT_TYPES)}},
            "description": _nullable({"type": "string", "maxLength": 500}),
            "enabled": {"type": "boolean"},
        }, closed=True)}, ["webhook_endpoint"]),
        "WebhookDelivery": _object({
            "id": {"type": "integer"}, "event_id": STRING, "event_type": {"enum": list(EVENT_TYPES)},
            "record_id": STRING, "state": {"enum": ["pending", "delivered", "failed"]},
            "attempts": {"type": "integer", "minimum": 0},
            "next_attempt_at": _nullable(_DATE_TIME), "retry_until": _nullable(_DATE_TIME),
            "last_attempt_at": _nullable(_DATE_TIME), "last_status": _nullable({"type": "integer"}),
            "last_error": _nullable(STRING), "last_response": _nullable(STRING),
            "delivered_at": _nullable(_DATE_TIME), "created_at": _DATE_TIME,
        }, ["id", "event_id", "event_type", "record_id", "state", "attempts", "created_at"]),
        "AuditEvent": _object({
            "id": {"type": "integer"}, "occurred_at": _DATE_TIME,
            "actor": _object({"type": {"enum": ["member", "operator", "anonymous"]},
                              "id": _nullable(STRING), "label": _nullable(STRING)},
                             ["type", "id", "label"]),
            "action": STRING, "record_id": _nullable(STRING),
            "client_address": _nullable(STRING), "request_id": _nullable(STRING),
            "before": _nullable({"type": "object"}), "after": _nullable({"type": "object"}),
        }, ["id", "occurred_at", "actor", "action", "record_id", "before", "after"]),
    })
    endpoint = _ref("WebhookEndpoint")
    no_endpoint = _error("no such webhook endpoint in this account (not_found)")
    body = _ref("WebhookEndpointInput")
    delivery_id = {"name": "delivery_id", "in": "path", "required": True,
                   "schema": {"type": "string", "pattern": "^[0-9]+$"}}
    return {
        "/api/v1/webhook_endpoints": {
            "post": _op("create_webhook_endpoint", "register an endpoint (admin); its secret is "
                        "shown only here", {
                "201": _json(endpoint, "the endpoint, with its secret", _LOCATION),
                "422": _error("a URL that is not http(s) or names a private address, an "
                              "unknown event type, or an account that has "
                              "webhooks.max_endpoints_per_account endpoints already "
                              "(validation_failed)")}, body=body),
            "get": _op("list_webhook_endpoints", "the account's endpoints (admin)", {
                "200": _json(_page_of("webhook_endpoints", "WebhookEndpoint"), "one page"),
                "400": _PAGE_INVALID}, params=[_PAGE]),
        },
        "/api/v1/webhook_endpoints/{id}": {
            "get": _op("get_webhook_endpoint", "read an endpoint (admin)", {
                "200": _json(endpoint, "the endpoint"), "404": no_endpoint}, params=[_ID]),
            "patch": _op("update_webhook_endpoint", "change an endpoint; enabled: true resumes "
                         "its deliveries", {
                "200": _json(endpoint, "the endpoint"), "404": no_endpoint},
                params=[_ID], body=body),
            "delete": _op("delete_webhook_endpoint", "delete an endpoint and its deliveries", {
                "204": {"description": "deleted"}, "404": no_endpoint}, params=[_ID]),
        },
        "/api/v1/webhook_endpoints/{id}/deliveries": {"get": _op(
            "list_webhook_deliveries", "an endpoint's delivery log, newest first (admin)", {
                "200": _json(_page_of("deliveries", "WebhookDelivery"), "one page"),
                "400": _PAGE_INVALID, "404": no_endpoint}, params=[_ID, _PAGE])},
        "/api/v1/webhook_endpoints/{id}/deliveries/{delivery_id}/retry": {"post": _op(
            "retry_webhook_delivery", "send a failed (or delivered) delivery again now", {
                "202": _json(_ref("WebhookDelivery"), "pending again"),
                "400": _error("the delivery id is not a number (parameter_invalid)"),
                "404": _error("no such endpoint or delivery (not_found)"),
                "409": _error("the delivery is still pending (conflict)")},
            params=[_ID, delivery_id])},
        "/api/v1/audit_events": {"get": _op("list_audit_events", "the audit log, newest first "
                                            "(admin)", {
            "200": _json(_page_of("audit_events", "AuditEvent"), "one page"),
            "400": _error("page, since or until invalid (parameter_invalid)")},
            params=[_query("actor", "member id (mbr_…) or operator name"),
                    _query("record_id", "the record acted on"),
                    _query("action", "e.g. rfp.created"),
                    _query("since", "RFC 3339 time, inclusive", _DATE_TIME),
                    _query("until", "RFC 3339 time, exclusive", _DATE_TIME), _PAGE])},
    }


def _account_paths() -> dict[str, Any]:
    """Member roles and removal, token lists and revocation, password change and reset."""
    no_member = _error("no such member in this account")
    admin_guard = _error("the owner, or the account's last admin, cannot be changed or removed "
                         "(forbidden, conflict)")
    return {
        "/api/v1/members/{id}": {
            "patch": _op("change_member_role", "change a member's role (admin); it applies to "
                         "their tokens at once, which keep their scopes (a viewer may ask)", {
                "200": _json(_ref("Member"), "the member"), "404": no_member,
                "409": admin_guard}, params=[_ID], body=_ref("RoleChange")),
            "delete": _op("remove_member", "remove a member (admin); their tokens stop working", {
                "204": {"description": "removed"}, "404": no_member, "409": admin_guard},
                params=[_ID]),
        },
        "/api/v1/members/{id}/tokens": {"get": _op(
            "list_member_tokens", "a member's tokens (one's own, or any for an admin)", {
                "200": _json(_object({"tokens": {"type": "array", "items": _ref("TokenInfo")}},
                                     ["tokens"]), "newest first; never the token itself"),
                "404": no_member}, params=[_ID])},
        "/api/v1/tokens/{id}": {"delete": _op(
            "revoke_token", "revoke a token (one's own, or any for an admin; a write token either way)", {
                "200": _json(_ref("TokenInfo"), "the revoked token"),
                "404": _error("no such token in this account")}, params=[_ID])},
        "/api/v1/users/password": {"post": _op(
            "change_password", "change one's password; the user's other tokens are revoked", {
                "200": _json(_object({"changed": {"const": True}}, ["changed"]), "changed"),
                "422": _error("current_password wrong, or new_password invalid"),
                "429": _RATE_LIMITED}, body=_ref("PasswordChange"))},
        "/api/v1/users/password/reset": {"post": _op(
            "request_password_reset", "e-mail a one-time reset link (same answer for any address)", {
                "202": _json(_object({"requested": {"const": True}, "message": STRING},
                                     ["requested"]), "accepted")},
            security=[], body=_ref("PasswordResetRequest"))},
        "/api/v1/users/password/reset/complete": {"post": _op(
            "reset_password", "set a new password with the e-mailed link; every token of the "
            "user is revoked", {
                "200": _json(_object({"reset": {"const": True}}, ["reset"]), "reset"),
                "404": _error("unknown, used or expired link")},
            security=[], body=_ref("PasswordReset"))},
    }


def document() -> dict[str, Any]:
    not_found = {
        "rfp": _error("no such RFP in this account (not_found)"),
        "question": _error("no such question in this account (not_found)"),
        "kb": _error("no such knowledge base item in this account (not_found)"),
    }
    paths = {
        "/healthz": {"get": _op("healthz", "liveness", {"200": _json(_ref("Health"), "alive")},
                                security=[])},
        "/readyz": {"get": _op("readyz", "readiness: the database answers", {
            "200": _json(_ref("Ready"), "ready"), "503": _error("the database is unreachable")},
            security=[])},
        "/api/v1/rfps": {"post": _op("create_rfp", "create an RFP (with items)", {
            "201": _json(_ref("Rfp"), "the created RFP, with context", _LOCATION)},
            body=_wrapped("rfp", _ref("RfpInput")))},
        "/api/v1/rfps/search": {"get": _op("search_rfps", "search RFPs (case-insensitive substring)", {
            "200": _json(_page_of("rfps", "Rfp"), "matching RFPs (without context), newest first, "
                         "20 per page", {"X-Total-Count-Capped": _header(
                             "true when total_count stopped at 10,000", {"const": "true"})}),
            "400": _error("query missing or blank (parameter_missing); query over 200 characters "
                          "or without 3 letters or digits in a row, or page invalid or past 500 "
                          "(parameter_invalid); each message names the limit"),
            "503": _error("the database is unavailable, or a search statement passed the search "
                          "time limit (250 ms) and was stopped (service_unavailable)")},
            params=[{"name": "query", "in": "query", "required": True,
                     "description": "case-insensitive substring of title or description; at most "
                                    "200 characters, holding at least 3 letters or digits in a "
                                    "row (what the trigram index needs); %, _ and \\ are literal",
                     "schema": {"type": "string", "minLength": 3, "maxLength": 200}},
                    {**_PAGE, "description": "at most 500: results stop at the first 10,000",
                     "schema": {"type": "integer", "minimum": 1, "maximum": 500}}])},
        "/api/v1/rfps/{id}": {
            "get": _op("get_rfp", "read an RFP", {
                "200": _json(_ref("Rfp"), "the RFP, with context"), "404": not_found["rfp"]},
                params=[_ID]),
            "patch": _op("update_rfp", "change an RFP's fields", {
                "200": _json(_ref("Rfp"), "the updated RFP"), "404": not_found["rfp"]},
                params=[_ID], body=_wrapped("rfp", _ref("RfpInput"))),
        },
        "/api/v1/rfps/{id}/rfp_items": {"get": _op("list_rfp_items", "an RFP's items", {
            "200": _json(_page_of("rfp_items", "RfpItem"), "one page of items in order"),
            "400": _error("page, or assignee, invalid; query over 200 characters or without 3 "
                          "letters or digits in a row (parameter_invalid)"),
            "404": not_found["rfp"],
            "503": _error("the database is unavailable, or a search statement passed the search "
                          "time limit (250 ms) and was stopped (service_unavailable)")},
            params=[_ID, _PAGE, _query("assignee", "only the items assigned to this member: me, "
                                       "none (the unassigned ones) or a user id"),
                    _query("query", "only the items whose question or answer holds this "
                           "case-insensitive substring (as GET /api/v1/rfps/search's query: at "
                           "most 200 characters, at least 3 letters or digits in a row; %, _ and "
                           "\\ are literal); absent or blank: every item",
                           {"type": "string", "maxLength": 200})])},
        "/api/v1/rfp_items": {"get": _op(
            "list_assigned_rfp_items", "one member's items across the account's RFPs", {
                "200": _json(_page_of("rfp_items", "AssignedRfpItem"), "one page of the items "
                             "assigned to the member in the account's RFPs (never another "
                             "account's), by the RFP's deadline (none last), then the RFP, then "
                             "position; 20 per page"),
                "400": _error("assignee missing (parameter_missing); assignee other than me or a "
                              "user id (none included), state not one of needs_input, review or "
                              "approved, or page invalid (parameter_invalid)")},
            params=[{"name": "assignee", "in": "query", "required": True,
                     "description": "whose items: me, or a member's user id",
                     "schema": {"type": "string", "pattern": "^(me|[1-9][0-9]{0,18})$"}},
                    _query("state", "only the items in this state, as the RFP page's filters: "
                           "needs_input, review (answered, awaiting review: auto_answered) or "
                           "approved; absent: every state, discarded included",
                           {"enum": ["needs_input", "review", "approved"]}),
                    _PAGE])},
        "/api/v1/questions": {"post": _op("ask_question", "ask a question (charged; answered "
                                          "asynchronously)", {
            "202": _json(_ref("Question"), "accepted, in state new; poll it or follow its events",
                         {**_LOCATION, **_RATE_HEADERS}),
            "403": _error("out of credits or no active subscription (usage_blocked); or the "
                          "token lacks the write scope (insufficient_scope)"),
            "422": _error("validation_failed, with one detail per failure (also a reused "
                          "Idempotency-Key with a different question)", _RATE_HEADERS)},
            params=[_IDEMPOTENCY_KEY], body=_ref("AskInput"))},
        "/api/v1/questions/{id}": {"get": _op("get_question", "read a question", {
            "200": _json(_ref("Question"), "the question; answer set once state is complete"),
            "404": not_found["question"]}, params=[_ID])},
        "/api/v1/questions/{id}/events": {"get": _op(
            "question_events", "the question's state changes as Server-Sent Events", {
                "200": {"description": "one event per state (event: <state>; id: the state's "
                        "position in the order new, ready_to_answer, references_fetched, "
                        "answered, confidence_calculated, complete: 1 to 6; data: the Question "
                        "as JSON, or {id, state} for a state passed unseen); the current state "
                        "first (with Last-Event-ID: every state after that one); the stream "
                        "ends after complete",
                        "content": {"text/event-stream": {"schema": _object({
                            "event": STRING, "id": STRING,
                            "data": {"type": "string", "contentMediaType": JSON},
                        })}}},
                "204": {"description": "Last-Event-ID says complete was seen: nothing more will "
                        "come (an EventSource stops reconnecting)"},
                "404": not_found["question"]}, params=[_ID, _LAST_EVENT_ID])},
        "/api/v1/questions/{id}/review": {"post": _op(
            "review_question", "approve or correct an answer: it becomes a knowledge base item", {
                "200": _json(_ref("KnowledgeBaseItem"),
                             "the item an earlier review of this question saved, updated", _LOCATION),
                "201": _json(_ref("KnowledgeBaseItem"), "the new knowledge base item", _LOCATION),
                "404": not_found["question"]}, params=[_ID], body=_ref("ReviewInput"))},
        "/api/v1/knowledge_base_items": {
            "post": _op("create_knowledge_base_item", "add a knowledge base item", {
                "201": _json(_ref("KnowledgeBaseItem"), "the created item", _LOCATION)},
                body=_wrapped("knowledge_base_item", _ref("KnowledgeBaseItemInput"))),
            "get": _op("list_knowledge_base_items", "the account's knowledge base, newest first", {
                "200": _json(_page_of("knowledge_base_items", "KnowledgeBaseItem"), "one page"),
                "400": _error("page, stale or owner invalid (parameter_invalid)")},
                params=[_PAGE, _query("stale", "true: only the items past their review date, "
                                      "most overdue first", {"enum": ["true", "false"]}),
                        _query("owner", "only this member's items (a member id, or me)")]),
        },
        "/api/v1/knowledge_base_items/import": {"post": _op(
            "import_knowledge_base_items", "import a CSV (question, answer, title, tags, source, id, "
            "yes_no); rows with an id update the item imported with it", {
                "200": _json(_ref("ImportReport"), "what was created, updated and rejected")},
            body_content={
                "text/csv": {"schema": STRING},
                "multipart/form-data": {"schema": _object(
                    {"file": {"type": "string", "format": "binary"}}, ["file"])},
            })},
        "/api/v1/knowledge_base_items/{id}": {
            "get": _op("get_knowledge_base_item", "read a knowledge base item", {
                "200": _json(_ref("KnowledgeBaseItem"), "the item", _ETAG), "404": not_found["kb"]},
                params=[_ID]),
            "delete": _op("delete_knowledge_base_item", "delete a knowledge base item (with If-Match, "
                          "only the version named)", {
                "204": {"description": "deleted"}, "404": not_found["kb"], "412": _PRECONDITION},
                params=[_ID, _IF_MATCH]),
        },
        "/api/v1/users": {"post": _op("create_user", "create a user (admin); a confirmation "
                                      "e-mail is sent", {
            "201": _json(_ref("Member"), "the created member (SPEC 2.3)"),
            "403": _error("insufficient_scope, forbidden (not admin) or usage_blocked"),
            "409": _error("the same member was added at the same moment (conflict); retry"),
            "429": _ACCOUNT_MAILS},
            body=_ref("UserInput"))},
        "/api/v1/users/confirmation": {
            "post": _op("confirm_email", "confirm an e-mail address and choose the password", {
                "200": _json(_ref("Confirmation"), "confirmed"),
                "422": _error("password missing or invalid; the link stays usable"),
                "404": _error("unknown, used or expired link")},
                security=[], body=_ref("ConfirmationInput")),
            "get": _op("confirm_email_link", "the link from the confirmation mail", {
                "200": _text("text/plain", "confirmed, or how to choose the password (a text "
                                           "for the browser)"),
                "400": _error("token missing (parameter_missing)"),
                "404": _error("unknown, used or expired link")}, security=[],
                params=[{"name": "token", "in": "query", "required": True, "schema": STRING}]),
        },
        "/api/v1/tokens": {"post": _op("create_token", "sign in: e-mail and password to a token", {
            "201": _json(_ref("Token"), "the token, shown once"),
            "401": _error("wrong e-mail or password (unauthorized)"),
            "403": _error("e-mail not confirmed (email_unconfirmed), not a member, or a password "
                          "an administrator chose (forbidden: reset it)"),
            "429": _RATE_LIMITED}, security=[], body=_ref("SignIn"))},
        "/api/v1/invitations": {"post": _op("create_invitation", "invite someone (admin)", {
            "201": _json(_ref("Invitation"), "the invitation; the link goes out by e-mail"),
            "403": _error("insufficient_scope, forbidden (not admin) or usage_blocked"),
            "409": _error("the same change was made at the same moment (conflict); retry"),
            "429": _ACCOUNT_MAILS},
            body=_ref("InvitationInput")),
            "get": _op("list_invitations", "the invitations waiting for their invitee (admin); "
                       "an expired one shows as expired until it is sent again or revoked", {
                           "200": _json(_page_of("invitations", "Invitation"),
                                        "one page of pending invitations, newest first"),
                           "400": _PAGE_INVALID,
                           "403": _error("insufficient_scope or forbidden (not admin)")},
                       params=[_PAGE])},
        "/api/v1/invitations/{id}/revoke": {"post": _op(
            "revoke_invitation", "withdraw a pending invitation (admin): its link stops working", {
                "200": _json(_ref("Invitation"), "the invitation, now revoked"),
                # Not usage_blocked: withdrawing a link works without an active subscription.
                "403": _error("insufficient_scope or forbidden (not admin)"),
                "404": _error("no such invitation in this account"),
                "409": _error("the invitation was accepted or revoked already, or replaced by a "
                              "newer one to the same address, which the message names (conflict)")},
            params=[_ID])},
        "/api/v1/invitations/{token}": {"get": _op("get_invitation", "what an invitation offers", {
            "200": _json(_ref("Invitation"), "the invitation, with account_name"),
            "404": _error("unknown link")}, security=[], params=[_TOKEN])},
        "/api/v1/invitations/{token}/accept": {"post": _op(
            "accept_invitation", "accept an invitation: a confirmed user and membership", {
                "201": _json(_ref("Member"), "the new member"),
                "404": _error("unknown, accepted, replaced or expired invitation"),
                "409": _error("already a member of this account (conflict)"),
                "429": _RATE_LIMITED},
            security=[], params=[_TOKEN], body=_ref("InvitationAcceptance"))},
        "/api/v1/members": {"get": _op("list_members", "the account's members", {
            "200": _json(_page_of("members", "Member"), "one page of members"),
            "400": _PAGE_INVALID}, params=[_PAGE])},
        "/api/v1/openapi.json": {"get": _op("openapi", "this description", {
            "200": _json({"type": "object", "required": ["openapi", "paths"]}, "OpenAPI 3.1")},
            security=[])},
        "/docs/init.js": {"get": _op("docs_init", "Swagger UI start-up script", {
            "200": _text("application/javascript", "JavaScript")}, security=[])},
        "/docs/assets/{name}": {"get": _op("docs_asset", "Swagger UI assets (vendored)", {
            "200": {"description": "the asset", "content": {
                "application/javascript": {"schema": STRING}, "text/css": {"schema": STRING}}},
            "404": _error("no such asset")},
            security=[], params=[{"name": "name", "in": "path", "required": True,
                                  "schema": {"enum": sorted(_ASSETS)}}])},
        "/docs": {"get": _op("docs", "browsable API documentation (Swagger UI, served locally)", {
            "200": _text("text/html", "HTML")}, security=[])},
        "/metrics": {"get": _op("metrics", "Prometheus metrics (only with [metrics] enabled)", {
            "200": _text("text/plain", "Prometheus text format"),
            "404": _error("metrics are not enabled (not_found)")}, security=[])},
    }
    for path, operations in {**_workflow_paths(), **_webhook_audit_paths()}.items():
        paths[path] = {**paths.get(path, {}), **operations}
    for path, operations in _account_paths().items():
        paths[path] = {**paths.get(path, {}), **operations}
    for path, operations in _library_paths().items():
        paths[path] = {**paths.get(path, {}), **operations}
    return {
        "openapi": "3.1.0",
        "info": {"title": "RFP response service", "version": "1",
                 "description": "Errors always have the Error shape; see README."},
        "servers": [{"url": "/"}],
        "paths": paths,
        "components": {
            "schemas": {**SCHEMAS, **LIBRARY_SCHEMAS},
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer",
                                           "description": "rfpk_… API token"}},
        },
    }


@public
async def get_openapi(request: web.Request) -> web.Response:
    return json_response(document())


_DOCS_HTML = """<!doctype html>
<html><head><meta charset="utf-8"><title>RFP response service API</title>
<link rel="stylesheet" href="/docs/assets/swagger-ui.css"></head>
<body><div id="ui"></div><script src="/docs/assets/swagger-ui-bundle.js"></script>
<script src="/docs/init.js"></script></body></html>"""
# validatorUrl null: Swagger UI would otherwise show a badge fetched from a public validator.
_DOCS_INIT = 'SwaggerUIBundle({url: "/api/v1/openapi.json", dom_id: "#ui", validatorUrl: null});'
# As the web app's pages (pages/common.py SECURITY_HEADERS): no framing (a probe found /docs
# sent without), scripts and styles only from the service; Swagger UI's icons are data: images.
_DOCS_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'; "
        "base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}


@public
async def get_docs(request: web.Request) -> web.Response:
    return web.Response(text=_DOCS_HTML, content_type="text/html", headers=_DOCS_HEADERS)


@public
async def get_docs_init(request: web.Request) -> web.Response:
    # A separate script, so a strict Content-Security-Policy need not allow inline scripts.
    return web.Response(text=_DOCS_INIT, content_type="application/javascript",
                        headers={"X-Content-Type-Options": "nosniff"})


@public
async def get_docs_asset(request: web.Request) -> web.StreamResponse:
    name = request.match_info["name"]
    if name not in _ASSETS:
        raise NotFound("no such asset")
    return web.FileResponse(
        SWAGGER_UI_DIR / name,
        headers={"Content-Type": _ASSETS[name], "Cache-Control": "public, max-age=86400",
                 "X-Content-Type-Options": "nosniff"},
    )

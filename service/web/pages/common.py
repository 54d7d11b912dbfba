"""What every page shares: the session cookie, CSRF, the access policy (`page`), rendering, and
failures shown as pages in the app's look (404, 403, the error page)."""

from __future__ import annotations

import functools
import logging
import re
import secrets
import tempfile
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote, urlsplit

import aiohttp_jinja2
import jinja2
import markupsafe
from aiohttp import BodyPartReader, web
from aiohttp.http_exceptions import HttpProcessingError
from multidict import MultiDict

from ... import db
from ...domain import bands
from ...domain.errors import (
    NOT_SAVED,
    Forbidden,
    InvalidMultipart,
    MethodNotAllowed,
    PayloadTooLarge,
    ServiceError,
    Unauthorized,
    ValidationFailed,
)
from ...domain.sessions import Session, csrf_matches, find_session
from ...domain.tokens import ROLES, Principal
from ...logs import redact_url
from ..auth import (
    PRINCIPAL,
    REQUEST_CONNECTION,
    Handler,
    Policy,
    check,
    connection,
    full_body_limit,
    holding_connection,
    public,
    take_share,
)
from ..body import MAX_PARTS_BEFORE_FILE, Upload, arriving
from ..errors import status_of
from ..frontdoor import WRAPPER_HEADERS
from ..keys import CONFIG, SHARES
from ..protocol import undecodable_body
from ..telemetry import REQUEST_ID
from .fields import in_words, said_in_words

log = logging.getLogger(__name__)

COOKIE = "rfp_session"
# The sign-in form's own CSRF token (double submit): there is no session yet to hold one.
SIGN_IN_COOKIE = "rfp_sign_in"
CSRF_FIELD = "csrf_token"
CSRF_HEADER = "X-CSRF-Token"

SESSION = web.RequestKey("web_session", Session)

# Sent with every page: no framing, scripts and styles only from the service itself, forms only
# to it; no referrer outside it (page URLs carry RFP ids).
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'; "
        "base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


def setup(app: web.Application) -> None:
    env = aiohttp_jinja2.setup(
        app,
        loader=jinja2.PackageLoader("service.web.pages", "templates"),
        autoescape=jinja2.select_autoescape(default=True),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.globals["band_labels"] = bands.LABELS
    env.filters["entry_links"] = entry_links


# A knowledge-base entry's id as the answering code names it in attention points ("… the nearest
# entry is “MFA policy” (kb_…)"; "Drawn from knowledge-base entry kb_…, which is past …").
_ENTRY_ID = re.compile(r"\bkb_[0-9A-Za-z]{22}\b")


def entry_links(text: str) -> markupsafe.Markup:
    """`text` escaped, each entry id in it a link to the entry's page: a reviewer reads an attention
    point naming an entry and opens it, where the id alone meant nothing. (Ids hold nothing that
    escaping changes, so they are found in the escaped text.)"""
    return markupsafe.Markup(_ENTRY_ID.sub(
        lambda found: f'<a href="/kb/{found.group(0)}">{found.group(0)}</a>', str(markupsafe.escape(text))))


def render(
    request: web.Request, template: str, context: Mapping[str, Any] | None = None, *, status: int = 200
) -> web.Response:
    session = request.get(SESSION)
    full = {
        "who": session.principal if session else None,
        "csrf": session.csrf_token if session else "",
        "path": request.path,
        # The header names the account and offers the others when the user has several.
        "current_account": session.account_name if session else "",
        "other_accounts": session.memberships > 1 if session else False,
        "switched": session is not None and request.path == "/rfps" and "switched" in request.query,
        **(context or {}),
    }
    text = aiohttp_jinja2.render_string(template, request, full)
    return web.Response(text=text, status=status, content_type="text/html", charset="utf-8")


def principal(request: web.Request) -> Principal:
    return request[SESSION].principal


def may_write(who: Principal | None) -> bool:
    """Whether the page shows write controls: the API's rule for RFPs, items and knowledge."""
    return who is not None and who.role in ("admin", "member")


def see_other(location: str) -> web.HTTPSeeOther:
    return web.HTTPSeeOther(location)


def same_origin(request: web.Request) -> bool:
    """A POST's Origin (or, without one, Referer) is this service: a cross-site form is refused
    even before its missing CSRF token is noticed. No header at all passes (old clients); the
    CSRF token still has to be right."""
    sent = request.headers.get("Origin") or request.headers.get("Referer")
    if not sent:
        return True
    return _this_site(request, sent)


def _this_site(request: web.Request, url: str) -> bool:
    """Whether an absolute URL is on this service (as the request reached it, or web_base_url)."""
    parts = urlsplit(url)
    origin = f"{parts.scheme}://{parts.netloc}"
    base = urlsplit(request.app[CONFIG].server.web_base_url)
    return origin in (f"{request.scheme}://{request.host}", f"{base.scheme}://{base.netloc}")


_CAME_FROM_MAX = 2000  # characters of a way back kept (a page's own URLs are far shorter)

# The longest page address carried through the sign-in (?next=) and back: the site's own are under
# 100 characters but for an RFP page's search term (at most 200 characters: rfp_ways.BACK_MAX). A
# longer one went into the redirects whole, a Location past what proxies and clients read.
NEXT_MAX = 2_600


def came_from(request: web.Request) -> str | None:
    """The page of this site a request came from (its Referer, path and query): the page of the
    form that was sent, or of the link followed. An error page leads back there; it led to "Your
    RFPs" only, away from the form to correct. None without one, for another site's, one too long
    to carry back, or the failed page itself."""
    sent = request.headers.get("Referer")
    if not sent or not _this_site(request, sent):
        return None
    parts = urlsplit(sent)
    back = parts.path + (f"?{parts.query}" if parts.query else "")
    if not back.startswith("/") or back.startswith("//") or "\\" in back or len(back) > _CAME_FROM_MAX:
        return None
    if request.method == "GET" and back == request.path_qs:
        return None
    return back


async def read_form(request: web.Request) -> Any:
    """A posted form (at most client_max_size), within server.body_timeout_seconds as every
    body (service/web/body.py): a client sending a byte at a time must not hold a handler.

    Line breaks come back as LF. A browser sends every line break of a textarea as CRLF (HTML's
    form encoding), so text stored as sent differs from what was shown (an unchanged answer would
    read as rewritten, and take over an item still being answered) and from what the API stores."""
    try:
        form = await arriving(request, request.post(), "the form")
    except (ValueError, LookupError, HttpProcessingError) as exc:
        # A multipart type without its boundary, a charset Python does not know or that does not
        # decode the body (UnicodeDecodeError is a ValueError): the client's fault, not a 500.
        raise ServiceError(f"the form could not be read: {str(exc)[:200]}") from None
    return MultiDict(
        (name, value.replace("\r\n", "\n") if isinstance(value, str) else value)
        for name, value in form.items()
    )


def shown_version(form: Any) -> tuple[str, ...] | None:
    """The version of the record a form was shown with (its hidden `shown` field, the record's
    tag: domain/preconditions.py), so that the write refuses a record changed since; None for a
    form without one (a page opened before forms sent it), which writes as the API does."""
    shown = form.get("shown")
    return (shown,) if isinstance(shown, str) and shown else None


async def _sent_csrf(request: web.Request) -> str | None:
    if CSRF_HEADER in request.headers:
        return request.headers[CSRF_HEADER]
    if request.content_type == "application/x-www-form-urlencoded":
        form = await read_form(request)  # aiohttp keeps it: the handler's request.post() reuses it
        value = form.get(CSRF_FIELD)
        return value if isinstance(value, str) else None
    return None


async def check_form_origin(request: web.Request, session: Session, *, token: bool = True) -> None:
    """A POST of a signed-in session: sent from this site, carrying the session's CSRF token."""
    if not same_origin(request):
        raise Forbidden("this form was sent from another site; it was refused")
    if token and not csrf_matches(session, await _sent_csrf(request)):
        raise Forbidden("the form's security token is missing or stale; reload the page and try again")


def page(
    *, roles: Iterable[str] = ROLES, write: bool = False, signed_in: bool = True,
    multipart: bool = False, hold_connection: bool = True,
) -> Any:
    """A page's access policy: a live session (else to the sign-in page, or 401 for a POST), the
    member's role as in the API (`write` needs admin or member unless `roles` says otherwise),
    and for every POST a same-origin request carrying the session's CSRF token (a `multipart`
    page checks it itself, with `read_upload`). Failures become pages in the app's look.

    A GET holds one pooled connection from the session lookup to its response; one that streams
    to the client (an export) says `hold_connection=False` and takes connections as it needs
    them, or a client that never reads would keep a pooled connection from everyone."""
    policy = Policy(scope="write" if write else "read", roles=frozenset(roles))

    def mark(handler: Handler) -> Handler:
        async def admitted(request: web.Request) -> web.StreamResponse:
            async with connection(request) as conn:
                session = await find_session(conn, request.cookies.get(COOKIE))
            if session is not None:
                request[SESSION] = session
                full_body_limit(request)  # (the front door set the public one: pages are public to it)
                # Also as the API's principal, so that a page may hand the request to an API
                # view's function (the export is the API's).
                request[PRINCIPAL] = session.principal
            if signed_in:
                if session is None:
                    if request.method == "GET":
                        wanted = request.path_qs
                        raise see_other(f"/signin?next={quote(wanted, safe='')}"
                                        if len(wanted) <= NEXT_MAX else "/signin")
                    raise Unauthorized("you are not signed in (or your session has ended)")
                if request.method == "POST":
                    await check_form_origin(request, session, token=not multipart)
                check(policy, session.principal)
            if session is None or REQUEST_CONNECTION not in request:
                return await handler(request)
            # A held connection: within the member's share of the pool, as the API's requests.
            member = session.principal.member_id
            await take_share(request, member)
            try:
                return await handler(request)
            finally:
                request.app[SHARES].give_back(member)

        @functools.wraps(handler)
        async def run(request: web.Request) -> web.StreamResponse:
            request[WRAPPER_HEADERS] = SECURITY_HEADERS  # a stream's too (the CSV export)
            try:
                if request.method == "GET" and hold_connection:
                    # One pooled connection for the session lookup and the page's queries, as
                    # the API's body-less requests do (auth.connection hands it on); a POST
                    # takes its own after its body, which may arrive slowly.
                    async with holding_connection(request):
                        response = await admitted(request)
                else:
                    response = await admitted(request)
            except web.HTTPException as exc:
                if exc.status >= 400:
                    response = error_page(request, _service_error(exc))
                else:
                    raise
            except ServiceError as exc:
                response = error_page(request, exc)
            except Exception as exc:
                response = failure_page(request, exc)
            if not response.prepared:
                response.headers.update(SECURITY_HEADERS)
            return response

        return public(run)

    return mark


def _service_error(exc: web.HTTPException) -> ServiceError:
    if isinstance(exc, web.HTTPRequestEntityTooLarge):
        return PayloadTooLarge("the form is larger than the service accepts")
    error = ServiceError(exc.reason or "request failed")
    error.status = exc.status
    return error


_TITLES = {
    400: "That request could not be used", 401: "Please sign in", 403: "Not allowed",
    404: "Page not found", 405: "Not a page", 409: "Not possible as things stand",
    412: "Changed since you opened it",
    413: "Too large", 415: "Wrong kind of file",
    422: "Please correct the form", 429: "Too many attempts", 503: "Temporarily unavailable",
}


def error_page(request: web.Request, error: ServiceError) -> web.Response:
    status = status_of(error)
    if status == 404:
        # Whether the record is someone else's or nobody's, the page says the same.
        return not_found(request)
    title = _TITLES.get(status, "Something went wrong")
    if status == 422 and request.method == "GET":
        title = "That could not be done"  # a link followed (an export): no form to correct
    # A refused query parameter's message starts with its name ("page must be …"); a validation
    # without a message of its own says the API's "the record could not be saved" (no record
    # for a question asked), where the page says what to do.
    message = said_in_words(error.message, names_first=error.code == "parameter_invalid")
    if error.code == "validation_failed" and error.message == NOT_SAVED:
        message = "Correct what is listed below, then send the form again."
    if error.code == "precondition_failed":  # a form's `shown` version (shown_version)
        message = ("Someone changed this after the page was shown to you, so nothing was saved."
                   " Go back to copy what you wrote, then reload the page to see their change"
                   " and make yours again.")
    response = render(request, "error.html", {
        "status": status, "title": title, "message": message,
        "details": in_words(error.details),
        "request_id": request.get(REQUEST_ID, ""), "back": came_from(request),
    }, status=status)
    response.headers.update(error.headers)
    response.headers.pop("WWW-Authenticate", None)  # a page, not a bearer challenge
    if error.headers.get("Connection") == "close":  # as the API's (errors.render)
        response.force_close()
    return response


def not_found(request: web.Request) -> web.Response:
    return render(request, "not_found.html", {"request_id": request.get(REQUEST_ID, "")}, status=404)


async def _with_session(request: web.Request) -> None:
    """The request's session, if signed in, for the navigation of a page no handler of the web
    app serves (no route's 404 and 405)."""
    async with connection(request) as conn:
        session = await find_session(conn, request.cookies.get(COOKIE))
    if session is not None:
        request[SESSION] = session


async def not_found_page(request: web.Request) -> web.Response:
    """The 404 page for a path no route has (service/web/frontdoor.py no_route), with the
    navigation when a session is signed in."""
    await _with_session(request)
    response = not_found(request)
    response.headers.update(SECURITY_HEADERS)
    return response


async def form_address_page(request: web.Request, allowed: str) -> web.Response:
    """The 405 page for a browser opening an address only a form is sent to (frontdoor.py
    no_route): opening it (the address bar, the history of a page that was a form's response)
    asks it with GET. The API's words ("GET is not allowed here") are for the API."""
    await _with_session(request)
    response = error_page(request, MethodNotAllowed(
        "This address is where a form is sent; it cannot be opened as a page. Go back to the page"
        " the form is on and send it from there.", headers={"Allow": allowed}))
    response.headers.update(SECURITY_HEADERS)
    return response


def logged_failure(request: web.Request, exc: BaseException) -> str:
    """What kind of failure `exc` is, as the API's errors.error_response classifies it
    ("unavailable", "conflict" or "error"), logged for the operator as such."""
    where = (request.method, redact_url(request.path), request.get(REQUEST_ID))
    if db.database_unavailable(exc):
        log.warning("database unavailable in page %s %s (request id %s): %r", *where, exc)
        return "unavailable"
    if (conflict := db.transaction_conflict(exc)) is not None:
        log.warning("transaction rolled back in page %s %s (request id %s): %s %s", *where, conflict,
                    getattr(conflict, "detail", None) or "")
        return "conflict"
    log.error("unhandled error in page %s %s (request id %s)", *where, exc_info=exc)
    return "error"


_FAILED = {
    "unavailable": (503, "The database is unavailable for a moment. Please try again shortly."),
    "conflict": (503, "This conflicted with another change made at the same moment and was rolled"
                      " back. Please try again."),
    "error": (500, "Something went wrong on our side. It has been logged."),
}


def failure_page(request: web.Request, exc: BaseException) -> web.Response:
    """The page for an exception no handler turned into a ServiceError (logged_failure)."""
    if (refused := undecodable_body(request, exc)) is not None:
        return error_page(request, refused)
    status, message = _FAILED[logged_failure(request, exc)]
    return render(request, "error.html", {
        "status": status, "title": _TITLES.get(status, "Something went wrong"), "message": message,
        "details": [], "request_id": request.get(REQUEST_ID, ""), "back": came_from(request),
    }, status=status)


async def read_upload(request: web.Request, limit: int) -> tuple[dict[str, str], Upload]:
    """A multipart form with a file: its text fields and the file (spooled, at most `limit`
    bytes, within server.upload_timeout_seconds as the API's uploads). The session's CSRF token
    must arrive as a field before the file (the forms put it first), so nothing is read from a
    forged upload past its first part."""
    return await arriving(request, _read_upload(request, limit), "the upload", upload=True)


async def _read_upload(request: web.Request, limit: int) -> tuple[dict[str, str], Upload]:
    if not request.content_type.startswith("multipart/"):
        if not csrf_matches(request[SESSION], await _sent_csrf(request)):
            raise Forbidden("the form's security token is missing or stale; reload the page")
        raise ValidationFailed(["file: send the form as multipart/form-data"])
    fields: dict[str, str] = {}
    session = request[SESSION]
    try:
        reader = await request.multipart()
        parts = 0
        while (part := await reader.next()) is not None:
            parts += 1
            if parts > MAX_PARTS_BEFORE_FILE + 1:  # the file may come after that many fields
                raise InvalidMultipart(
                    f"the form has more than {MAX_PARTS_BEFORE_FILE} fields before its file")
            if not isinstance(part, BodyPartReader):
                continue
            if part.name == "file":
                if not csrf_matches(session, fields.get(CSRF_FIELD) or request.headers.get(CSRF_HEADER)):
                    raise Forbidden("the form's security token is missing or stale; reload the page")
                spool = tempfile.SpooledTemporaryFile(max_size=4 * 1024 * 1024)
                size = 0
                while chunk := await part.read_chunk(64 * 1024):
                    size += len(chunk)
                    if size > limit:
                        spool.close()
                        raise PayloadTooLarge(f"the file is larger than the {_size(limit)} accepted")
                    spool.write(chunk)
                spool.seek(0)
                media = part.headers.get("Content-Type")
                return fields, Upload(spool, media.split(";")[0].strip() if media else None, part.filename)
            if len(fields) < 20:
                fields[part.name or ""] = (await part.read(decode=True))[:10_000].decode("utf-8", "replace")
            else:
                await part.release()
    except (ValueError, HttpProcessingError) as exc:
        raise InvalidMultipart(f"the form is malformed: {str(exc)[:200]}") from None
    if not csrf_matches(session, fields.get(CSRF_FIELD)):
        raise Forbidden("the form's security token is missing or stale; reload the page")
    raise ValidationFailed(["file: choose a file to upload"])


def _size(limit: int) -> str:
    """A size as a person reads it: "50 MB" (MiB, as a file manager counts), or bytes below one."""
    if limit < 1_048_576:
        return f"{limit:,} bytes"
    return f"{limit / 1_048_576:,.1f}".removesuffix(".0") + " MB"


def new_sign_in_token() -> str:
    return secrets.token_urlsafe(24)


def band_of(request: web.Request, confidence: float | None, requires_attention: bool) -> str:
    return bands.band(confidence, requires_attention, request.app[CONFIG].questions)

"""Sign in and sign out: the API's sign-in rule (domain/members.py `sign_in`: confirmed users
only, the same throttling), then a server-side session in a cookie."""

from __future__ import annotations

import hmac
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web

from ...domain import audit
from ...domain.errors import ServiceError
from ...domain.members import authenticate, signed_in_actor
from ...domain.passwords import client_key
from ...domain.sessions import end_session, start_session
from ..actors import actor
from ..auth import connection
from ..keys import CONFIG, PASSWORDS, POOL
from .common import (
    COOKIE,
    NEXT_MAX,
    SESSION,
    SIGN_IN_COOKIE,
    check_form_origin,
    error_page,
    new_sign_in_token,
    page,
    read_form,
    render,
    same_origin,
    see_other,
)


def _safe_next(raw: str | None) -> str:
    """Where to go after signing in: a path of this site only (never //elsewhere)."""
    # No "//host", no backslash, no whitespace or control characters (a browser drops a tab or
    # newline inside a URL, so "/\t/host" would become "//host").
    # No longer than any page address of the site (NEXT_MAX): the Location would be unreadable.
    if (raw and raw.startswith("/") and not raw.startswith("//") and "\\" not in raw
            and len(raw) <= NEXT_MAX and raw.isprintable() and not any(ch.isspace() for ch in raw)):
        return raw
    return "/rfps"


# The pages of one record, by their path's first part: the kind of record its second part names.
_RECORD_PAGES = {"rfps": "rfp", "kb": "knowledge_item", "ask": "question"}


def _record_of(next_path: str) -> tuple[str, str] | None:
    """The record (kind, id) whose page `next_path` is (/rfps/{id}…, /kb/{id}…, /ask/{id}…), for
    the sign-in to open it in the account that holds it; None for any other page."""
    parts = urlsplit(next_path).path.split("/")
    if len(parts) > 2 and parts[1] in _RECORD_PAGES and parts[2]:
        return _RECORD_PAGES[parts[1]], parts[2]
    return None


def _secure(request: web.Request) -> bool:
    return request.secure or request.app[CONFIG].server.web_base_url.startswith("https://")


def signed_out_form(
    request: web.Request, template: str, context: dict[str, Any], *, path: str, status: int = 200
) -> web.Response:
    """A form sent without a session (sign-in, accepting an invitation, a password reset): its
    own CSRF token, in a field and in a cookie for `path` only (double submit)."""
    token = new_sign_in_token()
    response = render(request, template, {**context, "sign_in_token": token}, status=status)
    response.set_cookie(
        SIGN_IN_COOKIE, token, httponly=True, secure=_secure(request), samesite="Strict",
        path=path, max_age=3600,
    )
    return response


def signed_out_form_sent(request: web.Request, form: Any) -> bool:
    """Whether a signed-out form came back with its token and from this site. The double-submit
    cookie alone is forged by a page on a sibling host (evil.example.com writes a cookie for
    .example.com, and its POST is same-site, so SameSite does not stop it)."""
    sent = str(form.get("sign_in_token", ""))
    cookie = request.cookies.get(SIGN_IN_COOKIE, "")
    return bool(sent) and hmac.compare_digest(sent.encode(), cookie.encode()) and same_origin(request)


def signed_in_response(
    request: web.Request, cookie_value: str, location: str, lifetime: float | None = None
) -> web.HTTPSeeOther:
    """The redirect that starts a session: its cookie set, for the session's `lifetime` in
    seconds (web.session_ttl_hours when not given), rounded down so that it never outlives it."""
    response = see_other(location)
    if lifetime is None:
        lifetime = request.app[CONFIG].web.session_ttl_hours * 3600
    response.set_cookie(
        COOKIE, cookie_value, httponly=True, secure=_secure(request), samesite="Lax", path="/",
        max_age=int(lifetime),
    )
    return response


_NOTICES = {
    "signed_out": "You are signed out.",
    "reset": "Your new password is set: sign in with it.",
    "confirmed": "Your address is confirmed: sign in with your password.",
}


# Two refusals of the domain's sign-in rule whose API wording leaves a person at the form without a
# way on: one names an API route, the other does not say what to do. Only the words are the page's.
_SIGN_IN_WORDS = {
    "you are not a member of any account": (
        "This address is not a member of any account (any more). An administrator of your "
        "organisation can invite you again."),
    "this password was chosen by an administrator": (
        "This password was set by an administrator, not by you: choose your own with “Forgot your "
        "password?” below, then sign in with it."),
}


def _sign_in_words(message: str) -> str:
    return next((words for start, words in _SIGN_IN_WORDS.items() if message.startswith(start)), message)


def _sign_in_form(request: web.Request, *, email: str = "", error: str | None = None,
                  status: int = 200) -> web.Response:
    return signed_out_form(request, "signin.html", {
        "email": email, "error": error, "next": _safe_next(request.query.get("next")),
        "notice": None if error else _NOTICES.get(request.query.get("done", "")),
    }, path="/signin", status=status)


@page(signed_in=False)
async def get_sign_in(request: web.Request) -> web.StreamResponse:
    # Signed in already and sent here on the way to a page (a session ended in another tab, then
    # started again): that page. Without `next` the form, to sign in as someone else.
    if SESSION in request and "next" in request.query:
        raise see_other(_safe_next(request.query.get("next")))
    return _sign_in_form(request)


@page(signed_in=False)
async def post_sign_in(request: web.Request) -> web.StreamResponse:
    form = await read_form(request)
    email = str(form.get("email", ""))
    password = str(form.get("password", ""))
    # Sent from this site, as every signed-in form (a forged sign-in would sign the victim into
    # the forger's account).
    if not signed_out_form_sent(request, form):
        return _sign_in_form(
            request, email=email, status=403,
            error="The sign-in form had expired or came from another site. Please sign in again.",
        )
    if not email.strip() or not password:
        return _sign_in_form(request, email=email, status=422,
                             error="Enter your e-mail address and your password.")
    config = request.app[CONFIG]
    try:
        membership = await authenticate(
            request.app[POOL], request.app[PASSWORDS], config, email=email, password=password,
            account_id=None, client=client_key(request.remote), actor=actor(request, email),
            last_used=True,  # the account this user last worked in here (sessions.py)
            # unless the page to open is a record of another of the user's accounts: there
            holding=_record_of(_safe_next(str(form.get("next", "")))),
        )
    except ServiceError as exc:
        if exc.code == "validation_failed":  # the address is too long or holds NUL
            return _sign_in_form(request, email="", status=422,
                                 error="That is not a valid e-mail address.")
        if exc.code in ("unauthorized", "email_unconfirmed", "rate_limited", "forbidden"):
            response = _sign_in_form(request, email=email, error=_sign_in_words(exc.message),
                                     status=401 if exc.code == "unauthorized" else 403
                                     if exc.code != "rate_limited" else 429)
            if "Retry-After" in exc.headers:
                response.headers["Retry-After"] = exc.headers["Retry-After"]
            return response
        return error_page(request, exc)
    ttl = config.web.session_ttl_hours * 3600
    async with connection(request) as conn, conn.transaction():
        cookie_value = await start_session(conn, membership["id"], ttl)
        await audit.record(conn, signed_in_actor(actor(request, email), membership), "auth.signed_in",
                           record_id=membership["id"], after={"session": "web"})
    response = signed_in_response(request, cookie_value, _safe_next(str(form.get("next", ""))))
    response.del_cookie(SIGN_IN_COOKIE, path="/signin")
    raise response


@page(signed_in=False)
async def post_sign_out(request: web.Request) -> web.StreamResponse:
    """Ends the session. A session already over (expired, or ended elsewhere) has nothing to
    protect: its dead cookie goes all the same, rather than a 401 page that leaves it behind."""
    if SESSION in request:
        await check_form_origin(request, request[SESSION])
        async with connection(request) as conn:
            await end_session(conn, request.cookies.get(COOKIE))
    response = see_other("/signin?done=signed_out")  # the sign-in page then says so
    response.del_cookie(COOKIE, path="/")
    raise response

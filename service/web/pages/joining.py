"""Joining and recovering an account without a session: accepting an invitation
(`/invitations/{token}`, members.accept_invitation, then signed in), confirming the address of a
sign-in an administrator created (`/confirm?token=…`, members.confirm_email) and a forgotten password
(`/password/forgot` → members.request_password_reset, the e-mailed `/password/reset?token=…` →
members.reset_password). The API's rules and guards, through the same domain functions; each form
has the sign-in form's own CSRF token (account.signed_out_form), and a route's configured rate
limit is the API route's bucket, shared (as the Ask page shares ask_question's).

The links' secrets travel in the URL: the access log redacts `/invitations/…` and `token=…`
(service/logs.py redact_url), and pages send `Referrer-Policy: same-origin`, so no other site
receives them in a Referer; the reset form carries its token in the body."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from ...domain import audit
from ...domain.audit import Actor
from ...domain.convert import structure
from ...domain.errors import ServiceError
from ...domain.members import (
    ConfirmationInput,
    accept_invitation,
    confirm_email,
    confirmation_needs_password,
    password_reset_link_is_live,
    read_invitation,
    request_password_reset,
    reset_answer_time,
    reset_password,
    signed_in_actor,
)
from ...domain.passwords import client_key
from ...domain.sessions import end_session, find_session, start_session
from ..auth import connection
from ..keys import CONFIG, DELIVERER, MAIL_SENDER, PASSWORDS, POOL
from ..ratelimit import take_or_refuse
from ..telemetry import REQUEST_ID
from .account import signed_in_response, signed_out_form, signed_out_form_sent
from .common import COOKIE, SESSION, SIGN_IN_COOKIE, error_page, page, read_form, render, see_other
from .fields import in_words

_EXPIRED_FORM = "The form had expired or came from another site. Please try again."


def _anonymous(request: web.Request, label: str | None = None) -> Actor:
    """Whoever opened the link: nobody signed in as far as the audit log goes, even when the
    browser holds someone's session (an admin trying the link out)."""
    return Actor.anonymous(label, request.remote, request.get(REQUEST_ID))


async def _share_api_limit(request: web.Request, route: str) -> None:
    """The API route's configured rate limit (rate_limits.<route>), from the same bucket: the
    client address's, as the signed-out API route's, even when the browser holds a session."""
    limit = request.app[CONFIG].rate_limits.get(route)
    if limit is not None:
        await take_or_refuse(request, route, limit, by_address=True)


def _link_gone(request: web.Request, message: str, *, kind: str) -> web.Response:
    """An invitation or reset link that does not work (unknown, used, replaced, expired): what
    happened and what to do, never a 500 or a bare 404."""
    return render(request, "link_gone.html", {"message": message, "kind": kind}, status=404)


def _token_shaped(token: str) -> bool:
    """Whether a link's token is worth a look-up (the service's are 43 characters)."""
    return bool(token) and len(token) <= 200


def _with_retry_after(response: web.Response, error: ServiceError) -> web.Response:
    if "Retry-After" in error.headers:
        response.headers["Retry-After"] = error.headers["Retry-After"]
    return response


_STATUS = {"validation_failed": 422, "rate_limited": 429}


# -- invitations --------------------------------------------------------------------------------


def _invitation_form(
    request: web.Request, invitation: dict[str, Any], *, form: Any = None,
    error: str | None = None, details: list[str] | None = None, status: int = 200,
) -> web.Response:
    token = request.match_info["token"]
    expires = datetime.fromisoformat(str(invitation["expires_at"]).replace("Z", "+00:00"))
    return signed_out_form(request, "invitation.html", {
        "invitation": invitation, "token": token, "error": error, "details": details or [],
        "expires": expires.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC"),  # as the e-mail says it
        "first_name": str(form.get("first_name", "")) if form else "",
        "last_name": str(form.get("last_name", "")) if form else "",
    }, path="/invitations", status=status)


async def _invitation(request: web.Request) -> dict[str, Any] | None:
    async with connection(request) as conn:
        try:
            return await read_invitation(conn, request.match_info["token"])
        except ServiceError as exc:
            if exc.code == "not_found":
                return None
            raise


_INVITATION_STATES = {
    "accepted": "This invitation has already been accepted. Sign in with the password chosen then.",
    "revoked": ("This invitation was replaced by a newer one or withdrawn: use the link in the latest "
                "e-mail, or ask an administrator of the account to invite you again."),
    "expired": "This invitation has expired. Ask an administrator of the account to invite you again.",
}
_UNKNOWN_INVITATION = ("This invitation link is unknown. Check that it was copied whole, or ask an "
                       "administrator of the account to invite you again.")


@page(signed_in=False)
async def invitation_page(request: web.Request) -> web.StreamResponse:
    invitation = await _invitation(request)
    if invitation is None:
        return _link_gone(request, _UNKNOWN_INVITATION, kind="invitation")
    if invitation["state"] != "pending":
        return _link_gone(request, _INVITATION_STATES[invitation["state"]], kind="invitation")
    return _invitation_form(request, invitation)


@page(signed_in=False)
async def accept_invitation_page(request: web.Request) -> web.StreamResponse:
    form = await read_form(request)
    invitation = await _invitation(request)
    if invitation is None:
        return _link_gone(request, _UNKNOWN_INVITATION, kind="invitation")
    if invitation["state"] != "pending":
        return _link_gone(request, _INVITATION_STATES[invitation["state"]], kind="invitation")
    if not signed_out_form_sent(request, form):
        return _invitation_form(request, invitation, form=form, error=_EXPIRED_FORM, status=403)
    fields: dict[str, Any] = {
        "password": str(form.get("password", "")),
        "terms_of_service": str(form.get("terms_of_service", "")),
    }
    for name in ("first_name", "last_name"):
        if str(form.get(name, "")).strip():
            fields[name] = str(form.get(name))
    await _share_api_limit(request, "accept_invitation")
    try:
        member = await accept_invitation(
            request.app[POOL], request.app[PASSWORDS], request.app[CONFIG],
            request.match_info["token"], fields, client_key(request.remote), _anonymous(request),
        )
    except ServiceError as exc:
        if exc.code == "not_found":  # accepted, replaced or expired meanwhile
            return _link_gone(request, _sentence(exc.message), kind="invitation")
        if exc.code in _STATUS:
            return _with_retry_after(_invitation_form(
                request, invitation, form=form, error=_sentence(exc),
                details=in_words(exc.details), status=_STATUS[exc.code]), exc)
        return error_page(request, exc)
    request.app[DELIVERER].wake()  # member.created, if an endpoint wants it
    cookie_value = await _start_session(request, member.id)
    response = signed_in_response(request, cookie_value, "/rfps")
    response.del_cookie(SIGN_IN_COOKIE, path="/invitations")
    raise response


async def _start_session(request: web.Request, member_id: str) -> str:
    """Signed in as the member just made; a session the browser held before (someone else's,
    trying the link) ends."""
    ttl = request.app[CONFIG].web.session_ttl_hours * 3600
    async with connection(request) as conn, conn.transaction():
        if SESSION in request:
            await end_session(conn, request.cookies.get(COOKIE))
        cookie_value = await start_session(conn, member_id, ttl)
        session = await find_session(conn, cookie_value)
        assert session is not None  # just started, in this transaction
        who = session.principal
        membership = {"id": who.member_id, "email": who.email, "account_id": who.account_id}
        await audit.record(conn, signed_in_actor(_anonymous(request), membership), "auth.signed_in",
                           record_id=who.member_id, after={"session": "web"})
    return cookie_value


def _sentence(error: ServiceError | str) -> str:
    """An error's message as the form shows it; a validation's is its details, below this."""
    if isinstance(error, ServiceError):
        if error.code == "validation_failed":
            return "Please correct this:"
        error = error.message
    text = error[:1].upper() + error[1:]
    return text if text.endswith((".", ":")) else text + "."


# -- a forgotten password -----------------------------------------------------------------------


def _forgot_form(request: web.Request, *, email: str = "", error: str | None = None,
                 status: int = 200) -> web.Response:
    return signed_out_form(request, "password_forgot.html", {
        "email": email, "error": error, "sent": request.query.get("sent") == "1",
    }, path="/password", status=status)


@page(signed_in=False)
async def forgot_page(request: web.Request) -> web.StreamResponse:
    return _forgot_form(request)


@page(signed_in=False)
async def forgot(request: web.Request) -> web.StreamResponse:
    """The API's POST /users/password/reset: the same answer whether or not the address has a
    sign-in (and the same bucket per address), then a redirect, so a reload sends nothing."""
    form = await read_form(request)
    email = str(form.get("email", ""))
    if not signed_out_form_sent(request, form):
        return _forgot_form(request, email=email, error=_EXPIRED_FORM, status=403)
    await _share_api_limit(request, "request_password_reset")
    try:
        async with reset_answer_time(), connection(request) as conn:
            await request_password_reset(conn, request.app[CONFIG], {"email": email},
                                         _anonymous(request))
    except ServiceError as exc:
        if exc.code == "validation_failed":
            return _forgot_form(request, email=email, status=422,
                                error="Enter your e-mail address (at most 254 characters).")
        raise
    request.app[MAIL_SENDER].wake()
    raise see_other("/password/forgot?sent=1")


def _reset_form(request: web.Request, token: str, *, error: str | None = None,
                details: list[str] | None = None, status: int = 200) -> web.Response:
    return signed_out_form(request, "password_reset.html", {
        "token": token, "error": error, "details": details or [],
        "hours": request.app[CONFIG].members.password_reset_ttl_hours,
    }, path="/password", status=status)


_RESET_GONE = ("This password reset link is unknown, already used or expired: each link works "
               "once, for a limited time. Ask for a new one below.")


@page(signed_in=False)
async def reset_page(request: web.Request) -> web.StreamResponse:
    token = request.query.get("token", "")
    if not await _reset_link_works(request, token):
        return _link_gone(request, _RESET_GONE, kind="reset")
    return _reset_form(request, token)


async def _reset_link_works(request: web.Request, token: str) -> bool:
    if not _token_shaped(token):
        return False
    async with connection(request) as conn:
        return await password_reset_link_is_live(conn, token)


@page(signed_in=False)
async def reset(request: web.Request) -> web.StreamResponse:
    """The API's POST /users/password/reset/complete; then back to the sign-in page, which says
    the new password is set (every session and token of the user has ended)."""
    form = await read_form(request)
    token = str(form.get("token", ""))
    if not await _reset_link_works(request, token):
        return _link_gone(request, _RESET_GONE, kind="reset")
    if not signed_out_form_sent(request, form):
        return _reset_form(request, token, error=_EXPIRED_FORM, status=403)
    await _share_api_limit(request, "reset_password")
    try:
        await reset_password(request.app[POOL], request.app[PASSWORDS],
                             {"token": token, "password": str(form.get("password", ""))},
                             _anonymous(request))
    except ServiceError as exc:
        if exc.code == "not_found":
            return _link_gone(request, _RESET_GONE, kind="reset")
        if exc.code in _STATUS:
            return _with_retry_after(_reset_form(
                request, token, error=_sentence(exc), details=in_words(exc.details),
                status=_STATUS[exc.code]), exc)
        raise
    response = see_other("/signin?done=reset")
    response.del_cookie(SIGN_IN_COOKIE, path="/password")
    raise response


# -- the confirmation of a sign-in an administrator created ------------------------------------


_CONFIRM_GONE = ("This confirmation link is unknown, already used or expired: each link works once, "
                 "for a limited time. Ask an administrator of the account for a new one, or sign in "
                 "if you confirmed already.")


async def _confirmation_needs_password(request: web.Request, token: str) -> bool | None:
    """Whether a live link still needs a password chosen; None for a link that does not work."""
    if not _token_shaped(token):
        return None
    async with connection(request) as conn:
        try:
            return await confirmation_needs_password(conn, token)
        except ServiceError as exc:
            if exc.code == "not_found":
                return None
            raise


def _confirm_form(request: web.Request, token: str, needs_password: bool, *,
                  error: str | None = None, details: list[str] | None = None,
                  status: int = 200) -> web.Response:
    return signed_out_form(request, "confirm.html", {
        "token": token, "needs_password": needs_password, "error": error, "details": details or [],
    }, path="/confirm", status=status)


@page(signed_in=False)
async def confirm_page(request: web.Request) -> web.StreamResponse:
    """The e-mail's link: a form to choose the password (or, for a user with one of their own, to
    confirm); opening it changes nothing."""
    token = request.query.get("token", "")
    needs_password = await _confirmation_needs_password(request, token)
    if needs_password is None:
        return _link_gone(request, _CONFIRM_GONE, kind="confirm")
    return _confirm_form(request, token, needs_password)


@page(signed_in=False)
async def confirm(request: web.Request) -> web.StreamResponse:
    """The API's POST /users/confirmation; then to the sign-in page, which says so."""
    form = await read_form(request)
    token = str(form.get("token", ""))
    needs_password = await _confirmation_needs_password(request, token)
    if needs_password is None:
        return _link_gone(request, _CONFIRM_GONE, kind="confirm")
    if not signed_out_form_sent(request, form):
        return _confirm_form(request, token, needs_password, error=_EXPIRED_FORM, status=403)
    await _share_api_limit(request, "confirm_email")
    fields = {"token": token, "password": str(form.get("password", "")) if needs_password else None}
    try:
        data = structure(fields, ConfirmationInput)  # the API's rules for the password
        await confirm_email(request.app[POOL], request.app[PASSWORDS], data.token, data.password,
                            _anonymous(request))
    except ServiceError as exc:
        if exc.code == "not_found":  # used meanwhile
            return _link_gone(request, _CONFIRM_GONE, kind="confirm")
        if exc.code in _STATUS:
            return _with_retry_after(_confirm_form(
                request, token, needs_password, error=_sentence(exc), details=in_words(exc.details),
                status=_STATUS[exc.code]), exc)
        raise
    response = see_other("/signin?done=confirmed")
    response.del_cookie(SIGN_IN_COOKIE, path="/confirm")
    raise response

"""The service's front door, around every route's handler: the request id, the one error shape,
authentication and the route's rate limit, in that order. Each concern lives in its own module
(telemetry, errors, auth, ratelimit); this is where they are put in order.

It wraps each handler when the routes are added (`guard`) instead of being an aiohttp
middleware: an application with any middleware runs aiohttp's middleware machinery on every
request (a chain of partials and a layer of its own), and the single-RFP read, the service's
hottest path, measured ~5 µs of CPU a request faster without it (BENCHMARKS.md, HTTP). Wrapping
also looks up each route's policy and rate limit once, at start-up. Requests no route matches
reach `no_route`, registered last, so that 404 and 405 have the same shape and request id."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable

import attrs
from aiohttp import web

from ..config import Config
from ..domain.errors import MethodNotAllowed, NotFound
from .auth import Handler, authorized, policy_of, public
from .errors import error_response, refuse_nul
from .ratelimit import DECISION, guarded
from .telemetry import REQUEST_ID, REQUEST_ID_HEADER, assign_request_id


def guard(handler: Handler, name: str | None, config: Config) -> Handler:
    """`handler` behind the front door; `name` is its route's name (which keys rate limits)."""
    policy = policy_of(handler)
    if policy is None:
        raise RuntimeError(f"route {name or handler} has no access policy")
    limit = config.rate_limits.get(name) if name else None
    inner = (
        handler if limit is None
        else functools.partial(guarded, handler=handler, limit=limit)
    )

    async def front_door(request: web.Request) -> web.StreamResponse:
        request_id = assign_request_id(request)
        try:
            refuse_nul(request)
            response = await authorized(request, inner, policy, limit)
        except web.HTTPException as exc:
            if exc.status < 400:  # a redirect passes through, with the request id
                exc.headers[REQUEST_ID_HEADER] = request_id
                raise
            response = error_response(request, exc)
        except Exception as exc:
            response = error_response(request, exc)
        # What stream_headers gives a stream, here without a dict for the hot path's sake.
        response.headers[REQUEST_ID_HEADER] = request_id
        # The route's limit, or one its handler took (a page asking as the API does).
        if (decided := request.get(DECISION)) is not None:
            response.headers.update(decided.headers())  # on errors too: 404, 413, 500
        return response

    functools.update_wrapper(front_door, handler)  # keeps the name and the policy
    front_door.guarded = True  # type: ignore[attr-defined]
    return front_door


async def refuse_unguarded(app: web.Application) -> None:
    """On start-up: a route added without `guard` would serve without auth or the error shape;
    the service refuses to start instead."""
    for route in app.router.routes():
        if not getattr(route.handler, "guarded", False):
            raise RuntimeError(
                f"{route.method} {route.resource.canonical if route.resource else route} was added "
                "without service.web.frontdoor.guard: it would skip authentication"
            )


# Headers a wrapper inside the front door puts on every response it returns (the web app's
# security headers, service/web/pages/common.py), which a stream must send itself.
WRAPPER_HEADERS = web.RequestKey("wrapper_headers", dict)


def stream_headers(request: web.Request) -> dict[str, str]:
    """What the front door adds to a response (the request id, the rate limit's headers), for
    a response the handler prepares itself (a stream): its headers are sent before it returns.
    With them, any WRAPPER_HEADERS (a page's export is the API's stream)."""
    headers = {REQUEST_ID_HEADER: request[REQUEST_ID]}
    decided = request.get(DECISION)
    if decided is not None:
        headers.update(decided.headers())
    wrapper = request.get(WRAPPER_HEADERS)
    if wrapper is not None:
        headers.update(wrapper)
    return headers


def guarded_routes(routes: Iterable[web.RouteDef], config: Config) -> list[web.RouteDef]:
    """`routes` with their handlers behind the front door, then the catch-all for the rest.
    Add routes here (service/web/app.py routes()), not later: aiohttp tries the longest path prefix
    first, so a later `/api/...` route still matches, but a later top-level `/{name}` would share
    the catch-all's prefix `/` and never be reached."""
    return [
        attrs.evolve(route, handler=guard(route.handler, route.kwargs.get("name"), config))
        for route in [*literals_first(list(routes)), web.route("*", "/{path:.*}", no_route)]
    ]


def literals_first(routes: list[web.RouteDef]) -> list[web.RouteDef]:
    """`routes` with each `{name}` kept from matching a word that another route of the same
    shape has in its place: /api/v1/rfps/search is the search whatever the method, so DELETE
    there is a 405 naming GET alone, and PATCH there no update of an RFP called "search".
    (aiohttp tries the literal path first, but a method it lacks falls through to `{id}`.)"""
    paths = [route.path.split("/") for route in routes]

    def words_beside(segments: list[str], at: int) -> set[str]:
        return {
            other[at] for other in paths
            if len(other) == len(segments) and not other[at].startswith("{")
            and all(
                i == at or a == b or a.startswith("{") or b.startswith("{")
                for i, (a, b) in enumerate(zip(other, segments, strict=True))
            )
        }

    changed = []
    for route, segments in zip(routes, paths, strict=True):
        path = list(segments)
        for at, segment in enumerate(segments):
            placeholder = _PLACEHOLDER.fullmatch(segment)
            if placeholder and (words := words_beside(segments, at)):
                either = "|".join(re.escape(word) for word in sorted(words))
                path[at] = f"{{{placeholder[1]}:(?!(?:{either})(?:/|$))[^{{}}/]+}}"
        changed.append(attrs.evolve(route, path="/".join(path)) if path != segments else route)
    return changed


_PLACEHOLDER = re.compile(r"\{(\w+)\}")  # a plain `{name}`, matching any one path segment


def _wants_page(request: web.Request) -> bool:
    """A browser asking for a page outside the API (the API's 404 stays JSON whatever is asked)."""
    return (
        request.method == "GET"
        and not request.path.startswith("/api/")
        and "text/html" in request.headers.get("Accept", "")
    )


@public
async def no_route(request: web.Request) -> web.Response:
    """404, or 405 with Allow when the path is some route's with another method. (Registered
    last, this matches whatever no other route did, so it asks the other routes which methods
    they would take.)"""
    allowed: set[str] = set()
    for resource in request.app.router.resources():
        if resource is not request.match_info.route.resource:
            _, methods = await resource.resolve(request)
            allowed |= methods
    if not allowed and _wants_page(request):
        from .pages.common import not_found_page  # the web app's 404, in its look

        return await not_found_page(request)
    if allowed and _wants_page(request):
        from .pages.common import form_address_page  # the web app's 405, in its look

        return await form_address_page(request, ", ".join(sorted(allowed)))
    if allowed:
        raise MethodNotAllowed(
            f"{request.method} is not allowed here; allowed: {', '.join(sorted(allowed))}",
            headers={"Allow": ", ".join(sorted(allowed))},
        )
    raise NotFound("no such route")

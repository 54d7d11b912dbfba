"""The app's own stylesheet and script (service/web/static/app/), read once from the package."""

from __future__ import annotations

import hashlib
from importlib import resources

from aiohttp import web

from ...domain.errors import NotFound
from ..auth import public

_TYPES = {".css": "text/css", ".js": "text/javascript"}
_FILES: dict[str, tuple[bytes, str, str]] = {}


def _load() -> dict[str, tuple[bytes, str, str]]:
    if not _FILES:
        folder = resources.files("service.web") / "static" / "app"
        for entry in folder.iterdir():
            suffix = "." + entry.name.rpartition(".")[2]
            if suffix in _TYPES:
                body = entry.read_bytes()
                _FILES[entry.name] = (body, _TYPES[suffix], hashlib.sha256(body).hexdigest()[:16])
    return _FILES


@public
async def asset(request: web.Request) -> web.StreamResponse:
    found = _load().get(request.match_info["name"])
    if found is None:
        raise NotFound("no such file")
    body, media_type, etag = found
    if request.headers.get("If-None-Match") == f'"{etag}"':
        return web.Response(status=304, headers={"ETag": f'"{etag}"'})
    return web.Response(
        body=body, content_type=media_type, charset="utf-8",
        headers={"ETag": f'"{etag}"', "Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"},
    )

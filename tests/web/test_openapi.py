from __future__ import annotations

from conftest import with_config
from jsonschema import Draft202012Validator
from openapi_check import check_response

from service.web.app import create_app
from service.web.frontdoor import no_route
from service.web.openapi import document


def test_openapi__describes_every_registered_route(config):
    app = create_app(with_config(config, metrics={"enabled": True}))
    paths = document()["paths"]
    missing = [
        f"{route.method} {route.resource.canonical}"
        for route in app.router.routes()
        if route.method.lower() not in paths.get(route.resource.canonical, {})
        and route.handler.__wrapped__ is not no_route  # the catch-all: 404 and 405, no API
        # The web app's pages (service/web/pages) are HTML for browsers, not API.
        and not (route.resource.name or "").startswith("page_")
    ]
    assert missing == []


def test_openapi__schemas_are_valid_json_schema():
    for name, schema in document()["components"]["schemas"].items():
        Draft202012Validator.check_schema(schema), name


def test_openapi__check_rejects_an_undescribed_shape():
    try:
        check_response("GET", "/api/v1/rfps/rfp_x", 200, "application/json", b'{"id": 1}')
    except AssertionError as exc:
        assert "does not match" in str(exc)
    else:
        raise AssertionError("an RFP without its fields passed validation")


async def test_openapi__served_as_json_with_version_3_1(client):
    response = await client.get("/api/v1/openapi.json")
    assert response.status == 200
    assert (await response.json())["openapi"] == "3.1.0"


async def test_docs__served_with_local_assets(client):
    page = await client.get("/docs")
    html = await page.text()
    assert page.status == 200 and "/docs/assets/swagger-ui-bundle.js" in html
    assert "https://" not in html  # no CDN
    asset = await client.get("/docs/assets/swagger-ui-bundle.js")
    assert asset.status == 200 and len(await asset.read()) > 100_000
    assert (await client.get("/docs/assets/..%2Fopenapi.py")).status == 404
    # Not to be framed, nor sniffed, as the web app's pages (a probe found /docs without).
    policy = page.headers["Content-Security-Policy"]
    assert "frame-ancestors 'none'" in policy and "script-src" not in policy  # default-src 'self'
    assert page.headers["X-Content-Type-Options"] == "nosniff"
    assert asset.headers["X-Content-Type-Options"] == "nosniff"

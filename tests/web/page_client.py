"""What the web app's page tests share: a test client for pages, a password the tests set,
reading a form field off a page and an upload form. Test modules import the fixtures by name to use them."""

from __future__ import annotations

import re
from typing import Any

import pytest
from aiohttp import FormData
from aiohttp.test_utils import TestClient
from conftest import with_config

from service.domain.passwords import hasher
from service.web.app import create_app

PASSWORD = "correct horse battery staple"


@pytest.fixture
def aiohttp_client_cls() -> type[TestClient]:
    """Pages are HTML for browsers, not API: no OpenAPI check on these clients' responses (the
    API's own tests keep theirs)."""
    return TestClient


@pytest.fixture
async def app_client(aiohttp_client: Any, config: Any) -> TestClient:
    """Served over plain http (as the test client speaks it), so the cookie is not Secure."""
    plain = with_config(config, server={"web_base_url": "http://localhost"})
    return await aiohttp_client(create_app(plain))


async def set_password(conn: Any, email: str, password: str = PASSWORD) -> None:
    await conn.execute(
        "UPDATE users SET password_hash = $2, password_chosen_by_user = true"
        " WHERE lower(email) = lower($1)",
        email, hasher().hash(password),
    )


def field(html: str, name: str) -> str:
    found = re.search(rf'name="{name}" value="([^"]*)"', html)
    assert found, f"no {name} field in the page"
    return found.group(1)


async def sign_in(client: TestClient, email: str, password: str = PASSWORD) -> str:
    """Sign in through the form; returns the session's CSRF token (from the next page)."""
    form = await client.get("/signin")
    token = field(await form.text(), "sign_in_token")
    response = await client.post(
        "/signin", data={"email": email, "password": password, "sign_in_token": token, "next": "/rfps"},
        allow_redirects=False,
    )
    assert response.status == 303, await response.text()
    assert response.headers["Location"] == "/rfps"
    page = await client.get("/rfps")
    assert page.status == 200
    return field(await page.text(), "csrf_token")


def upload_form(csrf: str, content: bytes, filename: str = "upload.csv", **fields: str) -> FormData:
    """An upload form as a page sends it: its CSRF token, `fields`, then the file (CSV)."""
    form = FormData()
    form.add_field("csrf_token", csrf)
    for name, value in fields.items():
        form.add_field(name, value)
    form.add_field("file", content, filename=filename, content_type="text/csv")
    return form

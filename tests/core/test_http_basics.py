"""Issue 29 §9: pages come compressed to a client that accepts gzip, and the icon browsers ask for is
served (no 404 on every page)."""

from __future__ import annotations

import gzip

import pytest
from django.contrib.staticfiles import finders

pytestmark = pytest.mark.django_db


def test_a_page_is_gzip_compressed_for_a_client_that_accepts_it(client, staff_user):
    client.force_login(staff_user)
    plain = client.get("/inventory/")
    assert plain.status_code == 200 and "Content-Encoding" not in plain  # the client did not ask
    packed = client.get("/inventory/", HTTP_ACCEPT_ENCODING="gzip, deflate, br")
    assert packed.status_code == 200
    assert packed["Content-Encoding"] == "gzip"
    assert "Accept-Encoding" in packed["Vary"]  # a cache keeps both forms apart
    body = gzip.decompress(packed.content).decode()
    assert "<html" in body and len(packed.content) < len(body.encode()) / 2


def test_an_api_answer_is_compressed_too(client, staff_user):
    client.force_login(staff_user)
    response = client.get("/api/schema/", HTTP_ACCEPT_ENCODING="gzip")
    assert response.status_code == 200
    assert response["Content-Encoding"] == "gzip"
    assert b"openapi" in gzip.decompress(response.content)


def test_favicon_ico_redirects_to_the_static_icon_every_page_links(client, staff_user):
    response = client.get("/favicon.ico")
    assert response.status_code == 301
    assert response["Location"].endswith("img/favicon.svg")
    assert finders.find("img/favicon.svg"), "the icon is a static file"
    client.force_login(staff_user)
    page = client.get("/inventory/").content.decode()
    assert 'rel="icon"' in page and "img/favicon.svg" in page

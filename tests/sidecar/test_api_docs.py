"""/docs works offline: a page built from the app's OpenAPI schema, with no script, stylesheet
or anything else fetched from elsewhere (FastAPI's Swagger UI loads its assets from a CDN and
is blank without internet access), listing every operation and linking /openapi.json."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient

from exporter import api_docs
from exporter.app import create_app
from exporter.config_loader import load_settings


def _client() -> TestClient:
    """The sidecar's app without its lifespan (no sources polled): only routing is under test."""
    settings = load_settings(
        {"sglang_url": "http://127.0.0.1:9", "gpu_backend": "fake", "canary": False}
    )
    return TestClient(create_app(settings, env={}))


def test_docs_page_is_self_contained_and_lists_every_operation():
    client = _client()
    resp = client.get("/docs")
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/html")
    page = resp.text
    # Nothing a browser would fetch: no scripts, stylesheets, images or absolute URLs.
    assert not re.search(r"<script|<link|<img|<iframe|\bsrc=|https?://", page, re.I), page
    schema = client.get("/openapi.json").json()
    operations = [
        (method.upper(), path)
        for path, item in schema["paths"].items()
        for method in item
        if method in api_docs.METHODS
    ]
    assert ("POST", "/api/v1/samples") in operations
    for method, path in [*operations, ("GET", "/metrics")]:
        row = f"<td><code>{method}</code></td><td><code>{path}</code></td>"
        assert row in page, (method, path)
    assert 'href="/openapi.json"' in page


def test_no_cdn_backed_docs_remain():
    """Swagger UI's and ReDoc's own routes are off (their pages load from a CDN)."""
    client = _client()
    assert client.get("/redoc").status_code == 404
    assert client.get("/docs/oauth2-redirect").status_code == 404
    assert "cdn" not in client.get("/docs").text.lower()


def test_schema_text_is_escaped():
    schema = {
        "info": {"title": "t<b>", "version": "1"},
        "paths": {"/x": {"get": {"summary": "<script>alert(1)</script>", "description": "a&b"}}},
    }
    page = api_docs.render(schema)
    assert "<script>" not in page and "&lt;script&gt;" in page and "a&amp;b" in page
    assert "t&lt;b&gt;" in page

"""``/docs``: the HTTP API's reference as one self-contained page, built from the app's own
OpenAPI schema.

Why not FastAPI's Swagger UI: it loads its script and stylesheet from a CDN, so on a GPU node
without internet access (where the sidecar runs) ``/docs`` is a blank page. Serving Swagger's
assets from a package instead would add a runtime dependency, and its files to the image, for
a handful of endpoints whose only non-trivial call (``POST /api/v1/samples``) needs a bearer
token anyway. This page needs nothing beyond the schema: each operation's method, path,
summary and description, and a link to ``/openapi.json`` for any OpenAPI viewer or client
generator someone runs where they have one.
"""

from __future__ import annotations

import html
from typing import Any

from fastapi import FastAPI
from fastapi.responses import HTMLResponse

METHODS = ("get", "head", "post", "put", "patch", "delete")


def render(schema: dict[str, Any], extra: tuple[tuple[str, str, str], ...] = ()) -> str:
    """The page for an OpenAPI ``schema``; ``extra`` lists (method, path, what) for routes the
    schema cannot know (``/metrics`` is served by a middleware, outside FastAPI's router)."""
    info = schema.get("info", {})
    rows = [
        (method.upper(), path, op.get("summary", ""), op.get("description", ""))
        for path, item in schema.get("paths", {}).items()
        for method, op in item.items()
        if method in METHODS
    ]
    rows += [(method, path, what, "") for method, path, what in extra]
    rows.sort(key=lambda r: (r[1], r[0]))
    body = "".join(
        f"<tr><td><code>{html.escape(m)}</code></td>"
        f"<td><code>{html.escape(p)}</code></td>"
        f"<td><b>{html.escape(s)}</b><br>{html.escape(d)}</td></tr>"
        for m, p, s, d in rows
    )
    title = html.escape(f"{info.get('title', 'API')} {info.get('version', '')}".strip())
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>{title} API</title>
<style>body{{font-family:sans-serif;max-width:60em;margin:2em auto}}td{{padding:.3em .8em;
vertical-align:top}}</style></head><body><h1>{title}: HTTP API</h1>
<p>The OpenAPI schema: <a href="/openapi.json">/openapi.json</a> (load it into any OpenAPI
viewer). This page is served without scripts or external assets, so it works offline.</p>
<table><tr><th>method</th><th>path</th><th>what</th></tr>{body}</table>
<p><a href="/">back to the landing page</a></p></body></html>"""


def register(app: FastAPI, extra: tuple[tuple[str, str, str], ...] = ()) -> None:
    """Serve :func:`render` of ``app``'s schema at ``/docs`` (create the app with
    ``docs_url=None``), rendered once on first request: the routes do not change after
    start-up."""
    page: list[str] = []

    @app.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        if not page:
            page.append(render(app.openapi(), extra))
        return HTMLResponse(page[0])

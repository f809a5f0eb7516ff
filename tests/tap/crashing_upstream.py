"""An SGLang-shaped upstream on SGLang's own server stack (uvicorn + httptools) for the tap's
pool tests: ``python -m uvicorn tests.tap.crashing_upstream:app --workers 2``.

``POST /crash`` records its arrival (one line in ``$CRASH_LOG``) and kills the worker that got
it, so its connection closes without an answer: what a worker crash looks like to a proxy.
A proxy that replays the POST on a fresh connection makes a second worker record it (and
die). ``GET /ok`` answers small JSON; ``GET /big?n=N`` answers N bytes with Content-Length in
one write (the response a slow reader leaves in the tap's buffers).
"""

from __future__ import annotations

import os
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route


async def ok(request: Request) -> Response:
    return JSONResponse({"ok": True, "path": request.url.path, "q": request.url.query})


async def big(request: Request) -> Response:
    n = min(int(request.query_params.get("n", "65536")), 16 << 20)
    return Response(b"x" * n, media_type="application/octet-stream")


async def crash(request: Request) -> Any:
    await request.body()
    with open(os.environ["CRASH_LOG"], "a", encoding="utf-8") as log:
        log.write(f"{os.getpid()}\n")
    os._exit(1)


app = Starlette(
    routes=[
        Route("/ok", ok),
        Route("/ok/{n}", ok),
        Route("/big", big),
        Route("/crash", crash, methods=["POST"]),
    ]
)

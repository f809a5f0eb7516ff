"""A hostile stand-in for SGLang: a real uvicorn server whose answers are huge, deep or slow.

``HostileSglang.mode`` steers every endpoint (``/server_info``, ``/metrics``,
``/v1/chat/completions``); ``sent`` counts the bytes each endpoint actually pushed, so a test
can prove the reader stopped early instead of swallowing the whole body.
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import Response, StreamingResponse
from starlette.requests import ClientDisconnect

from exporter.probe.snapshot import ProbeCounters, snapshot_path, write_snapshot
from tests.support import ServerThread

MIB = 1 << 20
_FIXTURE_INFO: dict[str, Any] = {
    "version": "0.5.12",
    "model_path": "deepseek-ai/DeepSeek-V4-Flash",
    "tp_size": 1,
    "max_total_num_tokens": 1_000_000,
}


def deep_json(levels: int) -> bytes:
    """``[[[...]]]`` nested ``levels`` deep: valid JSON that recursive decoders choke on."""
    return b"[" * levels + b"]" * levels


def chat_answer(text: str = "hello") -> dict[str, Any]:
    return {
        "id": "chatcmpl-hostile",
        "object": "chat.completion",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
        ],
    }


def _info(**over: Any) -> bytes:
    return json.dumps({**_FIXTURE_INFO, **over}).encode()


def _pools(n: int, name_len: int = 8) -> bytes:
    rows = [b"# TYPE sglang:load_back_tokens_total counter\n"]
    for i in range(n):
        pool = (f"p{i}" + "x" * name_len)[: max(name_len, len(str(i)) + 1)]
        rows.append(f'sglang:load_back_tokens_total{{tp_rank="0",pool="{pool}"}} 1\n'.encode())
    return b"".join(rows)


def _series(n: int) -> bytes:
    """``n`` series of a family the sidecar reads (running requests, one per DP rank)."""
    rows = [b"# TYPE sglang:num_running_reqs gauge\n"]
    rows += [f'sglang:num_running_reqs{{tp_rank="0",dp_rank="{i}"}} 1\n'.encode() for i in range(n)]
    return b"".join(rows)


# Valid bodies whose values are the attack (issue 24's list).
SHAPES: dict[str, Callable[[], bytes]] = {
    "wide": lambda: _info(tp_size=10**8),
    "infinite": lambda: _info(tp_size=float("inf")),  # json.dumps writes Infinity
    "long_version": lambda: _info(version="9" * 900_000),
    "pools": lambda: _pools(100_000),
    "long_pool": lambda: _pools(1, name_len=1 << 20),
    "series": lambda: _series(100_000),
}


def hostile_probe_dir(root: Path | None = None) -> Path:
    """A probe directory as issue 24 found it: 2,000 rank files, rank 0 holding a number past
    the float range (valid JSON), rank 1 a FIFO named like a snapshot (a plain open() of it
    blocks forever)."""
    root = Path(tempfile.mkdtemp(prefix="dsv4-hostile-probe-")) if root is None else root
    now = time.time()
    for rank in range(2000):
        write_snapshot(root, str(rank), ProbeCounters(), written_at=now)
    huge = snapshot_path(root, "0")
    doc = json.loads(huge.read_text())
    doc["seq"] = 10**400
    huge.write_text(json.dumps(doc))
    fifo = snapshot_path(root, "1")
    fifo.unlink()
    os.mkfifo(fifo)
    return root


@dataclass
class HostileSglang:
    """Modes: ``ok``; ``huge`` (``size`` bytes streamed chunked, no length); ``huge_declared``
    (a Content-Length of ``size``, body streamed); ``deep`` (``depth`` levels of JSON);
    ``slow`` (``delay`` seconds before a normal answer). Shapes of issue 24 (valid bodies with
    hostile values): ``/server_info`` ``wide`` (tp_size 10**8), ``infinite`` (tp_size Infinity),
    ``long_version`` (a 900 KB version string); ``/metrics`` ``pools`` (100,000 load-back
    pools), ``long_pool`` (a 1 MB pool name), ``series`` (100,000 series of a family read)."""

    mode: dict[str, str] = field(default_factory=dict)
    size: int = 1 << 30
    depth: int = 50_000
    delay: float = 0.0
    sent: dict[str, int] = field(default_factory=dict)

    def app(self) -> FastAPI:
        app = FastAPI()

        @app.get("/server_info")
        async def server_info(request: Request) -> Response:
            return await self._answer(request, "server_info", json.dumps(_FIXTURE_INFO).encode())

        @app.get("/metrics")
        async def metrics(request: Request) -> Response:
            body = b"# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs 3\n"
            return await self._answer(request, "metrics", body, "text/plain")

        @app.post("/v1/chat/completions")
        async def chat(request: Request) -> Response:
            try:
                await request.body()
            except ClientDisconnect:  # the caller gave up mid-body (the tap aborts those)
                return Response(status_code=499)
            return await self._answer(request, "chat", json.dumps(chat_answer()).encode())

        return app

    async def _answer(
        self, request: Request, where: str, normal: bytes, ctype: str = "application/json"
    ) -> Response:
        mode = self.mode.get(where, "ok")
        self.sent.setdefault(where, 0)
        if mode == "huge":
            return StreamingResponse(self._stream(request, where), media_type=ctype)
        if mode == "huge_declared":
            return StreamingResponse(
                self._stream(request, where),
                media_type=ctype,
                headers={"Content-Length": str(self.size)},
            )
        if mode == "deep":
            body = deep_json(self.depth)
        elif mode in SHAPES:
            body = SHAPES[mode]()
        else:
            if mode == "slow":
                await asyncio.sleep(self.delay)
            body = normal
        self.sent[where] += len(body)
        return Response(body, media_type=ctype)

    async def _stream(self, request: Request, where: str) -> AsyncIterator[bytes]:
        """1 MiB pieces until ``size`` or the reader hangs up (uvicorn drops writes to a closed
        connection silently, so the generator asks)."""
        piece = b"[" + b" " * (MIB - 1)
        left = self.size
        while left > 0 and not await request.is_disconnected():
            chunk = piece[: min(MIB, left)]
            self.sent[where] += len(chunk)
            left -= len(chunk)
            yield chunk

    def serve(self) -> ServerThread:
        return ServerThread(self.app())

"""A bounded ring buffer of recent degenerate and suspect samples, for triage.

Text is redacted and truncated to a cap before it is stored; the buffer holds at most N
entries. It is served only behind a bearer token (see exporter.app).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from exporter.samplers.redact import Redactor


@dataclass(frozen=True)
class StoredSample:
    time: float
    source: str
    concurrency: int | None
    verdict: str
    reasons: tuple[str, ...]
    spans: tuple[dict[str, Any], ...]
    text: str
    truncated: bool
    request_id: str | None

    def to_json(self) -> dict[str, Any]:
        return {
            "time": self.time,
            "source": self.source,
            "concurrency": self.concurrency,
            "verdict": self.verdict,
            "reasons": list(self.reasons),
            "spans": list(self.spans),
            "text": self.text,
            "truncated": self.truncated,
            "request_id": self.request_id,
        }


class SampleStore:
    KEEP_VERDICTS = ("degenerate", "suspect")

    def __init__(
        self, capacity: int = 200, text_cap: int = 4096, redactor: Redactor | None = None
    ) -> None:
        self.capacity = capacity
        self.text_cap = text_cap
        self.redactor = redactor or Redactor()
        self._items: deque[StoredSample] = deque(maxlen=capacity)
        self._lock = threading.Lock()

    def add(
        self,
        *,
        source: str,
        concurrency: int | None,
        verdict: str,
        reasons: list[str],
        spans: list[dict[str, Any]],
        text: str,
        request_id: str | None,
    ) -> bool:
        """Keep the sample if its verdict is worth triage; returns whether it was stored."""
        if verdict not in self.KEEP_VERDICTS:
            return False
        truncated = len(text) > self.text_cap
        kept = text[: self.text_cap]
        # Spans index the original text: keep those inside what is stored.
        spans = [s for s in spans if s.get("start", 0) < len(kept)][:32]
        item = StoredSample(
            time.time(),
            source,
            concurrency,
            verdict,
            tuple(reasons),
            tuple(spans),
            # Redact what is kept, then cap again: a mask can be longer than what it hides
            # (span offsets after a redaction may shift by the difference).
            self.redactor(kept)[: self.text_cap],
            truncated,
            request_id[:128] if request_id else None,
        )
        with self._lock:
            self._items.append(item)
        return True

    def recent(self, limit: int | None = None, verdict: str | None = None) -> list[dict[str, Any]]:
        with self._lock:
            items = list(self._items)
        if verdict:
            items = [i for i in items if i.verdict == verdict]
        items.reverse()  # newest first
        return [i.to_json() for i in items[: limit or len(items)]]

    def __len__(self) -> int:
        return len(self._items)

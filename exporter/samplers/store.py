"""A bounded ring buffer of recent degenerate and suspect samples, for triage.

Everything a stored sample carries out of the process is made safe once, when it is stored:

- **bounded**: text to ``text_cap`` characters, at most 32 spans with details of at most
  256 characters, request ids of at most 128; the buffer holds at most ``capacity`` entries
  *and* at most ``max_bytes`` (the oldest go first), so a flood of large bad samples cannot
  grow memory;
- **cut, then redacted, then cut at a token boundary**: the text is redacted over the kept
  part plus a margin, so a secret straddling the cap is seen whole and masked, and a token the
  cap splits is dropped rather than shown in part (an ``sk-`` key cut at the cap leaves no
  characters behind);
- **redacted in every field**: text, every string in the spans (loop findings quote the
  repeated text), and the request id;
- **valid Unicode**: lone surrogates (a JSON ``\\ud800`` escape is legal JSON) become U+FFFD,
  so rendering the list as UTF-8 JSON can never fail.

It is served only behind a bearer token (see exporter.app).
"""

from __future__ import annotations

import re
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from exporter.samplers.redact import Redactor

MAX_SPANS = 32
DETAIL_CAP = 256
REQUEST_ID_CAP = 128
REDACT_MARGIN = 1024
"""Characters past a cut that redaction still reads, so a secret straddling it is matched."""

_SURROGATE = re.compile("[\ud800-\udfff]")
_TOKEN_TAIL = re.compile(r"\S+\Z")


def clean_unicode(text: str) -> str:
    """Lone surrogates replaced by U+FFFD: the text then always encodes as UTF-8."""
    return _SURROGATE.sub("\ufffd", text)


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
    output_tokens: int | None = None
    tokens_counted: str | None = None  # usage, stream or estimate
    finish_reason: str | None = None

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
            "output_tokens": self.output_tokens,
            "tokens_counted": self.tokens_counted,
            "finish_reason": self.finish_reason,
        }

    def size(self) -> int:
        """Approximate bytes held (strings dominate; span dicts are small and bounded)."""
        spans = sum(
            sys.getsizeof(s) + sum(sys.getsizeof(v) for v in s.values()) for s in self.spans
        )
        return sys.getsizeof(self.text) + sys.getsizeof(self.request_id or "") + spans + 512


class SampleStore:
    KEEP_VERDICTS = ("degenerate", "suspect")

    def __init__(
        self,
        capacity: int = 200,
        text_cap: int = 4096,
        redactor: Redactor | None = None,
        max_bytes: int = 8 << 20,
    ) -> None:
        self.capacity = capacity
        self.text_cap = text_cap
        self.max_bytes = max_bytes
        self.redactor = redactor if redactor is not None else Redactor()
        self._items: deque[tuple[StoredSample, int]] = deque()
        self._bytes = 0
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
        output_tokens: int | None = None,
        tokens_counted: str | None = None,
        finish_reason: str | None = None,
    ) -> bool:
        """Keep the sample if its verdict is worth triage; returns whether it was stored."""
        if verdict not in self.KEEP_VERDICTS:
            return False
        kept, truncated = self.safe_text(text, self.text_cap)
        # Spans index the original text: keep those inside what is stored.
        spans = [self._safe_span(s) for s in spans if s.get("start", 0) < len(kept)][:MAX_SPANS]
        item = StoredSample(
            time.time(),
            source,
            concurrency,
            verdict,
            tuple(reasons),
            tuple(spans),
            kept,
            truncated,
            self.safe_text(request_id, REQUEST_ID_CAP)[0] if request_id else None,
            output_tokens,
            tokens_counted,
            finish_reason[:32] if finish_reason else None,
        )
        size = item.size()
        with self._lock:
            self._items.append((item, size))
            self._bytes += size
            while len(self._items) > self.capacity or (
                self._bytes > self.max_bytes and len(self._items) > 1
            ):
                _, gone = self._items.popleft()
                self._bytes -= gone
        return True

    def safe_text(self, text: str, cap: int) -> tuple[str, bool]:
        """(text as it may leave the process, whether it was cut): redacted over the cap plus a
        margin, cut to ``cap``, a token split by the cut dropped, surrogates replaced."""
        truncated = len(text) > cap
        window = text[: cap + REDACT_MARGIN]
        redacted = self.redactor(window)
        kept = redacted[:cap]
        if len(redacted) > cap or (len(window) < len(text)):
            if not redacted[cap : cap + 1].isspace():
                # the cut split a token (or the margin ended inside one): drop its start
                kept = _TOKEN_TAIL.sub("", kept)
            truncated = True
        return clean_unicode(kept), truncated

    def _safe_span(self, span: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in span.items():
            out[key] = self.safe_text(value, DETAIL_CAP)[0] if isinstance(value, str) else value
        return out

    def recent(self, limit: int | None = None, verdict: str | None = None) -> list[dict[str, Any]]:
        with self._lock:
            items = [item for item, _ in self._items]
        if verdict:
            items = [i for i in items if i.verdict == verdict]
        items.reverse()  # newest first
        return [i.to_json() for i in items[: limit or len(items)]]

    def __len__(self) -> int:
        return len(self._items)

"""Incremental grading: feed chunks as they stream, get the same Result as the whole text.

The grade of a tool call depends on its end (an open block is truncation or corruption only once
finish_reason is known), so chunks are kept, within a memory cap, and graded at ``finish``.
What must be tracked on the way is: the ``</think>`` that ends reasoning (it may fall in the
dropped middle of an oversized stream) and UTF-8 sequences split across byte chunks. Both
paths call :func:`grader.grade_kept` on identical kept text, hence identical results.
"""

from __future__ import annotations

import codecs
import copy
from collections import deque
from collections.abc import Callable

from exporter.dsml import markers as m
from exporter.dsml import thresholds as t
from exporter.dsml.grader import PARAM_OPENS, grade_kept, normalize_grammar, reasoning_end
from exporter.dsml.result import Result
from exporter.dsml.schema import ToolSet

BATCH = 8192  # characters (or bytes) batched by the streaming grader before decoding


class HeadTail:
    """Keeps the first ``cap // 2`` and the last ``cap - cap // 2`` characters of a stream.

    Holds at most ``cap`` characters plus one chunk smaller than the tail. ``on_drop`` sees the
    dropped middle, in stream order, as it leaves (what must be tracked there, is)."""

    def __init__(self, cap: int, on_drop: Callable[[str], None] | None = None) -> None:
        self._on_drop = on_drop
        cap = max(0, int(cap))
        self.cap = cap
        self.head_cap = cap // 2
        self.tail_cap = cap - self.head_cap
        self._head: list[str] = []
        self._head_len = 0
        self._tail: deque[str] = deque()
        self._tail_len = 0
        self.total = 0

    def append(self, s: str) -> None:
        if not s:
            return
        n = len(s)
        self.total += n
        if self._head_len < self.head_cap:
            room = self.head_cap - self._head_len
            if n <= room:  # the common case while the head fills: no slicing
                self._head.append(s)
                self._head_len += n
                return
            self._head.append(s[:room])
            self._head_len += room
            s = s[room:]
        if len(s) >= self.tail_cap:  # one big chunk replaces the whole tail
            keep = len(s) - self.tail_cap
            if self._on_drop is not None:
                self._on_drop("".join(self._tail) + s[:keep])
            self._tail.clear()
            s = s[keep:]
            self._tail_len = 0
        self._tail.append(s)
        self._tail_len += len(s)
        while self._tail and self._tail_len - len(self._tail[0]) >= self.tail_cap:
            gone = self._tail.popleft()
            self._tail_len -= len(gone)
            if self._on_drop is not None:
                self._on_drop(gone)

    @property
    def head(self) -> str:
        return "".join(self._head)

    @property
    def tail(self) -> str:
        """Everything not in the head and not dropped yet (may exceed the tail cap by a chunk)."""
        return "".join(self._tail)

    @property
    def held(self) -> int:
        """Characters held right now (what the memory bound is about)."""
        return self._head_len + self._tail_len

    def kept(self) -> tuple[str, int | None, int]:
        """(kept text, offset of the cut or None, characters dropped) as :func:`grader.cut`."""
        head = "".join(self._head)
        tail = "".join(self._tail)
        if self.total <= self.cap:
            return head + tail, None, 0
        tail = tail[len(tail) - self.tail_cap :] if self.tail_cap else ""
        return head + tail, len(head), self.total - len(head) - len(tail)


class ThinkTracker:
    """:func:`grader.reasoning_end` computed on a stream, chunk by chunk, in O(1) memory."""

    # Every parameter opener and closer :func:`grader.reasoning_end` looks for (V4's and V4.1's
    # spaced form): tracking only V4's once split a V4.1 value's ``</think>`` differently here.
    _NEEDLES = (m.THINK_CLOSE, *PARAM_OPENS, *m.PARAMETER_CLOSES)
    _KEEP = max(len(n) for n in _NEEDLES) - 1

    def __init__(self) -> None:
        self.think = -1
        self.last_open = -1
        self.last_close = -1
        self._carry = ""
        self._base = 0  # stream offset of the carry's first character

    def feed(self, s: str) -> None:
        if self.think >= 0 or not s:
            return
        window = self._carry + s
        k = window.find(m.THINK_CLOSE)
        limit = k if k >= 0 else len(window)
        o = max(window.rfind(p, 0, limit) for p in PARAM_OPENS)
        c = max(window.rfind(p, 0, limit) for p in m.PARAMETER_CLOSES)
        if o >= 0:
            self.last_open = max(self.last_open, self._base + o)
        if c >= 0:
            self.last_close = max(self.last_close, self._base + c)
        if k >= 0:
            self.think = self._base + k
            return
        cut_at = max(0, len(window) - self._KEEP)
        self._base += cut_at
        self._carry = window[cut_at:]

    def end(self, thinking: bool | None) -> int:
        if self.think < 0 or thinking is not None:
            return self.think
        return -1 if self.last_open > self.last_close else self.think


class TextDecoder:
    """str or UTF-8 bytes in, str out; a multi-byte character split across chunks is joined.

    Invalid bytes become U+FFFD exactly as ``bytes.decode("utf-8", "replace")`` of the whole.
    """

    def __init__(self) -> None:
        self._dec = codecs.getincrementaldecoder("utf-8")("replace")
        self._pending = False

    def decode(self, chunk: str | bytes | bytearray) -> str:
        if isinstance(chunk, str):
            if self._pending:  # bytes of an unfinished character end as U+FFFD
                self._pending = False
                return self._dec.decode(b"", final=True) + chunk
            return chunk
        self._pending = True
        return self._dec.decode(chunk)

    def flush(self) -> str:
        return self._dec.decode(b"", final=True)


class StreamingGrader:
    """Grade a raw completion fed in chunks (str or bytes, any split).

    ``finish(finish_reason)`` returns what :func:`grade_text` returns for the concatenation with
    ``max_chars`` set to this grader's cap. Memory stays within ``max_chars`` characters plus
    one batch (``BATCH``) and one chunk.
    """

    def __init__(
        self,
        *,
        grammar: str | None = None,
        tools: object = None,
        thinking: bool | None = None,
        max_chars: int = t.DEFAULT_MAX_CHARS,
    ) -> None:
        self.grammar = normalize_grammar(grammar)
        self.tools = ToolSet.from_any(tools)
        self.thinking = thinking
        self._buf = HeadTail(max_chars, self._dropped)
        self._think = ThinkTracker()  # fed only when text is dropped (oversized streams)
        self._head_fed = False
        self._decoder = TextDecoder()
        # pieces of one type (str or bytes) not yet decoded
        self._batch: list[str | bytes | bytearray] = []
        self._batched = 0

    @property
    def chars_seen(self) -> int:
        return self._buf.total

    def feed(self, chunk: str | bytes | bytearray) -> None:
        """Take a piece of the stream. Pieces are batched (up to ``BATCH`` characters or bytes)
        before decoding and buffering, so a tap feeding tiny deltas pays little per call."""
        if self._batch and type(chunk) is not type(self._batch[0]):
            self._flush()
        self._batch.append(chunk)
        self._batched += len(chunk)
        if self._batched >= BATCH:
            self._flush()

    def _flush(self) -> None:
        if not self._batch:
            return
        first = self._batch[0]
        # feed() keeps a batch of one type: all str, or all bytes-like
        joined: str | bytes
        if isinstance(first, str):
            joined = "".join(x for x in self._batch if isinstance(x, str))
        else:
            joined = b"".join(x for x in self._batch if not isinstance(x, str))
        self._batch.clear()
        self._batched = 0
        self._buf.append(self._decoder.decode(joined))

    def _dropped(self, text: str) -> None:
        if not self._head_fed:  # the head is complete before anything is dropped
            self._think.feed(self._buf.head)
            self._head_fed = True
        self._think.feed(text)

    def result(self, finish_reason: str | None = None) -> Result:
        """Grade what has arrived so far (the stream may go on); bytes of a character not yet
        complete are left out until ``finish``."""
        self._flush()
        kept, gap, dropped = self._buf.kept()
        if gap is None:
            think = reasoning_end(kept, self.thinking)
        else:
            tracker = copy.copy(self._think)
            tracker.feed(self._buf.tail)
            think = tracker.end(self.thinking)
        return grade_kept(
            kept,
            think,
            gap,
            dropped,
            grammar=self.grammar,
            finish_reason=finish_reason,
            tools=self.tools,
            thinking=self.thinking,
        )

    def finish(self, finish_reason: str | None = None) -> Result:
        """Grade the complete stream."""
        self._flush()
        self._buf.append(self._decoder.flush())
        return self.result(finish_reason)

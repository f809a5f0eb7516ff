"""Generation length as a dimension of corruption: bounded label values and the token count.

Field reports put DeepSeek-V4 corruption on long generations more than on short ones
(sglang#33397: 0 of 19 answers of 400-1,700 tokens corrupt, 6 of 11 of 4,000-24,576 tokens), and
show it as length inflation (sglang#36179: average output from 600 to 1,100 and 3,000+ tokens
with HiCache). So every graded sample carries its output tokens and finish reason:

- ``output_tokens_le`` is one of ``256, 1024, 4096, 16384, +Inf``, non-cumulative like
  ``concurrency_le`` (:mod:`exporter.samplers.buckets`): a sample is counted once, in the
  smallest bound holding its output tokens;
- the count comes from the response's ``usage.completion_tokens`` (``usage``), else the number
  of streamed content/reasoning/argument deltas (``stream``: SGLang sends one delta per decode
  step unless it batches them, so this can undercount), else an estimate from the characters
  (``estimate``: ``CHARS_PER_TOKEN`` characters per token, the simulator's default too);
- ``finish_reason`` is folded into a closed set so it can be a label.

Pure: no I/O.
"""

from __future__ import annotations

LENGTH_BUCKETS: tuple[int, ...] = (256, 1024, 4096, 16384)
LENGTH_LABELS: tuple[str, ...] = (*(str(b) for b in LENGTH_BUCKETS), "+Inf")
TOKEN_SOURCES: tuple[str, ...] = ("usage", "stream", "estimate")
FINISH_REASONS: tuple[str, ...] = ("stop", "length", "tool_calls", "other", "unknown")
CHARS_PER_TOKEN = 4
"""Characters per token for the estimate: about 4 for English text and code with DeepSeek's
tokenizer (a CJK character is nearer one token: the estimate is low there)."""


def estimate_tokens(text: str) -> int:
    """Output tokens estimated from characters (ceil(len / CHARS_PER_TOKEN))."""
    return -(-len(text) // CHARS_PER_TOKEN)


def length_label(tokens: int | None) -> str:
    """The smallest ``output_tokens_le`` bound holding ``tokens`` (unknown counts as 0)."""
    n = 0 if tokens is None else tokens
    for b in LENGTH_BUCKETS:
        if n <= b:
            return str(b)
    return "+Inf"


def finish_label(finish_reason: str | None) -> str:
    """``finish_reason`` folded into :data:`FINISH_REASONS` (``eos`` is a stop)."""
    if finish_reason is None or finish_reason == "":
        return "unknown"
    if finish_reason in ("stop", "eos"):
        return "stop"
    if finish_reason in ("length", "tool_calls"):
        return finish_reason
    return "other"

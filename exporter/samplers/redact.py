"""Redaction of stored samples: secrets and personal data never reach the samples endpoint.

Default patterns: e-mail addresses, bearer tokens, API keys of common shapes (OpenAI-style
``sk-``, AWS access keys, GitHub tokens, generic ``api_key=...``), JWTs. Operators add their
own regexes in config. Each pattern is compiled once; redaction is linear in the text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

DEFAULT_PATTERNS: tuple[str, ...] = (
    r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}",  # e-mail
    r"(?i)\bbearer\s+[A-Za-z0-9._~+/=-]{8,}",  # Authorization: Bearer ...
    r"\bsk-[A-Za-z0-9_-]{16,}",  # OpenAI-style keys
    r"\bAKIA[0-9A-Z]{16}\b",  # AWS access key id
    r"\bgh[pousr]_[A-Za-z0-9]{30,}\b",  # GitHub tokens
    r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",  # JWT
    r"(?i)\b(api[_-]?key|secret|password|token)\b(\s*[:=]\s*)[\"']?[^\s\"']{6,}",
)
MASK = "[REDACTED]"


class Redactor:
    def __init__(self, patterns: Iterable[str] = DEFAULT_PATTERNS) -> None:
        self.patterns = [re.compile(p) for p in patterns]

    def __call__(self, text: str) -> str:
        for pat in self.patterns:
            if pat.groups >= 2:
                text = pat.sub(lambda m: m.group(1) + m.group(2) + MASK, text)
            else:
                text = pat.sub(MASK, text)
        return text

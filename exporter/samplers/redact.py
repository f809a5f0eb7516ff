"""Redaction of stored samples: secrets and personal data never reach the samples endpoint.

Every field a stored sample carries out of the process (text, span details, request id)
goes through :class:`Redactor`. Default rules, each with a trigger and a near-miss test in
``tests/hostile/test_secrets_redaction.py``:

- e-mail addresses; ``Authorization: Bearer`` tokens; ``Basic`` credentials (any case; only
  when the base64 decodes to ``user:password``) and ``scheme://user:password@`` in URLs (the
  user may be empty, as in ``redis://:password@``);
- key shapes: OpenAI/Anthropic-style ``sk-``, Stripe ``sk_live_``/``rk_test_``, AWS access key
  ids, GitHub tokens (``ghp_`` ..., ``github_pat_``), Slack ``xox?-`` tokens (any letter),
  Google ``AIza`` keys, JWTs (also unsigned: an empty signature);
- PEM blocks (``-----BEGIN ...-----`` to its ``END`` line, or to the end of the text when
  the end was cut off);
- payment card numbers (13-19 digits, spaces or dashes allowed, Luhn-valid; a sentence may end
  right after one, a decimal such as ``3.14159...`` is not one);
- values of secret-named keys (``password``, ``passwd``, ``secret``, ``token``, ``api_key``,
  ``access_key``, ``private_key``, ``secret_key``, ``credential(s)``, ``auth``, with any
  prefix such as ``db_`` or ``client_``) in every form they come in: ``key=value``,
  ``key: value`` (a quoted value to its closing quote, spaces and all; a bare one to
  whitespace or one of ``"',;}&``),
  JSON ``"key": "value"``, the same JSON escaped inside a string (OpenAI tool-call
  ``arguments``), and DSML ``parameter name="key"`` values.

``tests/hostile/test_redaction_forms.py`` generates secrets in each of these forms and checks
that none survives. Operators add their own regexes (``redact_patterns``); each one's whole
match is masked.
Each pattern is compiled once and runs in linear time over bounded text (the store redacts
at most ``sample_text_cap`` plus a margin).
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

MASK = "[REDACTED]"

# A key whose value is a secret: the secret word ends the key (``db_password``, ``apiKey``),
# so ``token_count``, ``max_tokens`` or ``secretary`` are not matched.
_SECRET_KEY = (
    r"[A-Za-z0-9_.-]{0,40}?(?:pass(?:word|wd)|secret(?:[_-]?key)?|token|api[_-]?key|apikey"
    r"|access[_-]?key|private[_-]?key|credentials?|auth)"
)
_KEY_END = r"(?![A-Za-z0-9_-])"
_PARAM_VALUE_END = "(?=<[/\uff5c|]|\\Z)"


@dataclass(frozen=True)
class Rule:
    """One redaction: ``apply`` takes a text and returns it with this rule's matches masked."""

    name: str
    apply: Callable[[str], str]


def _mask(_m: re.Match[str]) -> str:
    return MASK


def _keep_prefix(m: re.Match[str]) -> str:
    """Keep group 1 (the key and separator), mask the value."""
    return m.group(1) + MASK


_PEM_BEGIN = re.compile(r"-----BEGIN ([A-Z0-9 ]{1,40})-----")


def _mask_pem(text: str) -> str:
    """Mask every PEM block's body, to its ``END`` line or, when that was cut off, to the end
    of the text. Plain ``find`` from one block to the next keeps it linear."""
    out: list[str] = []
    pos = 0
    while (m := _PEM_BEGIN.search(text, pos)) is not None:
        label = m.group(1)
        end_line = f"-----END {label}-----"
        end = text.find(end_line, m.end())
        out.append(text[pos : m.start()])
        out.append(f"-----BEGIN {label}-----{MASK}{end_line}")
        if end < 0:
            return "".join(out)
        pos = end + len(end_line)
    out.append(text[pos:])
    return "".join(out)


def _basic(m: re.Match[str]) -> str:
    """Mask a Basic credential only when it decodes to ``user:password``."""
    blob = m.group(2)
    try:
        decoded = base64.b64decode(blob + "=" * (-len(blob) % 4), validate=True)
    except (binascii.Error, ValueError):
        return m.group(0)
    return m.group(1) + MASK if b":" in decoded else m.group(0)


def _card(m: re.Match[str]) -> str:
    digits = re.sub(r"\D", "", m.group(0))
    return MASK if 13 <= len(digits) <= 19 and luhn_ok(digits) else m.group(0)


def luhn_ok(digits: str) -> bool:
    """The Luhn checksum every payment card number satisfies (and 9 in 10 digit runs fail)."""
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def _rule(name: str, pattern: str, replace: Callable[[re.Match[str]], str] = _mask) -> Rule:
    compiled = re.compile(pattern)
    return Rule(name, lambda text: compiled.sub(replace, text))


DEFAULT_RULES: tuple[Rule, ...] = (
    Rule("pem", _mask_pem),
    # DSML parameter values under a secret-named parameter (V3.2 and V4 grammars).
    _rule(
        "dsml_parameter",
        r"(?i)(parameter\s+name\s*=\s*\\?\"" + _SECRET_KEY + r"\\?\"[^>\n]{0,80}>)"
        r"[\s\S]*?" + _PARAM_VALUE_END,
        _keep_prefix,
    ),
    # JSON "key": "value" (the value may hold escaped quotes) ...
    _rule(
        "json_pair",
        r'(?i)("' + _SECRET_KEY + r'"\s*:\s*")(?:\\.|[^"\\])*',
        _keep_prefix,
    ),
    # ... and the same JSON escaped inside a JSON string (OpenAI tool-call ``arguments``).
    _rule(
        "escaped_json_pair",
        r'(?i)(\\"' + _SECRET_KEY + r'\\"\s*:\s*\\")(?:\\\\\\.|\\[^"\\]|[^"\\])*',
        _keep_prefix,
    ),
    _rule(
        "url_userinfo",
        r"(?i)(\b[a-z][a-z0-9+.-]{1,20}://[^\s/:@]{0,100}:)[^\s/@]{1,200}(?=@)",
        _keep_prefix,
    ),
    _rule("basic_auth", r"(?i)(\bbasic\s+)([A-Za-z0-9+/]{6,}={0,2})", _basic),
    _rule("bearer", r"(?i)\bbearer\s+[A-Za-z0-9._~+/=-]{8,}"),
    _rule("sk_key", r"\bsk-[A-Za-z0-9_-]{16,}"),
    _rule("stripe_key", r"\b[rs]k_(?:live|test)_[A-Za-z0-9]{16,}"),
    _rule("aws_access_key", r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    _rule("github_token", r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{22,})"),
    _rule("slack_token", r"\bxox[a-z]-[A-Za-z0-9-]{10,}"),
    _rule("google_api_key", r"\bAIza[0-9A-Za-z_-]{35}"),
    # the signature may be short or empty (``alg: none``): header and payload are the secret
    _rule("jwt", r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*"),
    # local part at most 64 characters (RFC 5321), tried only where a run starts: linear
    _rule(
        "email",
        r"(?<![A-Za-z0-9._%+-])[A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9-]{1,63}(?:\.[A-Za-z0-9-]{1,63}){0,8}"
        r"\.[A-Za-z]{2,24}\b",
    ),
    # key=value and key: value outside JSON quotes (env files, logs, command lines).
    _rule(
        "key_value",
        r"(?i)((?<![A-Za-z0-9])" + _SECRET_KEY + _KEY_END + r"['\"]?\s*[:=]\s*)"
        r"(?!['\"]?\[REDACTED\])"
        # a quoted value to its closing quote (spaces and all), else a bare one to a delimiter
        r"(?:\"(?:[^\"\\\n]|\\.){1,200}\"|'[^'\n]{1,200}'|[^\s\"',;}&]{4,})",
        _keep_prefix,
    ),
    # not inside a longer digit run or a decimal (``3.14...``), but a sentence may end after it
    _rule(
        "card_number",
        r"(?<!\d)(?<!\d\.)[2-6]\d(?:[ -]?\d){11,17}(?!\d)(?!\.\d)",
        _card,
    ),
)


class Redactor:
    """Applies the default rules, then the operator's ``extra`` regexes (whole match)."""

    def __init__(self, extra: Iterable[str] = (), *, defaults: bool = True) -> None:
        rules = list(DEFAULT_RULES) if defaults else []
        rules += [_rule(f"custom_{i}", p) for i, p in enumerate(extra)]
        self.rules = tuple(rules)

    def __call__(self, text: str) -> str:
        for rule in self.rules:
            text = rule.apply(text)
        return text

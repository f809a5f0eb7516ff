"""Generated secrets in every form exporter/samplers/redact.py's documentation names: none
survives :class:`Redactor`.

``tests/hostile/test_secrets_redaction.py`` has one trigger per rule; a rule can pass its one
trigger and still miss its form's ordinary variants (an empty user name in a URL, a card
number that ends a sentence, a quoted value with spaces, ``SECRET_KEY``). Here each documented
form is a Hypothesis strategy over the variants its documentation admits, placed in
surrounding text, and the assertion is that no piece of the secret is left in the output.
"""

from __future__ import annotations

import base64
import json
import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exporter.samplers.redact import Redactor

FORMS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
B = "\uff5c"  # the DSML bar
ALNUM = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
UPPER_DIGITS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
REDACT = Redactor()

# What a secret sits in: prose around it, ending a sentence, in brackets or quotes, a log line.
BEFORE = st.sampled_from(["", "see ", "log: ", "(", "[", "\n", "value\t", "note - "])
AFTER = st.sampled_from(["", ".", ",", ")", "]", " end", "\n", ". Next line", ";"])


def _rand(alphabet: str, lo: int, hi: int) -> st.SearchStrategy[str]:
    """Random text ending in a digit, so it never collides with the prose around it."""
    return st.text(alphabet, min_size=lo, max_size=hi).map(lambda s: s[:-1] + "7")


def assert_gone(text: str, *secrets: str, frame: str = "") -> None:
    """No secret, and no run of 6 of its characters, is left in the redacted text. A run that
    ``frame`` (the text around the secret, without it) holds is no leak: "functi" of a password
    ``functi7`` in ``{"function": ...}`` is there whatever the redactor does."""
    out = REDACT(text)
    for secret in secrets:
        pieces = {secret} | {secret[i : i + 6] for i in range(max(0, len(secret) - 5))}
        pieces = {
            p for p in pieces if len(p) >= 6 and re.search(r"[A-Za-z0-9]", p) and p not in frame
        }
        left = sorted(p for p in pieces if p in out)
        assert not left, f"{left[:3]} of {secret!r} left in {out!r}"


# --- e-mail, Bearer, Basic, URL userinfo -------------------------------------------------


@FORMS
@given(
    BEFORE,
    AFTER,
    _rand(ALNUM + "._%+-", 6, 40).filter(lambda s: s[0] not in ".-" and s[-1] != "."),
    st.lists(_rand("abcdefghijklmnop0123456789", 2, 12), min_size=1, max_size=3),
    st.sampled_from(["com", "org", "io", "co.uk", "internal", "DE"]),
)
def test_email(before: str, after: str, local: str, labels: list[str], tld: str) -> None:
    address = f"{local}@{'.'.join(labels)}.{tld}"
    assert_gone(before + address + after, address, local)


@FORMS
@given(
    BEFORE,
    AFTER,
    st.sampled_from(["Authorization: Bearer ", "authorization: bearer ", "BEARER ", "Bearer  "]),
    _rand(ALNUM + "-._~+/", 8, 80).map(lambda s: s + "=" * (len(s) % 3)),
)
def test_bearer(before: str, after: str, scheme: str, token: str) -> None:
    assert_gone(before + scheme + token + after, token)


@FORMS
@given(
    BEFORE,
    AFTER,
    st.sampled_from(["Authorization: Basic ", "Basic ", "basic ", "BASIC "]),
    _rand(ALNUM, 1, 20),
    _rand(ALNUM + "!#$%&*+-.:@^_~", 6, 30),
)
def test_basic(before: str, after: str, scheme: str, user: str, password: str) -> None:
    blob = base64.b64encode(f"{user}:{password}".encode()).decode()
    assert_gone(before + scheme + blob + after, blob)


# RFC 3986 userinfo: unreserved, percent-encoded, sub-delims and ":" (not "/", "@" or space)
USERINFO = ALNUM + "-._~!$&'()*+,;=:%"


@FORMS
@given(
    BEFORE,
    AFTER,
    st.sampled_from(["postgres", "mysql", "redis", "rediss", "https", "amqp", "mongodb+srv"]),
    st.sampled_from(["", "app", "admin", "svc.user", "u-x", "%40me"]),
    _rand(USERINFO, 6, 40),
    st.sampled_from(["db.internal:5432/app", "localhost", "10.0.0.7:6379/0", "h.example.com/"]),
)
def test_url_userinfo(
    before: str, after: str, scheme: str, user: str, password: str, host: str
) -> None:
    url = f"{scheme}://{user}:{password}@{host}"
    assert_gone(before + url + after, password)


# --- key shapes ---------------------------------------------------------------------------


@FORMS
@given(
    BEFORE,
    AFTER,
    st.sampled_from(["sk-", "sk-proj-", "sk-ant-api03-", "sk-svcacct-"]),
    _rand(ALNUM + "_-", 20, 100),
)
def test_sk_key(before: str, after: str, prefix: str, body: str) -> None:
    assert_gone(before + prefix + body + after, body)


@FORMS
@given(
    BEFORE,
    AFTER,
    st.sampled_from(["sk", "rk"]),
    st.sampled_from(["live", "test"]),
    _rand(ALNUM, 24, 99),
)
def test_stripe_key(before: str, after: str, kind: str, mode: str, body: str) -> None:
    assert_gone(before + f"{kind}_{mode}_{body}" + after, body)


@FORMS
@given(
    st.sampled_from(["", "see ", "aws_access_key_id = ", "AWS_ACCESS_KEY_ID=", '"AccessKeyId": "']),
    AFTER,
    st.sampled_from(["AKIA", "ASIA"]),
    _rand(UPPER_DIGITS, 16, 16),
)
def test_aws_access_key(before: str, after: str, prefix: str, body: str) -> None:
    assert_gone(before + prefix + body + after, body)


@FORMS
@given(
    BEFORE,
    AFTER,
    st.one_of(
        st.tuples(st.sampled_from(["ghp_", "gho_", "ghu_", "ghs_", "ghr_"]), _rand(ALNUM, 36, 36)),
        st.tuples(st.just("github_pat_"), _rand(ALNUM + "_", 82, 82)),
    ),
)
def test_github_token(before: str, after: str, token: tuple[str, str]) -> None:
    assert_gone(before + token[0] + token[1] + after, token[1])


@FORMS
@given(
    BEFORE,
    AFTER,
    st.sampled_from(["xoxb-", "xoxp-", "xoxa-", "xoxr-", "xoxs-", "xoxo-", "xoxe-", "xoxe.xoxp-"]),
    _rand("0123456789", 10, 13),
    _rand(ALNUM, 24, 32),
)
def test_slack_token(before: str, after: str, prefix: str, team: str, body: str) -> None:
    assert_gone(before + f"{prefix}1-{team}-{body}" + after, team, body)


@FORMS
@given(BEFORE, AFTER, _rand(ALNUM + "_-", 35, 35))
def test_google_api_key(before: str, after: str, body: str) -> None:
    assert_gone(before + "AIza" + body + after, body)


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


@FORMS
@given(
    BEFORE,
    AFTER,
    st.sampled_from(["HS256", "RS256", "ES256", "none"]),
    st.dictionaries(
        st.sampled_from(["sub", "iss", "exp", "email"]), _rand(ALNUM, 4, 20), min_size=1
    ),
    st.binary(min_size=0, max_size=64),
)
def test_jwt(before: str, after: str, alg: str, claims: dict[str, str], sig: bytes) -> None:
    header = _b64url(json.dumps({"alg": alg, "typ": "JWT"}).encode())
    payload = _b64url(json.dumps(claims).encode())
    signature = "" if alg == "none" else _b64url(sig or b"signature")
    assert_gone(before + f"{header}.{payload}.{signature}" + after, payload)


@FORMS
@given(
    BEFORE,
    st.sampled_from(
        [
            "PRIVATE KEY",
            "RSA PRIVATE KEY",
            "EC PRIVATE KEY",
            "OPENSSH PRIVATE KEY",
            "ENCRYPTED PRIVATE KEY",
            "DSA PRIVATE KEY",
        ]
    ),
    st.lists(_rand(ALNUM + "+/", 16, 64), min_size=1, max_size=6),
    st.sampled_from(["\n", "\r\n"]),
    st.booleans(),  # the END line was cut off
)
def test_pem(before: str, label: str, lines: list[str], nl: str, cut: bool) -> None:
    body = nl.join(lines)
    end = "" if cut else f"{nl}-----END {label}-----{nl}after"
    assert_gone(f"{before}-----BEGIN {label}-----{nl}{body}{end}", *lines)


def _luhn_complete(partial: str) -> str:
    """``partial`` plus the check digit that makes it Luhn-valid."""
    total = 0
    for i, ch in enumerate(reversed(partial)):
        d = int(ch)
        if i % 2 == 0:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return partial + str((10 - total % 10) % 10)


# Issuer prefixes and lengths (Visa, Mastercard 5x/2x, Amex, Discover, JCB, Diners, UnionPay)
CARDS = [
    ("4", 13),
    ("4", 16),
    ("4", 19),
    ("51", 16),
    ("55", 16),
    ("2221", 16),
    ("2720", 16),
    ("34", 15),
    ("37", 15),
    ("6011", 16),
    ("65", 19),
    ("35", 16),
    ("36", 14),
    ("62", 19),
]


@FORMS
@given(
    st.sampled_from(["", "card ", "no.", "#", "card: ", "(", "number="]),
    AFTER,
    st.sampled_from(CARDS),
    st.text("0123456789", min_size=19, max_size=19),
    st.sampled_from(["", " ", "-"]),
)
def test_card_number(before: str, after: str, card: tuple[str, int], fill: str, sep: str) -> None:
    prefix, length = card
    number = _luhn_complete((prefix + fill)[: length - 1])
    grouped = sep.join(number[i : i + 4] for i in range(0, len(number), 4))
    assert_gone(before + grouped + after, number[-8:], grouped)


# --- values of secret-named keys, in every form they come in -------------------------------

WORDS = [
    "password",
    "passwd",
    "secret",
    "token",
    "api_key",
    "api-key",
    "apikey",
    "apiKey",
    "access_key",
    "accessKey",
    "private_key",
    "credential",
    "credentials",
    "auth",
    "secret_key",
    "secretKey",
]
PREFIXES = ["", "db_", "client_", "x-", "app.", "my", "AWS_", "refresh_", "github-"]
SECRET_KEYS = st.builds(
    lambda p, w, case: case(p + w),
    st.sampled_from(PREFIXES),
    st.sampled_from(WORDS),
    st.sampled_from([str, str.upper, str.lower]),
)
# a bare value runs to whitespace or one of "',;}& (JSON objects, query strings, lists)
UNQUOTED = _rand(ALNUM + "!#$%*+-./:<>?@[]^_`{|~=", 8, 40)
QUOTED = st.lists(_rand(ALNUM + "!#$%*+-./:@^_~,;&", 6, 16), min_size=1, max_size=4).map(" ".join)


@FORMS
@given(BEFORE, AFTER, SECRET_KEYS, st.sampled_from(["=", ": ", " = ", ":", "= "]), UNQUOTED)
def test_key_value(before: str, after: str, key: str, sep: str, value: str) -> None:
    assert_gone(before + key + sep + value + (" " + after if after else ""), value)


@FORMS
@given(
    BEFORE, SECRET_KEYS, st.sampled_from(["=", ": ", " = "]), st.sampled_from(["'", '"']), QUOTED
)
def test_key_quoted_value(before: str, key: str, sep: str, quote: str, value: str) -> None:
    assert_gone(f"{before}{key}{sep}{quote}{value}{quote} rest", *value.split(" "))


JSON_VALUES = (
    st.lists(
        st.one_of(_rand(ALNUM + " !#$%*+-./:@^_~,;&<>{}[]", 6, 20), st.sampled_from(['"', "\\"])),
        min_size=1,
        max_size=4,
    )
    .map("".join)
    .filter(lambda v: re.search(r"[A-Za-z0-9]{6}", v) is not None)
)


def _value_pieces(value: str) -> list[str]:
    return re.findall(r"[A-Za-z0-9]{6,}", value)


@FORMS
@given(SECRET_KEYS, JSON_VALUES, st.booleans())
def test_json_pair(key: str, value: str, compact: bool) -> None:
    sep = (",", ":") if compact else (", ", ": ")

    def text(value: str) -> str:
        return json.dumps({"user": "bob", key: value, "n": 1}, separators=sep)

    assert_gone(text(value), *_value_pieces(value), frame=text(""))


@FORMS
@given(SECRET_KEYS, JSON_VALUES, st.booleans())
def test_escaped_json_pair(key: str, value: str, compact: bool) -> None:
    sep = (",", ":") if compact else (", ", ": ")

    def text(value: str) -> str:
        arguments = json.dumps({"user": "bob", key: value}, separators=sep)
        return json.dumps({"tool_calls": [{"function": {"name": "login", "arguments": arguments}}]})

    assert_gone(text(value), *_value_pieces(value), frame=text(""))


@FORMS
@given(
    SECRET_KEYS,
    st.lists(_rand(ALNUM + " !#$%*+-./:@^_~,;&\n{}\"'=", 6, 20), min_size=1, max_size=3).map(
        "".join
    ),
    st.sampled_from(['string="true"', 'string="false"']),
)
def test_dsml_parameter(key: str, value: str, kind: str) -> None:
    text = (
        f'<{B}DSML{B}tool_calls>\n<{B}DSML{B}invoke name="login">\n'
        f'<{B}DSML{B}parameter name="{key}" {kind}>{value}</{B}DSML{B}parameter>\n'
        f"</{B}DSML{B}invoke>\n</{B}DSML{B}tool_calls>"
    )
    assert_gone(text, *_value_pieces(value))

"""No secret of the listed kinds comes back from GET /api/v1/samples, in any field.

Every default redaction rule has a trigger (masked) and a near miss (left alone), and the
end-to-end test feeds secrets through every field the endpoint returns: text, loop span
details, OpenAI tool-call arguments, DSML parameters, the request id, and a key cut by the
text cap."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from exporter.samplers.redact import DEFAULT_RULES, MASK, Redactor, luhn_ok
from exporter.samplers.store import SampleStore
from tests.hostile.ingest_support import AUTH, BAD, graded, sidecar
from tests.support import scrape, wait_for

pytestmark = pytest.mark.e2e
B = "\uff5c"  # the DSML bar

# rule name -> (trigger, the secret part that must vanish, near miss left untouched)
CASES: dict[str, tuple[str, str, str]] = {
    "pem": (
        "key:\n-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7\n-----END RSA PRIVATE KEY-----",
        "MIIEowIBAAKCAQEA7",
        "a line of dashes ----- BEGIN here ----- is prose",
    ),
    "dsml_parameter": (
        f'<{B}DSML{B}parameter name="db_password" string="true">hunter2 x</{B}DSML{B}parameter>',
        "hunter2 x",
        f'<{B}DSML{B}parameter name="password_hint" string="true">pet name</{B}DSML{B}parameter>',
    ),
    "json_pair": (
        '{"api_key": "abc\\"123", "user": "bob"}',
        'abc\\"123',
        '{"max_tokens": "1000000", "token_count": "123456", "author": "Jane Roe"}',
    ),
    "escaped_json_pair": (
        json.dumps({"arguments": json.dumps({"password": 'pa"ss word'})}),
        "ss word",
        json.dumps({"arguments": json.dumps({"passwords_reset": "yes please"})}),
    ),
    "url_userinfo": (
        "postgres://app:s3cr3tpw@db.internal:5432/x",
        "s3cr3tpw",
        "see https://docs.example.org:443/path for details",
    ),
    "basic_auth": (
        "Authorization: Basic dXNlcjpwYXNzd29yZA==",
        "dXNlcjpwYXNzd29yZA==",
        "Basic information about basically everything",
    ),
    "bearer": (
        "Authorization: Bearer abcdefghijklmnop1234",
        "abcdefghijklmnop1234",
        "the bearer bonds",
    ),
    "sk_key": ("key sk-proj-abcdefghijklmnopqrstuv", "abcdefghijklmnop", "pip install sk-learn"),
    "stripe_key": ("sk_live_abcdefghijklmnop1234", "abcdefghijklmnop1234", "sk_live_ short"),
    "aws_access_key": ("AKIAIOSFODNN7EXAMPLE", "IOSFODNN7EXAMPLE", "AKIA is a prefix"),
    "github_token": ("ghp_" + "a1" * 18, "a1" * 18, "ghp_short and gh_pages"),
    "slack_token": (
        "xoxb-1234567890-abcdefghijkl",
        "1234567890-abcdefghijkl",
        "xoxb-short is too short",
    ),
    "google_api_key": ("AIza" + "B" * 35, "B" * 35, "AIza is not a key by itself"),
    "jwt": (
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NSJ9.c2lnbmF0dXJlMTIz",
        "eyJzdWIiOiIxMjM0NSJ9",
        "eyJ then nothing",
    ),
    "email": ("mail ops@example.com", "ops@example.com", "the @ sign and example.com"),
    "key_value": (
        "DB_PASSWORD=correcthorse",
        "correcthorse",
        "token usage 0.4, max_tokens=100000, secretary: Ann",
    ),
    "card_number": (
        "card 4111 1111 1111 1111 exp 12/30",
        "4111 1111 1111 1111",
        "order 4111 1111 1111 1112 and ts 1700000000123",  # Luhn fails; not a card prefix
    ),
}


def test_every_default_rule_has_a_trigger_and_a_near_miss() -> None:
    assert set(CASES) == {rule.name for rule in DEFAULT_RULES}


@pytest.mark.parametrize("name", sorted(CASES))
def test_rule_trigger_and_near_miss(name: str) -> None:
    trigger, secret, near_miss = CASES[name]
    only = Redactor(defaults=False)
    only.rules = tuple(r for r in DEFAULT_RULES if r.name == name)
    masked = only(trigger)
    assert MASK in masked and secret not in masked, masked
    assert only(near_miss) == near_miss
    everything = Redactor()
    assert secret not in everything(trigger)
    assert everything(near_miss) == near_miss


def test_luhn() -> None:
    assert luhn_ok("4111111111111111") and not luhn_ok("4111111111111112")


def test_operator_patterns_mask_the_whole_match() -> None:
    assert Redactor(["secret[0-9]+"])("a secret42 b") == f"a {MASK} b"


def test_a_key_cut_by_the_cap_leaves_nothing_behind() -> None:
    store = SampleStore(text_cap=300)
    key = "sk-" + "Zq7" * 14
    for shift in range(0, 44, 3):  # the cap falls at every point of the key
        text = "x " * ((300 - shift) // 2) + key + " tail " * 10
        kept, truncated = store.safe_text(text, 300)
        assert truncated and len(kept) <= 300
        assert "Zq7Zq7" not in kept and "sk-Z" not in kept, (shift, kept[-40:])


def test_pem_cut_by_the_cap_is_masked_to_the_end() -> None:
    store = SampleStore(text_cap=256)
    pem = "-----BEGIN PRIVATE KEY-----\n" + "QUJD" * 400 + "\n-----END PRIVATE KEY-----"
    kept, _ = store.safe_text("key " + pem, 256)
    assert "QUJDQUJD" not in kept


def _completion_with_args(arguments: str) -> dict:
    call = {"id": "c1", "type": "function", "function": {"name": "login", "arguments": arguments}}
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": None, "tool_calls": [call]},
                "finish_reason": "tool_calls",
            }
        ],
    }


def test_no_secret_comes_back_from_the_samples_endpoint() -> None:
    key_at_cap = "sk-" + "Kx9" * 15
    secrets = [case[1] for case in CASES.values()] + ["LOOPSECRET9", "Kx9Kx9", "hunter2pw"]
    samples = [{"text": f"{trigger} {BAD}", "concurrency": 8} for trigger, _, _ in CASES.values()]
    samples += [
        {"text": "password=LOOPSECRET9 " * 30 + BAD},  # an n-gram loop: its span quotes it
        {"text": "y " * 2035 + key_at_cap + " " + BAD},  # the 4096 cap cuts the key
        {"text": BAD, "request_id": "token=hunter2pw"},
        {"text": BAD, "request_id": "sk-proj-abcdefghijklmnopqrstuv"},
        # invalid JSON arguments (degenerate), carrying a password
        {"response": _completion_with_args('{"user": "bob", "password": "hunter2pw", ')},
    ]
    with sidecar() as sc:
        r = httpx.post(sc.url + "/api/v1/samples", json=samples, timeout=30)
        assert r.status_code == 200 and r.json()["accepted"] == len(samples)
        wait_for(lambda: graded(sc.url) == len(samples), timeout=30)
        listed = httpx.get(sc.url + "/api/v1/samples?limit=1000", headers=AUTH, timeout=10)
        metrics = scrape(sc.url, Accept="application/openmetrics-text; version=1.0.0")
    assert listed.status_code == 200
    items = listed.json()["samples"]
    assert len(items) == len(samples)  # all degenerate, all stored
    body = json.dumps(items, ensure_ascii=False)
    leaked = [s for s in secrets if s in body or json.dumps(s)[1:-1] in body]
    assert not leaked
    assert any(s.get("detail") for i in items for s in i["spans"])  # details were kept, masked
    assert MASK in body
    assert "hunter2pw" not in metrics and "abcdefghijklmnop" not in metrics  # exemplars


ADVERSARIAL = {
    "letters": "a",
    "word_runs": "a_",
    "at_signs": "a@",
    "pem_begins": "-----BEGIN X-----\n",
    "json_keys": '"password": "',
    "escaped_json_keys": '\\"password\\": \\"',
    "dsml_parameters": 'parameter name="password">',
    "digits": "4 ",
    "key_equals": "password=",
    "url_userinfo": "http://a:",
    "basic": "Basic ",
}


def _seconds(redactor: Redactor, text: str) -> float:
    best = float("inf")
    for _ in range(2):
        t0 = time.thread_time()
        redactor(text)
        best = min(best, time.thread_time() - t0)
    return best


@pytest.mark.parametrize("shape", sorted(ADVERSARIAL))
def test_redaction_time_grows_linearly(shape: str) -> None:
    redactor = Redactor()
    unit = ADVERSARIAL[shape]
    small = unit * (20_000 // len(unit))
    large = unit * (80_000 // len(unit))
    t_small, t_large = _seconds(redactor, small), _seconds(redactor, large)
    # 4x the input: linear is ~4x, quadratic 16x; the floor absorbs timer noise on tiny times
    assert t_large <= 8 * max(t_small, 0.002), (t_small, t_large)

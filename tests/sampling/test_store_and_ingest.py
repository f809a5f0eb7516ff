"""Redaction, the bounded triage store, concurrency buckets, and ingest body parsing."""

from __future__ import annotations

import json

import pytest

from exporter.samplers.buckets import BUCKET_LABELS, bucket_label
from exporter.samplers.decode import ResponseOutput
from exporter.samplers.ingest import IngestError, parse_body
from exporter.samplers.redact import MASK, Redactor
from exporter.samplers.store import SampleStore


@pytest.mark.parametrize(
    "secret",
    [
        "ops@example.com",
        "Authorization: Bearer abcdefghijklmnop1234",
        "sk-proj-abcdefghijklmnopqrstuv",
        "AKIAIOSFODNN7EXAMPLE",
        "ghp_" + "a" * 36,
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NSJ9.c2lnbmF0dXJlMTIz",
        "api_key=hunter2hunter2",
    ],
)
def test_default_redaction(secret):
    out = Redactor()(f"before {secret} after")
    assert MASK in out and out.startswith("before") and out.endswith("after")
    core = secret.split("=")[-1].split()[-1]
    assert core not in out


def test_redaction_leaves_ordinary_text():
    text = 'run_shell(command="kubectl get pods -n inference") -> 3 pods, token usage 0.4'
    assert Redactor()(text) == text


def test_store_bounded_truncated_redacted_and_selective():
    store = SampleStore(capacity=3, text_cap=300)
    assert not store.add(
        source="tap",
        concurrency=1,
        verdict="well_formed",
        reasons=[],
        spans=[],
        text="fine",
        request_id=None,
    )
    for i in range(5):
        store.add(
            source="tap",
            concurrency=i,
            verdict="degenerate",
            reasons=["ngram_loop"],
            spans=[{"start": 1, "end": 4}, {"start": 400, "end": 410}],
            text="mail me at a@b.io " + "x" * 1000,
            request_id=f"r{i}",
        )
    items = store.recent()
    assert len(items) == 3 and [i["request_id"] for i in items] == ["r4", "r3", "r2"]
    assert all(len(i["text"]) <= 300 and i["truncated"] for i in items)
    assert "a@b.io" not in items[0]["text"]
    assert items[0]["spans"] == [{"start": 1, "end": 4}]  # spans beyond the kept text dropped
    assert store.recent(verdict="suspect") == []


def test_buckets():
    assert [bucket_label(c) for c in (None, 0, 1, 2, 4, 5, 60, 64, 65, 128, 129)] == [
        "1",
        "1",
        "1",
        "4",
        "4",
        "8",
        "64",
        "64",
        "128",
        "128",
        "+Inf",
    ]
    assert BUCKET_LABELS == ("1", "4", "8", "16", "32", "64", "128", "+Inf")


def test_ingest_shapes():
    one = parse_body(json.dumps({"text": "hi", "concurrency": 3, "request_id": "r"}).encode())
    assert len(one.samples) == 1 and one.samples[0].concurrency == 3
    batch = parse_body(json.dumps({"samples": [{"text": "a"}, {"choices": []}]}).encode())
    assert len(batch.samples) == 2 and batch.samples[1].output == ResponseOutput({"choices": []})
    assert len(parse_body(b'[{"text": "a"}, {"text": "b"}]').samples) == 2


@pytest.mark.parametrize(
    ("item", "match"),
    [
        ({"text": 1}, "'text' must be a string"),
        ({}, "exactly one of"),
        ({"text": "a", "response": {}}, "exactly one of"),
        ({"text": "a", "concurrency": -1}, "concurrency"),
        ({"text": "a", "concurrency": True}, "concurrency"),
        ({"text": "a", "grammar": "v5"}, "grammar"),
        ({"text": "a", "tools": "get_weather"}, "tools"),
        ("just a string", "JSON object"),
    ],
)
def test_ingest_item_errors_are_specific(item, match):
    parsed = parse_body(json.dumps([item, {"text": "ok"}]).encode())
    assert len(parsed.samples) == 1  # the good one is kept
    assert parsed.rejected[0].index == 0 and match in parsed.rejected[0].error


@pytest.mark.parametrize(("raw", "match"), [(b"{nope", "not valid JSON"), (b"[]", "no samples")])
def test_ingest_body_errors(raw, match):
    with pytest.raises(IngestError, match=match):
        parse_body(raw)

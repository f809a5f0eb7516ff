"""Every sample-store setting applies when set the way an operator sets it: a YAML file given
to ``dsv4-sidecar serve --config``, a real uvicorn on 127.0.0.1, samples posted to ingest and
read back from ``GET /api/v1/samples`` with the bearer token.

The store's settings were once built into a store the grading pipeline then replaced with a
default one (an empty store is falsy: ``store or SampleStore()``), so ``redact_patterns``,
``sample_text_cap``, ``samples_capacity`` and ``samples_max_bytes`` were silently ignored;
unit tests of the store alone could not see it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.hostile.ingest_support import BAD, INGEST_TOKEN, graded
from tests.hostile.ingest_support import TOKEN as SAMPLES_TOKEN
from tests.hostile.ingest_support import serve_config as serve
from tests.support import wait_for

pytestmark = pytest.mark.e2e


def post_and_list(url: str, samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Ingest ``samples`` (all degenerate), wait until all are graded, return what is stored."""
    r = httpx.post(
        url + "/api/v1/samples",
        json=samples,
        headers={"Authorization": f"Bearer {INGEST_TOKEN}"},
        timeout=60,
    )
    assert r.status_code == 200 and r.json()["accepted"] == len(samples), r.text
    wait_for(lambda: graded(url) == len(samples), timeout=60)
    listed = httpx.get(
        url + "/api/v1/samples?limit=100000",
        headers={"Authorization": f"Bearer {SAMPLES_TOKEN}"},
        timeout=30,
    )
    assert listed.status_code == 200
    items: list[dict[str, Any]] = listed.json()["samples"]
    return items


def test_redact_patterns_text_cap_and_capacity_apply(tmp_path: Path) -> None:
    secret = "ACME-993311"
    text = f"{BAD} order {secret} " + "lorem ipsum dolor " * 170  # 3,000+ characters
    with serve(
        tmp_path,
        redact_patterns=["ACME-[0-9]{6}"],
        sample_text_cap=300,
        samples_capacity=2,
    ) as url:
        items = post_and_list(url, [{"text": text, "request_id": f"r{i}"} for i in range(3)])
    assert len(items) == 2  # samples_capacity: the oldest went
    assert [i["request_id"] for i in items] == ["r2", "r1"]
    for item in items:
        assert len(item["text"]) <= 300 and item["truncated"]  # sample_text_cap
        assert "ACME-" not in item["text"] and "[REDACTED]" in item["text"]  # redact_patterns
    assert secret not in json.dumps(items)


def test_samples_max_bytes_applies(tmp_path: Path) -> None:
    cap = 256 << 10
    text = BAD + " " + "abcdefgh " * (300_000 // 9)
    with serve(tmp_path, sample_text_cap=cap, samples_max_bytes=1 << 20) as url:
        items = post_and_list(url, [{"text": text} for _ in range(8)])
    # eight samples of 256 Ki characters would be 2 MiB: the 1 MiB limit keeps at most four
    assert 1 <= len(items) <= 4
    assert all(cap - 16 <= len(i["text"]) <= cap for i in items)  # the cap, not the default

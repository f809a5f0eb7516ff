"""Issue 24's hostile inputs against the real process (``dsv4-sidecar serve``), not a source in
isolation: while SGLang answers each hostile shape and the probe directory holds a FIFO, a
number past the float range and thousands of rank files, ``/healthz`` and ``/metrics`` keep
answering, each input shows as its specific, bounded result, the process recovers when SGLang
turns sane again, and its memory high-water mark stays under the manifests' limit.

How fast ``/healthz`` answers meanwhile is measured in ``bench/bench_hostile_rss.py`` (timing
belongs in the bench); here every wait is for a condition.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import httpx
import pytest

from exporter.sources.exposition_filter import MAX_SAMPLES_PER_FAMILY
from tests.hostile.hostile_sglang import HostileSglang, hostile_probe_dir
from tests.hostile.served import Sidecar, manifest_limit_mib, start_sidecar, stop_sidecar
from tests.support import ServerThread, sample_value, wait_for

LONGEST_LABEL = 512  # model_path's cap; every other label value is shorter


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[HostileSglang, Sidecar]]:
    hostile = HostileSglang()
    probe = hostile_probe_dir(tmp_path_factory.mktemp("probe"))
    with ServerThread(hostile.app()) as srv:
        sc = start_sidecar(srv.url, DSV4_SIDECAR_PROBE_DIR=str(probe), DSV4_SIDECAR_CANARY="false")
        try:
            yield hostile, sc
        finally:
            stop_sidecar(sc)


def _metrics(sc: Sidecar) -> str:
    resp = httpx.get(sc.url + "/metrics", timeout=10)
    assert resp.status_code == 200
    return resp.text


def _bounded(text: str) -> None:
    """The exposition a hostile input leaves: bounded in series and label length."""
    from prometheus_client.parser import text_string_to_metric_families

    samples = [s for fam in text_string_to_metric_families(text) for s in fam.samples]
    assert len(samples) < 5_000
    assert max(len(v) for s in samples for v in s.labels.values()) <= LONGEST_LABEL


def _errors(text: str, reason: str) -> float:
    return sample_value(text, "dsv4_source_errors_total", source="sglang", reason=reason) or 0.0


def _when(text: str, ok: Callable[[str], bool]) -> str | None:
    return text if ok(text) else None


def _healthz(sc: Sidecar) -> None:
    assert httpx.get(sc.url + "/healthz", timeout=10).status_code == 200


@pytest.mark.parametrize("shape", ["wide", "infinite"])
def test_parallel_sizes_out_of_bounds_are_bad_shape(served, shape: str) -> None:
    hostile, sc = served
    before = _errors(_metrics(sc), "bad_shape")
    hostile.mode = {"server_info": shape}
    text = wait_for(lambda: _when(_metrics(sc), lambda t: _errors(t, "bad_shape") > before))
    assert sample_value(text, "dsv4_source_up", source="sglang") == 0
    _bounded(text)
    _healthz(sc)


def test_a_huge_version_string_is_unparseable_not_a_label(served) -> None:
    hostile, sc = served
    hostile.mode = {"server_info": "long_version"}
    text = wait_for(lambda: _when(_metrics(sc), lambda t: 'version="unparseable"' in t), timeout=30)
    _bounded(text)
    _healthz(sc)


@pytest.mark.parametrize("shape", ["pools", "long_pool", "series"])
def test_hostile_metrics_label_sets_stay_bounded(served, shape: str) -> None:
    hostile, sc = served
    hostile.mode = {"metrics": shape}
    hostile.sent.pop("metrics", None)
    wait_for(lambda: hostile.sent.get("metrics", 0) > 0)  # the sidecar read it
    wait_for(lambda: sample_value(_metrics(sc), "dsv4_source_up", source="sglang") == 1)
    text = _metrics(sc)
    _bounded(text)
    if shape == "series":  # 100,000 series of a family read: all but the cap counted, not read
        wait_for(
            lambda: (
                (
                    sample_value(_metrics(sc), "dsv4_source_samples_dropped_total", source="sglang")
                    or 0
                )
                >= 100_000 - MAX_SAMPLES_PER_FAMILY
            )
        )
    _healthz(sc)


def test_the_probe_directory_is_read_as_untrusted(served) -> None:
    _, sc = served
    text = _metrics(sc)
    assert sample_value(text, "dsv4_probe_down_reason", rank="0", reason="malformed") == 1
    assert sample_value(text, "dsv4_probe_down_reason", rank="1", reason="unreadable") == 1
    assert (
        sample_value(text, "dsv4_source_errors_total", source="probe", reason="too_many_files") or 0
    ) > 0
    _bounded(text)


def test_recovers_when_sglang_is_sane_again_and_stays_under_the_limit(served) -> None:
    hostile, sc = served
    hostile.mode = {}
    wait_for(
        lambda: (
            'version="0.5.12"' in (t := _metrics(sc))
            and sample_value(t, "dsv4_source_up", source="sglang") == 1
        ),
        timeout=30,
    )
    _healthz(sc)
    assert sc.peak_mib() < manifest_limit_mib()

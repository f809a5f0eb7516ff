"""The one place sampled outputs meet the DSML grader.

Every way in (canary, tap, ingest) hands the pipeline a :class:`Sample`; the pipeline grades
it off the response path, in one worker thread, and counts the verdict by source and
concurrency bucket. A bounded queue keeps a flood from using unbounded memory: when full,
samples are dropped and counted, never waited for. A grader exception is counted and never
propagates. Degenerate and suspect samples go to the triage store.
"""

from __future__ import annotations

import contextlib
import json
import logging
import queue
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from prometheus_client.core import Metric
from prometheus_client.samples import Exemplar

from exporter.dsml import REASONS, VERDICTS, grade_openai_response, grade_text
from exporter.metrics import catalog as m
from exporter.samplers.buckets import BUCKET_LABELS, bucket_label
from exporter.samplers.store import SampleStore

log = logging.getLogger(__name__)

SOURCES = ("canary", "tap", "ingest")


@dataclass
class Sample:
    """One output to grade: raw ``text`` or an OpenAI-shaped ``response`` (object, list of
    SSE chunk objects, or raw SSE bytes)."""

    source: str
    text: str | None = None
    response: Any = None
    concurrency: int | None = None
    request_id: str | None = None
    grammar: str | None = None
    finish_reason: str | None = None
    tools: list[Any] | None = None
    on_graded: Callable[[Any], None] | None = field(default=None, repr=False)
    # Raw bytes from the tap, decoded in the grading thread rather than on the proxy's loop.
    request_body: bytes | None = field(default=None, repr=False)
    response_body: bytes | None = field(default=None, repr=False)
    streaming: bool = False


def _decode_tap(sample: Sample) -> Sample:
    """Turn a tap exchange into something the grader reads: the request's tools, and the
    response as an OpenAI object, raw SSE bytes, or /generate's raw text."""
    tools = None
    try:
        request = json.loads(sample.request_body or b"{}")
        if isinstance(request, dict) and isinstance(request.get("tools"), list):
            tools = request["tools"]
    except ValueError:
        pass  # a client's malformed request is not the model's output
    body = sample.response_body or b""
    if sample.streaming:
        return replace(sample, response=body, tools=tools, response_body=None)
    try:
        decoded = json.loads(body)
    except ValueError:
        return replace(
            sample, text=body.decode("utf-8", "replace"), response_body=None, tools=tools
        )
    if isinstance(decoded, dict) and "text" in decoded and "choices" not in decoded:
        meta = decoded.get("meta_info") if isinstance(decoded.get("meta_info"), dict) else {}
        finish = meta.get("finish_reason")
        finish = finish.get("type") if isinstance(finish, dict) else finish
        return replace(
            sample, text=str(decoded["text"]), finish_reason=finish, tools=tools, response_body=None
        )
    return replace(sample, response=decoded, tools=tools, response_body=None)


def grade(sample: Sample, dialect: str | None = None) -> Any:
    """Grade a sample with the DSML grader (raises only on a grader bug). ``dialect``: the
    deployment's (exporter.dsml.dialect), used when the sample does not name its grammar."""
    if sample.response_body is not None:
        sample = _decode_tap(sample)
    grammar = sample.grammar or dialect
    if sample.response is not None:
        return grade_openai_response(sample.response, tools=sample.tools, grammar=grammar)
    return grade_text(
        sample.text or "",
        grammar=grammar,
        finish_reason=sample.finish_reason,
        tools=sample.tools,
    )


class GradingPipeline:
    def __init__(
        self,
        store: SampleStore | None = None,
        max_pending: int = 1000,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        self.store = store or SampleStore()
        self._queue: queue.Queue[Sample | None] = queue.Queue(maxsize=max_pending)
        self._lock = threading.Lock()
        self._on_change = on_change or (lambda: None)
        # The deployment's DSML dialect, asked per sample (the sidecar learns it from SGLang).
        self.dialect: Callable[[], str | None] = lambda: None
        self.samples = {(s, v, b): 0 for s in SOURCES for v in VERDICTS for b in BUCKET_LABELS}
        self.reasons = {(s, r): 0 for s in SOURCES for r in REASONS}
        self.dropped = dict.fromkeys(SOURCES, 0)
        self.errors = dict.fromkeys(SOURCES, 0)
        self.exemplars: dict[tuple[str, str, str], Exemplar] = {}
        self._thread: threading.Thread | None = None

    # --- lifecycle -----------------------------------------------------------------------------
    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._work, name="dsml-grader", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        if self._thread is not None:
            with contextlib.suppress(queue.Full):
                self._queue.put(None, timeout=timeout)
            self._thread.join(timeout)
            self._thread = None

    def submit(self, sample: Sample) -> bool:
        """Queue a sample for grading; never blocks. Returns False when it was dropped."""
        try:
            self._queue.put_nowait(sample)
            return True
        except queue.Full:
            with self._lock:
                self.dropped[sample.source] = self.dropped.get(sample.source, 0) + 1
            self._on_change()
            return False

    def drain(self, timeout: float = 10.0) -> None:
        """Wait until everything queued so far has been graded (tests, shutdown)."""
        done = threading.Event()
        self.submit(Sample(source="__barrier__", on_graded=lambda _r: done.set()))
        done.wait(timeout)

    # --- worker --------------------------------------------------------------------------------
    def _work(self) -> None:
        while True:
            sample = self._queue.get()
            if sample is None:
                return
            if sample.source == "__barrier__":
                if sample.on_graded:
                    sample.on_graded(None)
                continue
            self.grade_now(sample)

    def grade_now(self, sample: Sample) -> Any:
        """Grade and count one sample in the calling thread."""
        try:
            result = grade(sample, self.dialect())
        except Exception:
            log.exception("grader raised on a %s sample (text not logged)", sample.source)
            with self._lock:
                self.errors[sample.source] = self.errors.get(sample.source, 0) + 1
            self._on_change()
            return None
        self._count(sample, result)
        if sample.on_graded is not None:
            try:
                sample.on_graded(result)
            except Exception:
                log.exception("on_graded callback raised")
        self._on_change()
        return result

    def _count(self, sample: Sample, result: Any) -> None:
        reasons = sorted({f.reason for f in result.findings})
        key = (sample.source, result.verdict, bucket_label(sample.concurrency))
        with self._lock:
            self.samples[key] = self.samples.get(key, 0) + 1
            for r in reasons:
                rk = (sample.source, r)
                self.reasons[rk] = self.reasons.get(rk, 0) + 1
            if result.verdict == "degenerate" and sample.request_id:
                self.exemplars[key] = Exemplar({"request_id": sample.request_id[:64]}, 1.0)
        self.store.add(
            source=sample.source,
            concurrency=sample.concurrency,
            verdict=result.verdict,
            reasons=reasons,
            spans=[f.to_json() for f in result.findings],
            text=result.text,
            request_id=sample.request_id,
        )

    # --- exposition ----------------------------------------------------------------------------
    def collect(self) -> Iterable[Metric]:
        with self._lock:
            samples = dict(self.samples)
            reasons = dict(self.reasons)
            dropped, errors = dict(self.dropped), dict(self.errors)
            exemplars = dict(self.exemplars)
        fam = m.DSML_SAMPLES.family()
        for key, n in sorted(samples.items()):
            fam.add_metric(list(key), float(n), exemplar=exemplars.get(key))
        yield fam
        fam = m.DSML_REASONS.family()
        for key, n in sorted(reasons.items()):
            fam.add_metric(list(key), float(n))
        yield fam
        for spec, values in ((m.DSML_DROPPED, dropped), (m.DSML_GRADING_ERRORS, errors)):
            fam = spec.family()
            for source, n in sorted(values.items()):
                fam.add_metric([source], float(n))
            yield fam
        yield m.DSML_STORED.one(len(self.store))

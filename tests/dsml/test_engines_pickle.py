"""A verdict crosses from the grading process to the sidecar's by pickle: an engine's dialect
must survive it (it once broke the grading process for every vLLM sample)."""

from __future__ import annotations

import pickle

from exporter.dsml.engines import EngineDialect


def test_engine_dialect_pickles_with_its_engine():
    dialect = EngineDialect("v4", "vllm")
    back = pickle.loads(pickle.dumps(dialect))
    assert back == "v4" and back.engine == "vllm" and isinstance(back, EngineDialect)


def test_engine_dialect_pickles_with_its_vllm_release():
    dialect = EngineDialect("v4.1", "vllm", "0.30.0")
    back = pickle.loads(pickle.dumps(dialect))
    assert back == "v4.1" and back.release == "0.30.0" and back.vllm_rules()[0].has_v41

"""Every alert threshold, window and ``for:``: the one place these numbers are defined.

The alert rules (``alerts/``, rendered by ``python -m alerts.generate``), their runbooks and
promtool tests (rendered from templates by the same generator), the dashboards' threshold
lines and triage's verdicts (:mod:`exporter.oncall.triage.diagnosis`) all read
:class:`AlertConfig`, so changing one default here changes all of them together. It lives in
the installed package because triage ships in the image and ``alerts/`` does not.

A deployer overrides any subset with a mapping (:func:`from_mapping`; ``alerts.config.load``
reads it from YAML); unknown keys and ill-typed values are rejected so a typo cannot silently
leave a default in force.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from exporter.units import GIB, MIB

# The one place the runbook location is defined: rules render `<base>/<AlertName>.md` from it
# and the overview dashboard links to the runbook index below it.
DEFAULT_RUNBOOK_BASE_URL = "https://github.com/dsv4-sidecar/dsv4-sidecar/blob/main/docs/runbooks"

# Prometheus durations, compound allowed (1h30m); units as Prometheus spells them.
_DURATION = re.compile(r"^(?:[0-9]+(?:ms|[smhdwy]))+$")
# A PromQL grouping list: label names separated by commas.
_LABEL_LIST = re.compile(r"^\s*[a-zA-Z_][a-zA-Z0-9_]*(?:\s*,\s*[a-zA-Z_][a-zA-Z0-9_]*)*\s*$")
# Knobs whose value is a Prometheus duration, by the end of their name.
DURATION_SUFFIXES = ("_for", "_window", "_lookback", "_period")
# Seconds per Prometheus duration unit, largest first (the order :func:`duration` writes).
_UNITS = {"y": 365 * 86400, "w": 7 * 86400, "d": 86400, "h": 3600, "m": 60, "s": 1, "ms": 0.001}
_PART = re.compile(r"([0-9]+)(ms|[smhdwy])")
# Earlier periods a same-time-of-day baseline may look back (4 weeks of daily offsets).
MAX_BASELINE_PERIODS = 28


def seconds(text: str) -> float:
    """A Prometheus duration (``1h30m``) in seconds; ``ValueError`` when it is not one."""
    if not _DURATION.match(text):
        raise ValueError(f"{text!r} is not a Prometheus duration like 5m")
    return sum(int(n) * _UNITS[u] for n, u in _PART.findall(text))


def duration(secs: float) -> str:
    """Seconds as a Prometheus duration, largest units first (5400 -> ``1h30m``)."""
    if secs <= 0:
        raise ValueError(f"a duration must be positive, got {secs}s")
    ms = round(secs * 1000)
    out = []
    for unit, size in _UNITS.items():
        if unit in ("y", "w"):  # 7d reads better than 1w in an offset
            continue
        n, ms = divmod(ms, round(size * 1000))
        if n:
            out.append(f"{n}{unit}")
    return "".join(out)


def knob(default: Any, doc: str) -> Any:
    """A config field carrying its documentation (rendered into alerts/README.md)."""
    return field(default=default, metadata={"doc": doc})


@dataclass(frozen=True)
class AlertConfig:
    """Thresholds and windows of every rule. Durations are Prometheus durations (``5m``)."""

    selector: str = knob(
        'job="dsv4-sidecar"',
        "Label matchers added to every selector (the sidecar's scrape job); "
        "also the `up` series the absent/down meta alerts watch.",
    )
    runbook_base_url: str = knob(
        DEFAULT_RUNBOOK_BASE_URL,
        "Base of every `runbook_url` annotation (`<base>/<AlertName>.md`).",
    )
    # --- KV pool over-commit ----------------------------------------------------------------
    kv_overcommit_warning_bytes: int = knob(
        1 * GIB,
        "DSV4KVPoolOvercommit (warning) when a rank allocates more than this many bytes beyond "
        "the plan. Page padding alone leaves ~0.3 GiB at a 50 GiB budget (Flash); the legacy "
        "plan with bf16 index-K misses ~4.3 GiB.",
    )
    kv_overcommit_critical_reserve_ratio: float = knob(
        1.0,
        "DSV4KVPoolOvercommit (critical) when over-commit exceeds this fraction of the "
        "(1 - mem_fraction_static) reserve (1.0: the whole reserve is gone).",
    )
    kv_overcommit_for: str = knob("5m", "`for:` of both DSV4KVPoolOvercommit rules.")
    # --- GPU memory headroom ----------------------------------------------------------------
    gpu_free_warning_bytes: int = knob(
        2 * GIB, "DSV4GPUMemoryHeadroomLow (warning) below this many free bytes on a GPU."
    )
    gpu_free_critical_bytes: int = knob(
        512 * MIB, "DSV4GPUMemoryHeadroomLow (critical) below this many free bytes on a GPU."
    )
    gpu_free_warning_for: str = knob("5m", "`for:` of the warning headroom rule.")
    gpu_free_critical_for: str = knob("2m", "`for:` of the critical headroom rule.")
    gpu_fill_lookback: str = knob(
        "30m", "DSV4GPUMemoryFillingUp: window of the linear fit of free bytes."
    )
    gpu_fill_horizon_seconds: int = knob(
        3600, "DSV4GPUMemoryFillingUp fires when free bytes are predicted to hit 0 this soon."
    )
    gpu_fill_max_free_ratio: float = knob(
        0.25,
        "DSV4GPUMemoryFillingUp only considers GPUs with less than this fraction free "
        "(a trend on a mostly-empty GPU is noise).",
    )
    gpu_fill_for: str = knob("10m", "`for:` of DSV4GPUMemoryFillingUp.")
    model_drift_bytes: int = knob(
        16 * MIB,
        "DSV4FootprintModelDrift when the footprint model's bytes for a pool differ from the "
        "probe's measurement by more than this (the model equals released SGLang to the byte; "
        "a wrong index-K dtype is off by gigabytes).",
    )
    model_drift_for: str = knob("15m", "`for:` of DSV4FootprintModelDrift.")
    assumed_facts: str = knob(
        "index_k_dtype|pricing",
        "DSV4OvercommitOnAssumption: the deployment facts (regex on `fact`) the over-commit "
        "rests on; it fires while one of them has source `assumed`.",
    )
    assumed_fact_for: str = knob(
        "30m",
        "`for:` of DSV4OvercommitOnAssumption (long enough for the probe's first snapshot and "
        "SGLang's start-up figures to settle the fact).",
    )
    # --- Tool-call corruption ---------------------------------------------------------------
    corruption_window: str = knob(
        "30m", "Window of the degenerate ratio and of the sample count (recording rules)."
    )
    corruption_min_samples: int = knob(
        20, "DSV4ToolCallCorruptionHigh needs at least this many graded samples in the window."
    )
    corruption_warning_ratio: float = knob(
        0.02, "DSV4ToolCallCorruptionHigh (warning) above this degenerate ratio."
    )
    corruption_critical_ratio: float = knob(
        0.10, "DSV4ToolCallCorruptionHigh (critical) above this degenerate ratio."
    )
    corruption_warning_for: str = knob("10m", "`for:` of the warning corruption rule.")
    corruption_critical_for: str = knob("5m", "`for:` of the critical corruption rule.")
    # --- Canary -------------------------------------------------------------------------------
    canary_stale_seconds: int = knob(
        600, "DSV4CanaryFailing (critical) when the last successful canary is older than this."
    )
    canary_stale_for: str = knob("5m", "`for:` of the stale-canary rule.")
    canary_degenerate_window: str = knob(
        "30m", "DSV4CanaryFailing (warning) on any degenerate canary reply in this window."
    )
    canary_degenerate_for: str = knob("1m", "`for:` of the degenerate-canary rule.")
    # --- HiCache index-K race -----------------------------------------------------------------
    index_k_window: str = knob(
        "10m", "DSV4IndexKUngatedReads: any ungated index-K read in this window fires."
    )
    index_k_for: str = knob("1m", "`for:` of DSV4IndexKUngatedReads.")
    # --- Configuration ------------------------------------------------------------------------
    risky_config_for: str = knob("10m", "`for:` of DSV4RiskyConfiguration.")
    # --- Meta -------------------------------------------------------------------------------
    sidecar_down_for: str = knob("5m", "`for:` of DSV4SidecarDown (`up == 0`).")
    sidecar_absent_for: str = knob("10m", "`for:` of DSV4SidecarAbsent (no `up` series).")
    source_stale_seconds: int = knob(
        300,
        "DSV4NVMLDown / DSV4EngineDown also fire when the source's last "
        "success is older than this (a wedged poller that still reports up).",
    )
    source_down_for: str = knob("5m", "`for:` of DSV4NVMLDown and DSV4EngineDown.")
    probe_stale_seconds: int = knob(
        300, "DSV4ProbeStale when a rank's probe has not reported for this long."
    )
    probe_stale_for: str = knob("5m", "`for:` of DSV4ProbeStale.")
    gpu_count_lookback: str = knob(
        "12h",
        "DSV4GPUCountDropped compares visible GPUs with their maximum over this window "
        "(the alert clears this long after a deliberate down-size).",
    )
    gpu_count_for: str = knob("1m", "`for:` of DSV4GPUCountDropped.")
    # --- Fleet: deployment-level rules (alerts/fleet.py) ----------------------------------------
    pod_labels: str = knob(
        "instance, pod",
        "Target labels that tell one pod's sidecar from another's in the same deployment: the "
        "deployment-level rules aggregate `without` them (and `rank`), so every other label "
        "(job, namespace, deployment, cluster and external labels) survives federation.",
    )
    deployment_risky_config_for: str = knob("10m", "`for:` of DSV4DeploymentRiskyConfiguration.")
    deployment_overcommit_for: str = knob(
        "10m",
        "`for:` of DSV4DeploymentOvercommit (every rank of the deployment over "
        "`kv_overcommit_warning_bytes`).",
    )

    # --- Output length drift, per deployment (alerts/fleet.py; issue 26) -------------------------
    length_window: str = knob(
        "30m", "Window of the deployment's output-length p50 and finish-reason mix records."
    )
    length_baseline_window: str = knob(
        "7d",
        "DSV4FinishLengthShareHigh's baseline: the median of the deployment's `length` share "
        "over this window, ending one `length_window` ago.",
    )
    length_baseline_period: str = knob(
        "1d",
        "DSV4OutputLengthInflation's baseline: the deployment's `length_window` p50 at the same "
        "time of each earlier period (1d: the same time of day), so a daily peak (a nightly "
        "batch of long reports) is its own baseline and does not fire.",
    )
    length_baseline_periods: int = knob(
        7,
        "DSV4OutputLengthInflation's baseline is the median of that p50 over this many earlier "
        "periods (`offset 1d` ... `offset 7d`; the periods that have data, one is enough).",
    )
    length_inflation_factor: float = knob(
        1.5,
        "DSV4OutputLengthInflation when the p50 output tokens exceed the baseline by this "
        "factor (sglang#36179: 600 -> 1,100 tokens with HiCache L2 is 1.8x).",
    )
    length_min_samples: int = knob(
        20, "Graded samples a deployment needs in `length_window` before the length rules fire."
    )
    length_inflation_for: str = knob("30m", "`for:` of DSV4OutputLengthInflation.")
    finish_length_share_min: float = knob(
        0.05,
        "DSV4FinishLengthShareHigh needs at least this share of `length` finishes, and twice "
        "the baseline share.",
    )
    finish_length_for: str = knob("30m", "`for:` of DSV4FinishLengthShareHigh.")

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name.endswith(DURATION_SUFFIXES) and not _DURATION.match(value):
                raise ValueError(f"{f.name}: {value!r} is not a Prometheus duration like 5m")
            if isinstance(value, int | float) and not isinstance(value, bool) and value < 0:
                raise ValueError(f"{f.name}: must not be negative")
        if self.gpu_free_critical_bytes > self.gpu_free_warning_bytes:
            raise ValueError("gpu_free_critical_bytes must not exceed gpu_free_warning_bytes")
        if self.corruption_critical_ratio < self.corruption_warning_ratio:
            raise ValueError("corruption_critical_ratio must not be below the warning ratio")
        if not 0 < self.gpu_fill_max_free_ratio <= 1:
            raise ValueError("gpu_fill_max_free_ratio must be in (0, 1]")
        if not _LABEL_LIST.match(self.pod_labels):
            raise ValueError(
                f"pod_labels: {self.pod_labels!r} is not a comma-separated list of label names"
            )
        if not 1 <= self.length_baseline_periods <= MAX_BASELINE_PERIODS:
            raise ValueError(f"length_baseline_periods must be in 1..{MAX_BASELINE_PERIODS}")
        if self.runbook_base_url.endswith("/"):
            raise ValueError("runbook_base_url: no trailing slash")

    def runbook_url(self, alertname: str) -> str:
        """The runbook of one alert: one page per alert name, from the one base URL."""
        return f"{self.runbook_base_url}/{alertname}.md"

    def baseline_offsets(self) -> list[str]:
        """The offsets of DSV4OutputLengthInflation's baseline: one per earlier period."""
        period = seconds(self.length_baseline_period)
        return [duration(k * period) for k in range(1, self.length_baseline_periods + 1)]


DEFAULTS = AlertConfig()


def _coerce(name: str, expected: type, value: Any) -> Any:
    """Accept YAML's natural types for a field (an int where a float is expected is fine)."""
    if expected is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, bool) or not isinstance(value, expected):
        raise TypeError(f"{name}: expected {expected.__name__}, got {value!r}")
    return value


def from_mapping(overrides: dict[str, Any]) -> AlertConfig:
    """Defaults with ``overrides`` applied; unknown keys and wrong types raise."""
    types = {f.name: f.type for f in dataclasses.fields(AlertConfig)}
    unknown = sorted(set(overrides) - set(types))
    if unknown:
        raise KeyError(f"unknown alert config keys: {', '.join(unknown)}")
    resolved = {"int": int, "float": float, "str": str}
    kwargs = {k: _coerce(k, resolved[str(types[k])], v) for k, v in overrides.items()}
    return AlertConfig(**kwargs)


def load(path: Path | None) -> AlertConfig:
    """The config from a YAML file of overrides (the file ``alerts.generate --config`` and
    ``triage --alert-config`` take), or the defaults when ``path`` is None. ``OSError``,
    ``KeyError`` (unknown knob), ``TypeError`` and ``ValueError`` name what is wrong."""
    if path is None:
        return AlertConfig()
    import yaml  # only the loader needs it; the diagnosis reads the dataclass

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise ValueError(f"{path} is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise TypeError(f"{path}: expected a mapping of knob: value")
    return from_mapping(data)

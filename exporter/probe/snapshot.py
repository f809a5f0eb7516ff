"""The probe's snapshot file: one small JSON document per rank, written atomically.

This module is the single definition of the format. The in-process probe writes it from inside
SGLang, the simulator writes it for simulated ranks, and the sidecar's probe source reads it, so
it is pure standard library: no torch, no prometheus_client.

Layout of ``rank-<rank>.json`` (format ``dsv4-probe-snapshot``, version 2; version 1 files,
which lack ``memory``, are still read)::

    {"format": "dsv4-probe-snapshot", "version": 1, "rank": "0",
     "pid": 4242, "pid_namespace": "pid:[4026531836]", "hostname": "pod-a",
     "started_at": 1.7e9, "written_at": 1.7e9, "seq": 12, "closed": false,
     "probe_version": "0.1.0", "gap_source": "device_events",
     "hooks": {"index_k_with_scale": true, ...}, "errors": 0, "load_ops": 3,
     "layers": {"0": {"loads_started": 3, "loads_completed": 3, "index_k_gated": 0,
                      "index_k_ungated": 3, "kv_gated": 6, "kv_ungated": 0}, ...},
     "gap": {"bounds": [0.0, 1e-05, ...], "counts": [..., n_inf], "sum": 0.012,
             "dropped": 0},
     "verify": {"enabled": false, "sample_rate": 0.0, "checks": 0, "mismatches": 0},
     "memory": {"configurator": {"class": "DSV4PoolConfigurator",
                                 "method": "calculate_pool_sizes", "available_bytes": 5.3e10,
                                 "page_size": 256, "bytes_per_full_token": 7086.75,
                                 "fixed_bytes": {"_get_c128_state_fixed_bytes": 9.1e7},
                                 "sizes": {"full_max_total_num_tokens": 7192320, ...}},
                "pools": [{"class": "DeepSeekV4TokenToKVPool", "draft": false,
                           "layers": [0, 43], "tensors": 131,
                           "bytes": {"swa_kv": 1.1e9, "c4_index_k": 4.9e9, ...},
                           "index_k": {"dtype": "fp8", "layout": "fused",
                                       "bytes_per_slot": 132, "page_size": 64,
                                       "head_dim": 128}}]}}

``layers`` is keyed by the layer index local to the rank's pipeline stage (what SGLang's
LayerDoneCounter counts); ``gap.counts`` are per-bucket (not cumulative) with the +Inf bucket
last. ``written_at`` is the writer's wall clock; a reader treats an old one as a dead writer.

``memory`` (version 2) is what the probe saw at start-up, measured, never computed: the
arguments and result of the pool configurator's sizing call, and for every
``DeepSeekV4TokenToKVPool`` built in the process the bytes of its tensors (each storage counted
once) grouped by sub-pool, plus the index-K layout read off its buffers. ``null`` until seen.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import secrets
import socket
import stat
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FORMAT = "dsv4-probe-snapshot"
VERSION = 2
READABLE_VERSIONS = (1, 2)
FILE_PREFIX = "rank-"
FILE_SUFFIX = ".json"
# Big enough for a few hundred layers; anything larger is not ours.
MAX_FILE_BYTES = 1 << 20
# Largest integer a snapshot may hold (byte counts, counters): what a metric value can carry
# exactly and what converts to float without OverflowError.
MAX_INT = 1 << 63
# probe_version becomes a label value: a release string, bounded.
PROBE_VERSION_RE = re.compile(r"[0-9A-Za-z.+_-]{1,64}")
RANK_RE = re.compile(r"^[A-Za-z0-9_-]{1,32}$")

# Transfer-gap histogram bounds in seconds. The le="0" bucket holds ungated reads whose layer
# had already landed when the read ran (the gate was missing but the race was not hit); every
# other bucket is a read that ran while its layer was still being copied.
GAP_BUCKETS_S: tuple[float, ...] = (
    0.0,
    1e-05,
    2.5e-05,
    5e-05,
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    1.0,
)

# Every hook the probe knows, by a short bounded name (a label value on the sidecar side).
INDEX_K_HOOKS: tuple[str, ...] = (
    "index_k_with_scale",
    "index_k_scale",
    "index_k_fp4_payload",
    "index_k_fp4_scale",
    "index_k_low_ratio_dequant",
    "index_k_low_ratio_fp4",
)
KV_HOOKS: tuple[str, ...] = (
    "kv_swa",
    "kv_swa_radix",
    "kv_extra",
    "kv_unified",
    "kv_unified_rope",
    "state_attention",
    "state_indexer",
)
LOAD_HOOKS: tuple[str, ...] = ("load_start", "layer_done", "consumer", "wait", "counter_reset")
# Start-up measurements: the configurator's sizing call and the device pool's construction.
MEMORY_HOOKS: tuple[str, ...] = ("pool_sizes", "pool_memory")
HOOK_NAMES: tuple[str, ...] = INDEX_K_HOOKS + KV_HOOKS + LOAD_HOOKS + MEMORY_HOOKS

GAP_SOURCES = ("device_events", "host_bound", "none")
LAYER_FIELDS = (
    "loads_started",
    "loads_completed",
    "index_k_gated",
    "index_k_ungated",
    "kv_gated",
    "kv_ungated",
)


# Sub-pool names (swa_kv, c4_kv, c128_kv, c4_index_k, c4_state, c4_index_state, c128_state, ...,
# "other" for a tensor under an attribute the probe does not know) and record keys: bounded.
MEMORY_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
MAX_POOLS = 8
MAX_MEMORY_KEYS = 48
INDEX_K_DTYPES = ("fp8", "bf16", "fp4", "unknown")
INDEX_K_LAYOUTS = ("fused", "split", "unknown")


class SnapshotError(ValueError):
    """A snapshot file that cannot be used; ``reason`` is a bounded label value."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


class LayerCounts:
    """Counters of one layer. Plain attributes so the probe's hot path is one increment."""

    __slots__ = LAYER_FIELDS
    # Declared for the type checker (the slots above are the storage).
    loads_started: int
    loads_completed: int
    index_k_gated: int
    index_k_ungated: int
    kv_gated: int
    kv_ungated: int

    def __init__(self) -> None:
        for name in LAYER_FIELDS:
            setattr(self, name, 0)

    def as_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in LAYER_FIELDS}


class GapHistogram:
    """Transfer gaps of ungated reads, in seconds, over :data:`GAP_BUCKETS_S`."""

    def __init__(self, bounds: Iterable[float] = GAP_BUCKETS_S) -> None:
        self.bounds = tuple(float(b) for b in bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0
        self.dropped = 0

    def observe(self, seconds: float) -> None:
        seconds = max(0.0, float(seconds))
        i = 0
        for bound in self.bounds:
            if seconds <= bound:
                break
            i += 1
        self.counts[i] += 1
        self.sum += seconds

    @property
    def count(self) -> int:
        return sum(self.counts)

    def as_dict(self) -> dict[str, Any]:
        return {
            "bounds": list(self.bounds),
            "counts": list(self.counts),
            "sum": self.sum,
            "dropped": self.dropped,
        }


def empty_memory() -> dict[str, Any]:
    """The ``memory`` section before the configurator or a pool was seen."""
    return {"configurator": None, "pools": []}


@dataclass
class ProbeCounters:
    """Everything one rank reports. The probe increments it in place; the simulator fills it
    through the ``count_*`` helpers. Writers snapshot it with :meth:`as_dict`."""

    layers: dict[int, LayerCounts] = field(default_factory=dict)
    gap: GapHistogram = field(default_factory=GapHistogram)
    hooks: dict[str, bool] = field(default_factory=dict)
    gap_source: str = "none"
    errors: int = 0
    load_ops: int = 0
    verify_enabled: bool = False
    verify_sample_rate: float = 0.0
    checks: int = 0
    mismatches: int = 0
    memory: dict[str, Any] = field(default_factory=empty_memory)

    def layer(self, index: int) -> LayerCounts:
        counts = self.layers.get(index)
        if counts is None:
            counts = self.layers.setdefault(index, LayerCounts())
        return counts

    def count_load(self, layer: int, completed: bool = True) -> None:
        """One layer copied host-to-device (started, and completed unless told otherwise)."""
        counts = self.layer(layer)
        counts.loads_started += 1
        if completed:
            counts.loads_completed += 1

    def count_read(self, layer: int, *, index_k: bool, gated: bool) -> None:
        counts = self.layer(layer)
        if index_k:
            if gated:
                counts.index_k_gated += 1
            else:
                counts.index_k_ungated += 1
        elif gated:
            counts.kv_gated += 1
        else:
            counts.kv_ungated += 1

    def count_check(self, mismatch: bool) -> None:
        self.checks += 1
        if mismatch:
            self.mismatches += 1

    def totals(self) -> dict[str, int]:
        out = dict.fromkeys(LAYER_FIELDS, 0)
        for counts in list(self.layers.values()):
            for name in LAYER_FIELDS:
                out[name] += getattr(counts, name)
        return out

    def as_dict(self) -> dict[str, Any]:
        return {
            "gap_source": self.gap_source,
            "hooks": dict(self.hooks),
            "errors": self.errors,
            "load_ops": self.load_ops,
            "layers": {str(k): v.as_dict() for k, v in sorted(list(self.layers.items()))},
            "gap": self.gap.as_dict(),
            "verify": {
                "enabled": self.verify_enabled,
                "sample_rate": self.verify_sample_rate,
                "checks": self.checks,
                "mismatches": self.mismatches,
            },
            "memory": {
                "configurator": self.memory.get("configurator"),
                "pools": list(self.memory.get("pools", ())),
            },
        }


def pid_namespace() -> str | None:
    """This process's PID namespace (``pid:[inode]``), so a reader can tell whether the
    writer's pid means anything in its own namespace; None where /proc is absent."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


def snapshot_path(directory: str | os.PathLike[str], rank: str) -> Path:
    return Path(directory) / f"{FILE_PREFIX}{rank}{FILE_SUFFIX}"


def write_snapshot(
    directory: str | os.PathLike[str],
    rank: str | int,
    counters: ProbeCounters,
    *,
    pid: int | None = None,
    started_at: float | None = None,
    written_at: float | None = None,
    seq: int = 0,
    closed: bool = False,
    probe_version: str | None = None,
) -> Path:
    """Write ``rank-<rank>.json`` in ``directory`` atomically (temp file, then rename), so a
    reader never sees a half-written file. World-readable: the sidecar may run as another user.
    Returns the path written. Usable without torch (the simulator calls it)."""
    rank = str(rank)
    if not RANK_RE.match(rank):
        raise ValueError(f"rank {rank!r} must match {RANK_RE.pattern}")
    now = time.time() if written_at is None else written_at
    if probe_version is None:
        from exporter import __version__ as probe_version
    doc = {
        "format": FORMAT,
        "version": VERSION,
        "rank": rank,
        "pid": os.getpid() if pid is None else pid,
        "pid_namespace": pid_namespace(),
        "hostname": socket.gethostname(),
        "started_at": now if started_at is None else started_at,
        "written_at": now,
        "seq": seq,
        "closed": closed,
        "probe_version": probe_version,
        **counters.as_dict(),
    }
    data = json.dumps(doc, separators=(",", ":")).encode()
    directory = Path(directory)
    final = snapshot_path(directory, rank)
    dir_fd = open_snapshot_dir(directory)
    try:
        # An unpredictable name, created exclusively and never through a symlink, relative to
        # the directory checked above: a name planted in the directory (a symlink to a victim
        # file, the old predictable temp name) can neither redirect nor truncate a write.
        tmp = f".{final.name}.{secrets.token_hex(8)}.tmp"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(tmp, flags, 0o644, dir_fd=dir_fd)
        try:
            os.fchmod(fd, 0o644)
            os.write(fd, data)
        finally:
            os.close(fd)
        try:
            # rename replaces whatever holds the final name (a planted symlink included) and
            # never follows it
            os.replace(tmp, final.name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dir_fd)
            raise
    finally:
        os.close(dir_fd)
    return final


class UnsafeProbeDir(OSError):
    """The snapshot directory could be turned against the writer (see :func:`open_snapshot_dir`)."""


def open_snapshot_dir(directory: Path, euid: int | None = None) -> int:
    """A descriptor of ``directory`` (created 0755 when missing), checked before anything is
    written in it. Refused (:class:`UnsafeProbeDir`): a symlink as the last component, not a
    directory, owned by a user other than this process's or root (another user created it and
    can swap its contents), and a directory of this user's that others may write without the
    sticky bit. A root-owned directory is accepted whatever its mode: only root or the platform
    creates one (a Kubernetes ``emptyDir`` is root-owned 0777), and in it the exclusive,
    no-follow create and the rename leave other writers no more than deleting a snapshot
    (the sidecar then marks the rank stale). ``euid`` is for tests."""
    euid = os.geteuid() if euid is None else euid
    try:
        os.mkdir(directory, 0o755)
    except FileExistsError:
        pass
    except FileNotFoundError:
        directory.parent.mkdir(parents=True, mode=0o755, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            os.mkdir(directory, 0o755)
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except NotADirectoryError:
        raise UnsafeProbeDir(f"{directory} is not a directory") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafeProbeDir(f"{directory} is a symlink") from None
        raise
    st = os.fstat(fd)
    problem = None
    if st.st_uid not in (euid, 0):
        problem = f"is owned by uid {st.st_uid}, not this user ({euid}) or root"
    elif st.st_uid == euid and st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
        problem = f"is writable by others without the sticky bit (mode {st.st_mode & 0o7777:o})"
    if problem is not None:
        os.close(fd)
        raise UnsafeProbeDir(f"{directory} {problem}")
    return fd


@dataclass(frozen=True)
class ConfiguratorRecord:
    """The pool configurator's last sizing call, as the probe saw it (arguments and result)."""

    cls: str
    method: str  # calculate_pool_sizes (a byte budget) or ..._from_max_tokens (a token count)
    available_bytes: int | None  # the budget it was given (None for a token-count call)
    page_size: int | None
    bytes_per_full_token: float | None  # the configurator's own coefficient, as it held it
    fixed_bytes: Mapping[str, int]  # what its fixed-bytes helpers returned during the call
    sizes: Mapping[str, int]  # the integer fields of the config it returned

    @property
    def fixed_total(self) -> int:
        return sum(self.fixed_bytes.values())


@dataclass(frozen=True)
class IndexKLayout:
    """The index-K cache as its buffers are laid out: bytes per slot measured from a buffer."""

    dtype: str  # fp8 / bf16 / fp4 / unknown, read off bytes_per_slot against head_dim
    layout: str  # fused (values and scales in one row), split (payload + scale buffers)
    bytes_per_slot: float
    page_size: int
    head_dim: int | None


@dataclass(frozen=True)
class PoolMemory:
    """One DeepSeekV4TokenToKVPool instance: the bytes of its tensors, by sub-pool."""

    cls: str
    draft: bool
    layers: tuple[int, int] | None
    tensors: int
    bytes: Mapping[str, int]
    index_k: IndexKLayout | None

    @property
    def total(self) -> int:
        return sum(self.bytes.values())


@dataclass(frozen=True)
class MemoryReport:
    configurator: ConfiguratorRecord | None = None
    pools: tuple[PoolMemory, ...] = ()

    def bytes_by_pool(self) -> dict[str, int]:
        """Bytes per sub-pool over every pool of the process: the target model's and, with
        speculative decoding, the draft worker's (the configurator's budget covers both)."""
        out: dict[str, int] = {}
        for pool in self.pools:
            for name, n in pool.bytes.items():
                out[name] = out.get(name, 0) + n
        return out

    def index_k(self) -> IndexKLayout | None:
        return next((p.index_k for p in self.pools if not p.draft and p.index_k), None)

    @property
    def overcommit_bytes(self) -> int | None:
        """Allocated (every pool's tensors) minus the budget the configurator was given;
        None until both were seen."""
        conf = self.configurator
        if conf is None or conf.available_bytes is None or not self.pools:
            return None
        return sum(p.total for p in self.pools) - conf.available_bytes


@dataclass(frozen=True)
class Snapshot:
    """A validated snapshot as the sidecar uses it."""

    rank: str
    pid: int
    pid_namespace: str | None
    hostname: str
    started_at: float
    written_at: float
    seq: int
    closed: bool
    probe_version: str
    gap_source: str
    hooks: Mapping[str, bool]
    errors: int
    load_ops: int
    layers: Mapping[int, Mapping[str, int]]
    gap_bounds: tuple[float, ...]
    gap_counts: tuple[int, ...]
    gap_sum: float
    gap_dropped: int
    verify_enabled: bool
    verify_sample_rate: float
    checks: int
    mismatches: int
    memory: MemoryReport = field(default_factory=MemoryReport)

    def total(self, name: str) -> int:
        return sum(layer[name] for layer in self.layers.values())


def _num(doc: Mapping[str, Any], key: str, kind: type, minimum: float | None = 0) -> Any:
    value = doc.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SnapshotError("malformed", f"{key} is not a number")
    if kind is int and not isinstance(value, int):
        raise SnapshotError("malformed", f"{key} is not an integer")
    if value != value or value in (float("inf"), float("-inf")):
        raise SnapshotError("malformed", f"{key} is not finite")
    if isinstance(value, int) and abs(value) > MAX_INT:  # 10**400 is valid JSON, no float
        raise SnapshotError("malformed", f"{key} is out of range")
    if minimum is not None and value < minimum:
        raise SnapshotError("malformed", f"{key} is negative")
    return kind(value)


def parse_snapshot(doc: Any) -> Snapshot:
    """Validate a decoded document; raises :class:`SnapshotError` with a bounded reason."""
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise SnapshotError("malformed", "not a dsv4 probe snapshot")
    if doc.get("version") not in READABLE_VERSIONS:
        raise SnapshotError("unsupported_version", f"version {doc.get('version')!r}")
    rank = doc.get("rank")
    if not isinstance(rank, str) or not RANK_RE.match(rank):
        raise SnapshotError("malformed", "bad rank")
    layers_doc = doc.get("layers")
    if not isinstance(layers_doc, dict):
        raise SnapshotError("malformed", "layers is not an object")
    layers: dict[int, dict[str, int]] = {}
    for key, counts in layers_doc.items():
        if not (isinstance(key, str) and key.isdigit()) or not isinstance(counts, dict):
            raise SnapshotError("malformed", f"bad layer entry {key!r}")
        layers[int(key)] = {name: _num(counts, name, int) for name in LAYER_FIELDS}
    gap = doc.get("gap")
    if not isinstance(gap, dict):
        raise SnapshotError("malformed", "gap is not an object")
    bounds, counts = gap.get("bounds"), gap.get("counts")
    if not isinstance(bounds, list) or not isinstance(counts, list):
        raise SnapshotError("malformed", "gap bounds/counts are not lists")
    bounds_t = tuple(_num({"b": b}, "b", float, None) for b in bounds)
    counts_t = tuple(_num({"c": c}, "c", int) for c in counts)
    if len(counts_t) != len(bounds_t) + 1 or list(bounds_t) != sorted(set(bounds_t)):
        raise SnapshotError("malformed", "gap buckets are inconsistent")
    verify = doc.get("verify")
    hooks = doc.get("hooks")
    if not isinstance(verify, dict) or not isinstance(hooks, dict):
        raise SnapshotError("malformed", "verify/hooks are not objects")
    gap_source = doc.get("gap_source")
    if gap_source not in GAP_SOURCES:
        raise SnapshotError("malformed", f"gap_source {gap_source!r}")
    ns = doc.get("pid_namespace")
    return Snapshot(
        rank=rank,
        pid=_num(doc, "pid", int),
        pid_namespace=ns if isinstance(ns, str) else None,
        hostname=str(doc.get("hostname", "")),
        started_at=_num(doc, "started_at", float),
        written_at=_num(doc, "written_at", float),
        seq=_num(doc, "seq", int),
        closed=bool(doc.get("closed", False)),
        probe_version=_probe_version(doc.get("probe_version")),
        gap_source=gap_source,
        hooks={str(k): bool(v) for k, v in hooks.items() if k in HOOK_NAMES},
        errors=_num(doc, "errors", int),
        load_ops=_num(doc, "load_ops", int),
        layers=layers,
        gap_bounds=bounds_t,
        gap_counts=counts_t,
        gap_sum=_num(gap, "sum", float),
        gap_dropped=_num(gap, "dropped", int),
        verify_enabled=bool(verify.get("enabled", False)),
        verify_sample_rate=_num(verify, "sample_rate", float),
        checks=_num(verify, "checks", int),
        mismatches=_num(verify, "mismatches", int),
        memory=parse_memory(doc.get("memory")),
    )


def _probe_version(value: Any) -> str:
    if not isinstance(value, str) or not PROBE_VERSION_RE.fullmatch(value):
        raise SnapshotError("malformed", "probe_version is not a short release string")
    return value


def _name(value: Any, what: str) -> str:
    if not isinstance(value, str) or not MEMORY_NAME_RE.match(value):
        raise SnapshotError("malformed", f"memory: bad {what} name")
    return value


def _int_map(doc: Any, what: str) -> dict[str, int]:
    if not isinstance(doc, dict) or len(doc) > MAX_MEMORY_KEYS:
        raise SnapshotError("malformed", f"memory: {what} is not a small object")
    return {_name(k, what): _num(doc, k, int) for k in doc}


def _opt(doc: Mapping[str, Any], key: str, kind: type) -> Any:
    return None if doc.get(key) is None else _num(doc, key, kind)


def _parse_configurator(doc: Any) -> ConfiguratorRecord | None:
    if doc is None:
        return None
    if not isinstance(doc, dict):
        raise SnapshotError("malformed", "memory: configurator is not an object")
    return ConfiguratorRecord(
        cls=_name(doc.get("class"), "class"),
        method=_name(doc.get("method"), "method"),
        available_bytes=_opt(doc, "available_bytes", int),
        page_size=_opt(doc, "page_size", int),
        bytes_per_full_token=_opt(doc, "bytes_per_full_token", float),
        fixed_bytes=_int_map(doc.get("fixed_bytes", {}), "fixed_bytes"),
        sizes=_int_map(doc.get("sizes", {}), "sizes"),
    )


def _parse_index_k(doc: Any) -> IndexKLayout | None:
    if doc is None:
        return None
    if not isinstance(doc, dict):
        raise SnapshotError("malformed", "memory: index_k is not an object")
    dtype, layout = doc.get("dtype"), doc.get("layout")
    if dtype not in INDEX_K_DTYPES or layout not in INDEX_K_LAYOUTS:
        raise SnapshotError("malformed", "memory: index_k dtype/layout unknown")
    return IndexKLayout(
        dtype=dtype,
        layout=layout,
        bytes_per_slot=_num(doc, "bytes_per_slot", float),
        page_size=_num(doc, "page_size", int),
        head_dim=_opt(doc, "head_dim", int),
    )


def _parse_pool(doc: Any) -> PoolMemory:
    if not isinstance(doc, dict):
        raise SnapshotError("malformed", "memory: pool is not an object")
    layers = doc.get("layers")
    span: tuple[int, int] | None = None
    if layers is not None:
        if not isinstance(layers, list) or len(layers) != 2:
            raise SnapshotError("malformed", "memory: pool layers is not [start, end]")
        span = (_num({"s": layers[0]}, "s", int), _num({"e": layers[1]}, "e", int))
    return PoolMemory(
        cls=_name(doc.get("class"), "class"),
        draft=bool(doc.get("draft", False)),
        layers=span,
        tensors=_num(doc, "tensors", int),
        bytes=_int_map(doc.get("bytes"), "bytes"),
        index_k=_parse_index_k(doc.get("index_k")),
    )


def parse_memory(doc: Any) -> MemoryReport:
    """The ``memory`` section (absent in version 1 files: nothing measured)."""
    if doc is None:
        return MemoryReport()
    if not isinstance(doc, dict):
        raise SnapshotError("malformed", "memory is not an object")
    pools = doc.get("pools", [])
    if not isinstance(pools, list) or len(pools) > MAX_POOLS:
        raise SnapshotError("malformed", "memory: pools is not a short list")
    return MemoryReport(
        configurator=_parse_configurator(doc.get("configurator")),
        pools=tuple(_parse_pool(p) for p in pools),
    )


def read_snapshot(path: str | os.PathLike[str]) -> Snapshot:
    """Read and validate one file. OSError -> reason ``unreadable``; bad content -> ``malformed``
    (or ``unsupported_version``); a rank that disagrees with the file name -> ``malformed``."""
    path = Path(path)
    try:
        # O_NONBLOCK: a FIFO named like a snapshot must not block the reader forever; only a
        # regular file is read at all
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise SnapshotError("unreadable", "not a regular file")
            with os.fdopen(fd, "rb", closefd=False) as fh:
                data = fh.read(MAX_FILE_BYTES + 1)
        finally:
            os.close(fd)
    except OSError as exc:
        raise SnapshotError("unreadable", f"{type(exc).__name__}: {exc.strerror or exc}") from exc
    if len(data) > MAX_FILE_BYTES:
        raise SnapshotError("malformed", "file too large")
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise SnapshotError("malformed", f"not JSON: {exc}") from exc
    snap = parse_snapshot(doc)
    expected = rank_from_filename(path.name)
    if expected is not None and snap.rank != expected:
        raise SnapshotError("malformed", f"rank {snap.rank!r} in a file named {path.name}")
    return snap


def rank_from_filename(name: str) -> str | None:
    """``rank-3.json`` -> ``"3"``; None for anything that is not a snapshot file name."""
    if not (name.startswith(FILE_PREFIX) and name.endswith(FILE_SUFFIX)):
        return None
    rank = name[len(FILE_PREFIX) : -len(FILE_SUFFIX)]
    return rank if RANK_RE.match(rank) else None

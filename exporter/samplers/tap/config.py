"""The tap's settings, validated once at construction so the hot path never re-checks them."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit


@dataclass(frozen=True)
class TapConfig:
    """How the tap forwards to SGLang and what it samples.

    ``upstream`` is SGLang's base URL (plain HTTP; any path in it is ignored because the tap
    forwards the client's path unchanged). ``sample_rate`` is the fraction of candidate
    responses handed to grading; candidates are POSTs whose path starts with one of
    ``sample_paths``. The decision is a keyed hash of path and body (``sample_seed`` is the
    key), so the same request is always sampled or always skipped, on every replica.
    """

    upstream: str = "http://127.0.0.1:30000"
    sample_rate: float = 0.0
    sample_paths: tuple[str, ...] = ("/v1/chat/completions", "/v1/completions", "/generate")
    sample_seed: int = 0
    # Bounded hand-off to the consumer; when full, samples are dropped and counted.
    queue_size: int = 256
    # A sample whose request + response exceed this is dropped (reason too_large).
    max_sample_bytes: int = 8 << 20
    connect_timeout: float = 5.0
    # Idle upstream connections are closed after this long: below the 5 s keep-alive SGLang
    # gives uvicorn (timeout_keep_alive=5), so the tap rarely reuses one SGLang is closing.
    upstream_idle_timeout: float = 4.0
    max_idle_upstream: int = 1024
    # Idle client keep-alive connections are closed after this long.
    client_idle_timeout: float = 75.0
    # Request line + headers larger than this are answered 400 (llhttp itself has no cap).
    max_header_bytes: int = 64 << 10
    # No byte from SGLang for this long while a response is owed: the client gets 504 (before a
    # head) or a cut response, and the connection is aborted. Generous, since a non-streamed
    # long generation sends nothing until it is done (nginx's proxy_read_timeout, 60 s by
    # default, is what operators raise for LLM servers).
    upstream_read_timeout: float = 900.0
    # Client connections open at once; more are answered 503 and closed. With the per-connection
    # bounds in docs/tap.md ("Memory bounds") this caps the tap's buffers.
    max_connections: int = 512
    # Client connections at once from one address (IPv4 address or IPv6 address); more are
    # answered 503 and closed, so one host cannot take every slot (issue 31: 512 sockets that
    # never read shut everyone out). Behind a gateway every client shares its address: raise it
    # up to max_connections there.
    max_connections_per_client: int = 128
    # A response the client reads nothing of for this long (its socket buffer full, the tap's
    # write buffer over its high-water mark) is cut and the connection aborted, as nginx's
    # send_timeout (60 s) does; SGLang's request is cancelled with it.
    client_send_timeout: float = 60.0
    # One budget for the bodies every in-flight sampling candidate keeps (request until the
    # sampling decision, response until the hand-off); past it a candidate is not captured
    # (dropped, reason capture_budget) and its request is still forwarded.
    capture_budget_bytes: int = 32 << 20
    backlog: int = 2048

    def __post_init__(self) -> None:
        parts = urlsplit(self.upstream)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"upstream must be http://host[:port], got {self.upstream!r}")
        if not 0.0 <= self.sample_rate <= 1.0:
            raise ValueError(f"sample_rate must be within [0, 1], got {self.sample_rate}")
        if self.queue_size < 1:
            raise ValueError("queue_size must be >= 1")
        for name in (
            "connect_timeout",
            "upstream_idle_timeout",
            "client_idle_timeout",
            "upstream_read_timeout",
            "client_send_timeout",
        ):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0")
        for name in (
            "max_connections",
            "max_connections_per_client",
            "capture_budget_bytes",
            "max_header_bytes",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")

    @property
    def upstream_host(self) -> str:
        host = urlsplit(self.upstream).hostname
        assert host is not None  # checked in __post_init__
        return host

    @property
    def upstream_port(self) -> int:
        return urlsplit(self.upstream).port or 80

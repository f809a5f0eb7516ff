"""The container HEALTHCHECK: ``python -m exporter.healthcheck`` exits 0 when the sidecar of this
container answers ``GET /healthz``, 1 when it does not.

It probes the address ``dsv4-sidecar serve`` actually bound, read from the file serve writes
(``DSV4_SIDECAR_LISTEN_FILE``, set by the image), so it follows the port whether it came from
``DSV4_SIDECAR_PORT``, ``--port`` or a config file. Before that file exists (or when the
sidecar runs without one) it falls back to ``DSV4_SIDECAR_HOST``/``DSV4_SIDECAR_PORT`` and
9400. Standard library only: it runs every few seconds beside the sidecar, so it imports
nothing of the sidecar's own dependencies.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.request
from collections.abc import Mapping
from pathlib import Path

DEFAULT_PORT = 9400
# What serve writes; `write_listen_file` and `probe_address` are the two ends of it.
LISTEN_FILE_ENV = "DSV4_SIDECAR_LISTEN_FILE"


def write_listen_file(path: Path, host: str, port: int, *, tls: bool = False) -> None:
    """Record the bound address atomically (a reader never sees half a file), and whether it
    speaks TLS (a web config file's tls_server_config), so the probe uses the right scheme."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    doc = {"host": host, "port": port, "pid": os.getpid(), "tls": tls}
    tmp.write_text(json.dumps(doc), "utf-8")
    os.replace(tmp, path)


def _connect_host(host: str) -> str:
    """Where to reach a server bound to ``host`` from inside its own network namespace."""
    if host in ("", "0.0.0.0"):
        return "127.0.0.1"
    if host == "::":
        return "::1"
    return host


def _record(env: Mapping[str, str]) -> dict | None:
    listen_file = env.get(LISTEN_FILE_ENV)
    if not listen_file:
        return None
    try:
        data = json.loads(Path(listen_file).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # not written yet (starting) or unreadable: the settings' address
    return data if isinstance(data, dict) else None


def probe_address(environ: Mapping[str, str] | None = None) -> tuple[str, int]:
    env = os.environ if environ is None else environ
    data = _record(env)
    if data is not None:
        try:
            return _connect_host(str(data["host"])), int(data["port"])
        except (ValueError, KeyError, TypeError):
            pass
    host = env.get("DSV4_SIDECAR_HOST", "0.0.0.0")
    port = int(env.get("DSV4_SIDECAR_PORT") or DEFAULT_PORT)
    return _connect_host(host), port


def url(host: str, port: int, tls: bool = False) -> str:
    scheme = "https" if tls else "http"
    netloc = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return f"{scheme}://{netloc}/healthz"


def main(environ: Mapping[str, str] | None = None, timeout: float = 2.0) -> int:
    env = os.environ if environ is None else environ
    tls = bool((_record(env) or {}).get("tls"))
    target = url(*probe_address(env), tls=tls)
    context = None
    if tls:
        import ssl

        # Liveness of the server in this very container, over loopback: the certificate names
        # the service, not 127.0.0.1, and no credential is sent, so it is not verified.
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(target, timeout=timeout, context=context) as resp:
            ok = resp.status == 200
    except (OSError, ValueError) as exc:
        print(f"unhealthy: {target}: {exc}", file=sys.stderr)
        return 1
    if not ok:
        print(f"unhealthy: {target}: HTTP {resp.status}", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

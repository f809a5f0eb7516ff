"""TLS and basic auth for the sidecar's port, from a web config file as Prometheus'
exporter-toolkit reads it (``--web.config.file``), so an SRE who runs node_exporter or
dcgm-exporter behind one writes the same file for this sidecar::

    tls_server_config:
      cert_file: /etc/dsv4/tls.crt
      key_file: /etc/dsv4/tls.key
      client_ca_file: /etc/dsv4/ca.crt          # optional: clients must present a cert
      client_auth_type: RequireAndVerifyClientCert  # optional, the toolkit's names
      min_version: TLS12                         # optional: TLS12 (default) or TLS13
    basic_auth_users:
      prometheus: $2b$12$...                     # bcrypt hash (htpasswd -nBC 12 "")

What is served where:

- TLS is uvicorn's own (``ssl_certfile``, ``ssl_keyfile``, ``ssl_ca_certs``,
  ``ssl_cert_reqs``); ``min_version`` is set on the context uvicorn builds. The files are
  read at start-up: a rotated certificate needs a restart (the toolkit re-reads per
  handshake; a Kubernetes Secret update rolls the pod anyway when mounted by subPath).
- Basic auth guards every path except ``/healthz`` (process liveness, no data: kubelet and
  the image's HEALTHCHECK probe it without credentials; the toolkit exempts nothing) and
  ``/api/v1/samples``, which has its own bearer tokens in the same ``Authorization``
  header (a request cannot carry both).
- Passwords are checked with ``bcrypt.checkpw`` in a worker thread (a bcrypt check takes tens
  of milliseconds and must not stall the event loop and the scrape). An unknown user is
  checked against a dummy hash, so the answer takes as long as for a known one and does not
  tell which users exist. Good credentials are remembered (bounded, keyed by a SHA-256 of
  user, hash and password, as the toolkit caches) so a 15 s scrape does not pay bcrypt
  every time.

A file that is wrong fails at start-up with the key and the fix (:class:`WebConfigError`);
keys the toolkit has and this sidecar does not implement are refused by name rather than
ignored, so nobody believes a cipher list or a header is in force when it is not.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import ssl
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

# Paths open without basic auth (see the module docstring for why each).
OPEN_PATHS = frozenset({"/healthz"})
OWN_AUTH_PATHS = frozenset({"/api/v1/samples"})
REALM = "dsv4-sidecar"
# bcrypt reads at most 72 bytes of a password (bcrypt >= 4.1 refuses longer ones): a longer
# password can never match, and a bound keeps a hostile header from costing more than that.
MAX_PASSWORD_BYTES = 72
MAX_USERNAME_BYTES = 256
MAX_USERS = 1000
CACHE_SIZE = 256  # remembered good (user, password) pairs; evicted oldest first

TLS_VERSIONS = {"TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3}
# exporter-toolkit's client_auth_type values, as uvicorn's ssl_cert_reqs
CLIENT_AUTH_TYPES = {
    "NoClientCert": ssl.CERT_NONE,
    "RequestClientCert": ssl.CERT_OPTIONAL,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
TOP_KEYS = ("tls_server_config", "basic_auth_users")
TLS_KEYS = ("cert_file", "key_file", "client_ca_file", "client_auth_type", "min_version")
# exporter-toolkit keys this sidecar does not implement: refused by name
UNSUPPORTED = {
    "http_server_config": "HTTP/2 and extra response headers are not configurable here",
    "cipher_suites": "Python's ssl defaults choose the ciphers (TLS 1.3 suites are fixed)",
    "curve_preferences": "Python's ssl defaults choose the curves",
    "max_version": "the highest version the Python ssl module supports is always offered",
    "prefer_server_cipher_suites": "not configurable here",
    "client_allowed_sans": "not implemented: use client_ca_file to restrict clients",
    "cert": "inline certificates are not supported: use cert_file",
    "key": "inline keys are not supported: use key_file",
    "rate_limit": "not implemented",
}
_BCRYPT_PREFIXES = ("$2a$", "$2b$", "$2y$")


class WebConfigError(ValueError):
    """A web config file that cannot be used: names the key and says how to fix it."""

    def __init__(self, path: Path, key: str, problem: str, fix: str) -> None:
        super().__init__(f"web config {path}: {key}: {problem}; fix: {fix}")
        self.key = key


@dataclass(frozen=True)
class TLSConfig:
    cert_file: Path
    key_file: Path
    client_ca_file: Path | None = None
    cert_reqs: int = ssl.CERT_NONE
    min_version: ssl.TLSVersion = ssl.TLSVersion.TLSv1_2


@dataclass(frozen=True)
class WebConfig:
    """What the file asks for: TLS (or None) and bcrypt hashes by user name."""

    path: Path
    tls: TLSConfig | None = None
    users: dict[str, bytes] = field(default_factory=dict)

    def uvicorn_ssl(self) -> dict[str, Any]:
        """uvicorn.Config's ssl options (empty without TLS)."""
        if self.tls is None:
            return {}
        out: dict[str, Any] = {
            "ssl_certfile": str(self.tls.cert_file),
            "ssl_keyfile": str(self.tls.key_file),
            "ssl_cert_reqs": self.tls.cert_reqs,
        }
        if self.tls.client_ca_file is not None:
            out["ssl_ca_certs"] = str(self.tls.client_ca_file)
        return out

    def wrap(self, app: ASGIApp) -> ASGIApp:
        """The app behind basic auth when users are configured, else the app itself."""
        return BasicAuth(app, self.users) if self.users else app


def _fail(path: Path, key: str, problem: str, fix: str) -> WebConfigError:
    return WebConfigError(path, key, problem, fix)


def _file(path: Path, base: Path, key: str, value: Any) -> Path:
    if not isinstance(value, str) or not value.strip():
        raise _fail(path, key, "must be a file path", f"set {key} to the PEM file's path")
    p = Path(value)
    if not p.is_absolute():  # relative to the web config file, as the toolkit resolves them
        p = base / p
    if not p.is_file():
        raise _fail(path, key, f"{str(p)!r} is not a readable file", "mount the file there")
    return p


def _tls(path: Path, raw: Any) -> TLSConfig:
    key = "tls_server_config"
    if not isinstance(raw, dict):
        raise _fail(path, key, "must be a mapping", "give cert_file and key_file under it")
    for k in raw:
        if k in UNSUPPORTED:
            raise _fail(path, f"{key}.{k}", UNSUPPORTED[k], f"remove {k}")
        if k not in TLS_KEYS:
            raise _fail(path, f"{key}.{k}", "unknown key", f"use only {', '.join(TLS_KEYS)}")
    for k in ("cert_file", "key_file"):
        if not raw.get(k):
            raise _fail(path, f"{key}.{k}", "is missing", "give both cert_file and key_file (PEM)")
    base = path.parent
    cert = _file(path, base, f"{key}.cert_file", raw["cert_file"])
    key_file = _file(path, base, f"{key}.key_file", raw["key_file"])
    ca = raw.get("client_ca_file")
    ca_file = _file(path, base, f"{key}.client_ca_file", ca) if ca is not None else None
    auth = raw.get("client_auth_type")
    if auth is None:
        # the toolkit's default with a client CA is to require and verify client certs
        reqs = ssl.CERT_REQUIRED if ca_file is not None else ssl.CERT_NONE
    elif auth not in CLIENT_AUTH_TYPES:
        raise _fail(
            path,
            f"{key}.client_auth_type",
            f"unknown value {auth!r}",
            f"use one of {', '.join(CLIENT_AUTH_TYPES)}",
        )
    else:
        reqs = CLIENT_AUTH_TYPES[auth]
        if reqs != ssl.CERT_NONE and ca_file is None:
            raise _fail(
                path,
                f"{key}.client_auth_type",
                f"{auth} needs the CA that signs client certificates",
                "set client_ca_file",
            )
    version = raw.get("min_version", "TLS12")
    if version not in TLS_VERSIONS:
        raise _fail(
            path,
            f"{key}.min_version",
            f"unsupported value {version!r} (TLS 1.0 and 1.1 are not offered)",
            f"use one of {', '.join(TLS_VERSIONS)}",
        )
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:  # load now, so a wrong key or a non-PEM file fails here, by name, not in uvicorn
        # an encrypted key would make OpenSSL prompt on a terminal the container does not
        # have: a password callback that gives none turns that into the error below
        ctx.load_cert_chain(cert, key_file, password=lambda: b"")
    except (ssl.SSLError, OSError) as exc:
        raise _fail(
            path,
            f"{key}.cert_file/key_file",
            f"cannot load the pair ({getattr(exc, 'reason', None) or type(exc).__name__})",
            "give a PEM certificate and the unencrypted PEM private key that belongs to it",
        ) from None
    if ca_file is not None:
        try:
            ctx.load_verify_locations(ca_file)
        except (ssl.SSLError, OSError) as exc:
            raise _fail(
                path,
                f"{key}.client_ca_file",
                f"cannot load it ({getattr(exc, 'reason', None) or type(exc).__name__})",
                "give the PEM certificate(s) of the CA that signs client certificates",
            ) from None
    return TLSConfig(cert, key_file, ca_file, reqs, TLS_VERSIONS[version])


def _users(path: Path, raw: Any) -> dict[str, bytes]:
    key = "basic_auth_users"
    if not isinstance(raw, dict):
        raise _fail(path, key, "must be a mapping of user name to bcrypt hash", "fix the YAML")
    if len(raw) > MAX_USERS:
        raise _fail(path, key, f"more than {MAX_USERS} users", "keep the scrapers' users only")
    users: dict[str, bytes] = {}
    for user, hashed in raw.items():
        if not isinstance(user, str) or not user or ":" in user:
            raise _fail(
                path, key, f"user name {user!r} is not usable", "use a non-empty name without ':'"
            )
        if len(user.encode()) > MAX_USERNAME_BYTES:
            raise _fail(path, f"{key}.{user[:20]}...", "user name too long", "shorten it")
        if (
            not isinstance(hashed, str)
            or not hashed.startswith(_BCRYPT_PREFIXES)
            or len(hashed) != 60
            or not hashed[4:6].isdigit()
            or hashed[6] != "$"
        ):
            raise _fail(
                path,
                f"{key}.{user}",
                "is not a bcrypt hash (a plain password must never be stored here)",
                "store the hash: `htpasswd -nBC 12 '' | tr -d ':\\n'`, or python -c "
                "\"import bcrypt; print(bcrypt.hashpw(b'PASSWORD', bcrypt.gensalt()).decode())\"",
            )
        users[user] = hashed.encode()
    return users


def load(path: Path) -> WebConfig:
    """Read and check a web config file; WebConfigError names the key and the fix."""
    import yaml

    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise _fail(
            path, "web_config_file", f"cannot read it ({exc.strerror or exc})", "fix the path"
        ) from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise _fail(path, "web_config_file", f"not valid YAML{where}", "fix the YAML") from None
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        raise _fail(path, "web_config_file", "must be a mapping", f"use the keys {TOP_KEYS}")
    for k in doc:
        if k in UNSUPPORTED:
            raise _fail(path, str(k), UNSUPPORTED[k], f"remove {k}")
        if k not in TOP_KEYS:
            raise _fail(path, str(k), "unknown key", f"use only {', '.join(TOP_KEYS)}")
    # present but empty is a mistake (TLS asked for, nothing to serve it with), not "no TLS"
    tls = _tls(path, doc["tls_server_config"]) if "tls_server_config" in doc else None
    users = _users(path, doc["basic_auth_users"]) if doc.get("basic_auth_users") else {}
    return WebConfig(path, tls, users)


class BasicAuth:
    """ASGI middleware: HTTP basic auth (RFC 7617) against bcrypt hashes."""

    def __init__(self, app: ASGIApp, users: dict[str, bytes]) -> None:
        import bcrypt

        self.app = app
        self.users = dict(users)
        self._good: OrderedDict[bytes, None] = OrderedDict()
        # Checked for unknown users: a real hash at the highest cost configured, so a wrong
        # user name costs what a wrong password does and the timing tells nothing.
        rounds = max((_cost(h) for h in self.users.values()), default=10)
        self._dummy = bcrypt.hashpw(b"no user has this password", bcrypt.gensalt(rounds))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS | OWN_AUTH_PATHS:
            await self.app(scope, receive, send)
            return
        header = b""
        for key, value in scope["headers"]:
            if key == b"authorization":
                header = value
                break
        if await self.check(header):
            await self.app(scope, receive, send)
            return
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"www-authenticate", f'Basic realm="{REALM}"'.encode()),
                    (b"content-type", b"text/plain; charset=utf-8"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": b"Unauthorized\n"})

    async def check(self, header: bytes) -> bool:
        """True for a good ``Basic`` credential. Never logs what it was given."""
        parsed = _parse_basic(header)
        if parsed is None:
            return False
        user, password = parsed
        hashed = self.users.get(user)
        key = hashlib.sha256(user.encode() + b"\0" + (hashed or b"") + b"\0" + password).digest()
        if hashed is not None and key in self._good:
            self._good.move_to_end(key)
            return True
        ok = await asyncio.to_thread(_checkpw, password, hashed or self._dummy)
        ok = ok and hashed is not None
        if ok:
            self._good[key] = None
            while len(self._good) > CACHE_SIZE:
                self._good.popitem(last=False)
        return ok


def _cost(hashed: bytes) -> int:
    """The cost factor of a ``$2b$NN$...`` hash (4..31), 10 when unreadable."""
    try:
        return min(31, max(4, int(hashed[4:6])))
    except ValueError:
        return 10


def _checkpw(password: bytes, hashed: bytes) -> bool:
    import bcrypt

    try:
        return bool(bcrypt.checkpw(password, hashed))
    except ValueError:  # a malformed hash cannot match
        return False


def _parse_basic(header: bytes) -> tuple[str, bytes] | None:
    """(user, password) from ``Basic base64(user:password)``; None for anything else,
    including a password bcrypt could not check (over 72 bytes)."""
    scheme, _, value = header.partition(b" ")
    if scheme.lower() != b"basic" or not value:
        return None
    if len(value) > 4 * (MAX_USERNAME_BYTES + MAX_PASSWORD_BYTES + 1) // 3 + 4:
        return None
    try:
        decoded = base64.b64decode(value.strip(), validate=True)
    except (binascii.Error, ValueError):
        return None
    user, sep, password = decoded.partition(b":")
    if not sep or len(password) > MAX_PASSWORD_BYTES:
        return None
    try:
        name = user.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return name, password


def server_config(app: ASGIApp, web: WebConfig | None, **options: Any) -> Any:
    """A uvicorn.Config serving ``app`` as the web config says: uvicorn's ssl options, the
    app behind basic auth, and ``min_version`` set on the SSL context uvicorn builds (uvicorn
    has no option for it). ``serve`` and the tests start servers through this one function."""
    import uvicorn

    if web is None:
        return uvicorn.Config(app, **options)
    min_version = web.tls.min_version if web.tls is not None else None

    class _Config(uvicorn.Config):
        def load(self) -> None:
            super().load()
            if self.ssl is not None and min_version is not None:
                self.ssl.minimum_version = min_version

    return _Config(web.wrap(app), **web.uvicorn_ssl(), **options)

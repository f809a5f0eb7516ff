"""Write a random bearer token file once: the compose stacks' stand-in for a Kubernetes Secret.

``python -I -m exporter.tokenfile PATH`` (the compose service ``ingest-token``) leaves at PATH
a token that the sidecar (``ingest_token_file``) and the tap in its own container read from a
volume both mount read-only. Compose has no Secret to create beforehand, and an environment
variable holding the value would show in ``docker inspect`` and every child's environment, so
a one-shot container makes the file before either starts (docs/deploy.md).

A valid token already there is kept: a restarted stack, or a gateway given the token, keeps
working. The file is made beside PATH under a fresh name (``O_EXCL``, never following a link),
filled, synced and renamed over PATH, so a reader sees either no file or a whole token; a link
or a non-file planted at PATH is refused, never followed. Mode 0400: only the stack's own user
(every dsv4 container runs as 65532) reads it.
"""

from __future__ import annotations

import os
import secrets
import stat
import sys
from pathlib import Path

from exporter.config import token_file_problem

TOKEN_BYTES = 32
"""Random bytes in a token (256 bits, hex encoded: what docs/deploy.md's ``openssl rand -hex
32`` makes for a Kubernetes Secret)."""
MODE = 0o400


def ensure_token(path: Path) -> bool:
    """Leave a valid token at ``path``; True when one was written, False when one was kept.

    Raises :class:`FileExistsError` when ``path`` is a link or not a regular file."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        pass
    else:
        if not stat.S_ISREG(st.st_mode):
            raise FileExistsError(f"{str(path)!r} is not a regular file (a link?); not replaced")
        if token_file_problem(path) is None:
            return False
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, MODE)
    try:
        with os.fdopen(fd, "w", encoding="ascii") as f:
            f.write(secrets.token_hex(TOKEN_BYTES) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return True


def main(argv: list[str] | None = None) -> int:
    """Exit 0 with a token at the path (never printed), 2 on a bad path."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m exporter.tokenfile PATH", file=sys.stderr)
        return 2
    path = Path(args[0])
    try:
        wrote = ensure_token(path)
    except OSError as exc:
        print(f"tokenfile: {exc}", file=sys.stderr)
        return 2
    print(f"tokenfile: {'wrote a new' if wrote else 'kept the'} token in {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

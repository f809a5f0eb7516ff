"""`dsv4-sidecar triage`: collect evidence, diagnose, write a one-page report.

Sources (any combination): a running sidecar (--sidecar: its /api/v1/footprint, /readyz,
/metrics and, with its bearer token, /api/v1/samples), Prometheus (--prometheus: range
queries over --window, narrowed by --selector), a `repro --json` result or `repro --out`
directory (--repro), JSONL sample files (--scan). Writes DIR/triage.html (with plots when
matplotlib is installed), DIR/triage.md (for tickets) and DIR/evidence.json.

Examples:
  dsv4-sidecar triage --sidecar http://127.0.0.1:9400
  dsv4-sidecar triage --prometheus http://prometheus:9090 \\
      --selector 'job="dsv4-sidecar",instance="node-3:9400"' --window 2h --out /tmp/triage
  dsv4-sidecar triage --sidecar http://127.0.0.1:9400 --repro runs/ab1 --scan runs/ab1/samples.jsonl

A `repro --out` directory's samples.jsonl given with --scan next to that run's --repro adds
per-sample reasons, not counts: its lines are recognised (arm, URL, time) and counted once.
The same file given twice is read once.

The samples token is read from DSV4_SIDECAR_SAMPLES_TOKEN or --samples-token-file, never
from the command line (it would end up in shell history and process lists). A sidecar behind
a web config file (TLS, basic auth): --sidecar-ca-file for its certificate's CA, --sidecar-user
with the password from DSV4_TRIAGE_SIDECAR_PASSWORD or --sidecar-password-file.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from exporter.oncall.triage.collect import CollectOptions
    from exporter.oncall.triage.http import SidecarAuth
    from exporter.thresholds import AlertConfig


# The sidecar's basic auth password for triage: not DSV4_SIDECAR_* (those are the sidecar's own
# settings, and serve warns about unknown ones); never a flag (shell history, process lists).
PASSWORD_ENV = "DSV4_TRIAGE_SIDECAR_PASSWORD"


class UsageError(Exception):
    """A bad flag: one line on stderr, exit status 2."""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "triage",
        help="collect evidence (sidecar, Prometheus, repro, samples), diagnose, write a report",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--sidecar", metavar="URL", help="sidecar base URL (http://host:9400)")
    p.add_argument("--prometheus", metavar="URL", help="Prometheus base URL")
    p.add_argument(
        "--selector",
        default='job="dsv4-sidecar"',
        help="label matchers added to every PromQL selector (the sidecar's scrape job/instance)",
    )
    p.add_argument("--window", default="30m", help="evidence window (Prometheus), e.g. 30m, 2h")
    p.add_argument("--end", help="end of the window: unix seconds or ISO 8601 (default: now)")
    p.add_argument("--step", help="range-query resolution (default: window / 120, >= 1s)")
    p.add_argument(
        "--rate-window",
        help="range of increase() in the over-time plots (default: 4 steps, >= 60s)",
    )
    p.add_argument("--samples-token-file", type=Path, help="file holding the samples token")
    p.add_argument("--sidecar-user", metavar="NAME", help="basic auth user of the sidecar")
    p.add_argument(
        "--sidecar-password-file",
        type=Path,
        metavar="FILE",
        help=f"file holding that user's password (or {PASSWORD_ENV})",
    )
    p.add_argument(
        "--sidecar-ca-file",
        type=Path,
        metavar="FILE",
        help="CA (PEM) that signed the sidecar's TLS certificate (default: the system's)",
    )
    p.add_argument("--repro", type=Path, help="`repro --json` output, or a `repro --out` DIR")
    p.add_argument("--scan", type=Path, action="append", default=[], help="JSONL samples file")
    p.add_argument("--out", type=Path, help="report directory (default: ./triage-<time>)")
    p.add_argument("--no-plots", action="store_true", help="write the HTML without plots")
    p.add_argument(
        "--alert-config",
        type=Path,
        metavar="FILE",
        help="the site's alert knob overrides (the YAML of `alerts.generate --config`): "
        "triage's over-commit and sample-count thresholds are then the alerts' own",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=10.0,
        help="timeout of each HTTP request as a whole, connect to last byte (s)",
    )
    p.add_argument("--json", action="store_true", help="print the diagnosis and evidence as JSON")
    p.set_defaults(run=run)


def _url(value: str | None, flag: str) -> str | None:
    if value is None:
        return None
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise UsageError(f"{flag} must be an http:// or https:// URL, got {value!r}")
    return value.rstrip("/")


def _end(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        dt = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(f"--end must be unix seconds or ISO 8601, got {value!r}") from None
    return dt.timestamp()


def _token(args: argparse.Namespace) -> str | None:
    if args.samples_token_file is not None:
        try:
            return args.samples_token_file.read_text(encoding="utf-8").strip() or None
        except OSError as exc:
            raise UsageError(
                f"cannot read --samples-token-file {args.samples_token_file}: {exc.strerror}"
            ) from None
    return os.environ.get("DSV4_SIDECAR_SAMPLES_TOKEN") or None


def _sidecar_auth(args: argparse.Namespace) -> SidecarAuth | None:
    """The sidecar's web config credentials; the password never from a flag (shell history)."""
    from exporter.oncall.triage.http import SidecarAuth

    basic = None
    if args.sidecar_user:
        if args.sidecar_password_file is not None:
            try:
                text = args.sidecar_password_file.read_text(encoding="utf-8")
            except OSError as exc:
                raise UsageError(
                    f"cannot read --sidecar-password-file {args.sidecar_password_file}: "
                    f"{exc.strerror}"
                ) from None
            password = text.rstrip("\r\n")
        else:
            password = os.environ.get(PASSWORD_ENV, "")
        if not password:
            raise UsageError(
                f"--sidecar-user needs a password: set {PASSWORD_ENV} or --sidecar-password-file"
            )
        basic = (args.sidecar_user, password)
    elif args.sidecar_password_file is not None:
        raise UsageError("--sidecar-password-file needs --sidecar-user")
    ca = args.sidecar_ca_file
    if ca is not None and not ca.is_file():
        raise UsageError(f"--sidecar-ca-file {ca} is not a readable file")
    return SidecarAuth(basic, ca) if basic or ca else None


def options(args: argparse.Namespace) -> CollectOptions:
    from exporter.oncall.triage.collect import CollectOptions
    from exporter.oncall.triage.http import parse_duration

    sidecar = _url(args.sidecar, "--sidecar")
    prometheus = _url(args.prometheus, "--prometheus")
    if not (sidecar or prometheus or args.repro or args.scan):
        raise UsageError("give at least one of --sidecar, --prometheus, --repro, --scan")
    try:
        window = parse_duration(args.window)
        step = parse_duration(args.step) if args.step else None
        rate_window = parse_duration(args.rate_window) if args.rate_window else None
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if step is not None and window / step > 11_000:
        raise UsageError("--step too small for --window (Prometheus caps a range at 11000 points)")
    if not args.timeout > 0:
        raise UsageError("--timeout must be positive")
    for path in [args.repro, *args.scan]:
        if path is not None and not path.exists():
            raise UsageError(f"{path} does not exist")
    return CollectOptions(
        sidecar_url=sidecar,
        prometheus_url=prometheus,
        selector=args.selector,
        window_s=window,
        end=_end(args.end),
        step_s=step,
        rate_window_s=rate_window,
        samples_token=_token(args),
        sidecar_auth=_sidecar_auth(args),
        repro_path=args.repro,
        scan_paths=list(args.scan),
        timeout=args.timeout,
    )


def alert_thresholds(path: Path | None) -> AlertConfig:
    """The site's alert knobs (the YAML given to ``alerts.generate --config``), so triage's
    thresholds are the ones its alerts fire at; the defaults without one."""
    from exporter.thresholds import load

    try:
        return load(path)
    except OSError as exc:
        raise UsageError(f"--alert-config: cannot read {path}: {exc.strerror or exc}") from None
    except (KeyError, TypeError, ValueError) as exc:
        msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        raise UsageError(f"--alert-config {path}: {msg}") from None


def run(args: argparse.Namespace) -> int:
    try:
        opts = options(args)
        thresholds = alert_thresholds(args.alert_config)
    except UsageError as exc:
        print(f"dsv4-sidecar triage: error: {exc}", file=sys.stderr)
        return 2
    from exporter.oncall.triage.report import write_report

    out = args.out or Path(f"triage-{time.strftime('%Y%m%d-%H%M%S')}")
    try:
        result = write_report(opts, out, plots=not args.no_plots, thresholds=thresholds)
    except OSError as exc:
        print(f"dsv4-sidecar triage: error: cannot write {out}: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result.to_json(), sort_keys=True, allow_nan=False))
    else:
        from rich.console import Console

        from exporter.oncall.triage.report import print_summary

        print_summary(result, Console())
    return 0 if result.evidence.sources else 1

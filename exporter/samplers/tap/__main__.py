"""Run the tap on its own: ``python -m exporter.samplers.tap --upstream URL --port N``.

For benchmarks and manual checks; the sidecar app embeds :class:`Tap` in its own loop. Samples
go to a consumer that only counts them. With ``--print-port`` the bound port is printed on
stdout once listening (for port 0); ``--metrics-port`` serves the tap's metrics (text format)
from prometheus_client's own HTTP thread.
"""

from __future__ import annotations

import argparse
import asyncio
import gc

from exporter.samplers.tap import CapturedExchange, Tap, TapConfig
from exporter.samplers.tap.sampling import until_signalled


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m exporter.samplers.tap", description=__doc__)
    ap.add_argument("--upstream", default="http://127.0.0.1:30000")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--sample-rate", type=float, default=0.0)
    ap.add_argument("--max-connections", type=int, default=TapConfig.max_connections)
    ap.add_argument(
        "--max-connections-per-client",
        type=int,
        default=TapConfig.max_connections_per_client,
        help="client connections at once from one address (benchmarks open all from one)",
    )
    ap.add_argument("--metrics-port", type=int, default=None)
    ap.add_argument("--print-port", action="store_true")
    ap.add_argument("--no-uvloop", action="store_true", help="use the stdlib event loop")
    args = ap.parse_args(argv)
    config = TapConfig(
        upstream=args.upstream,
        sample_rate=args.sample_rate,
        max_connections=args.max_connections,
        max_connections_per_client=args.max_connections_per_client,
    )
    if not args.no_uvloop:
        import uvloop

        uvloop.install()
    asyncio.run(_serve(config, args))
    return 0


async def _serve(config: TapConfig, args: argparse.Namespace) -> None:
    received = 0

    async def count(sample: CapturedExchange) -> None:
        nonlocal received
        received += sample.response_bytes

    tap = Tap(config, on_sample=count)
    bound = await tap.start(args.host, args.port)
    if args.metrics_port is not None:
        from prometheus_client import CollectorRegistry, start_http_server

        registry = CollectorRegistry()
        registry.register(tap)
        start_http_server(args.metrics_port, addr=args.host, registry=registry)
    # Everything allocated so far lives for the whole process: keep the GC from re-scanning it
    gc.freeze()
    if args.print_port:
        print(bound, flush=True)
    await until_signalled()
    await tap.stop(grace=1.0)


if __name__ == "__main__":
    raise SystemExit(main())

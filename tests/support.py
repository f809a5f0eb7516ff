"""Real servers for tests: uvicorn on 127.0.0.1 ephemeral ports, and a real Prometheus."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import httpx
import pytest
import uvicorn
import yaml

if TYPE_CHECKING:
    from exporter.sim.settings import SimSettings


def free_port() -> int:
    """A loopback port free now, for a child that binds it later. Between the two another
    process (a pytest-xdist worker, a client's outgoing socket) may take it: a child started on
    one goes through :func:`spawn_listening`, which starts it again on a new port when it
    exits before it serves. A port nothing must answer on is :func:`dead_url`'s, not this."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Bound and never listening, for the life of the process: a connection to it is refused, and
# no other process (another pytest-xdist worker) can bind it meanwhile, as it could a port
# free_port() returned and let go.
_DEAD: list[socket.socket] = []


def dead_url() -> str:
    """``http://127.0.0.1:PORT`` where nothing listens, and nothing will while the tests run: a
    source that must be down, a target that must refuse."""
    if not _DEAD:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        _DEAD.append(sock)
    return f"http://127.0.0.1:{_DEAD[0].getsockname()[1]}"


def spawn_listening(
    start: Callable[..., subprocess.Popen[Any]],
    serves: Callable[..., bool],
    ports: int = 1,
    timeout: float = 60.0,
    attempts: int = 3,
) -> tuple[subprocess.Popen[Any], tuple[int, ...]]:
    """Start a child on ``ports`` loopback ports picked by :func:`free_port` (``start(*ports)``)
    and wait until ``serves(*ports)``. A child that exits first lost a port to another process
    between the pick and its bind, so it is started again on new ones (``attempts`` in all);
    the last one's exit fails the test. On success the child is the caller's to stop."""
    for attempt in range(attempts):
        picked = tuple(free_port() for _ in range(ports))
        proc = start(*picked)

        def up(picked: tuple[int, ...] = picked, proc: subprocess.Popen[Any] = proc) -> bool:
            return proc.poll() is not None or serves(*picked)  # wait_for: raising is not yet

        try:
            wait_for(up, timeout=timeout)
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        if proc.poll() is None:
            return proc, picked
        if attempt == attempts - 1:
            err = proc.stderr.read() if proc.stderr else ""
            err = err.decode(errors="replace") if isinstance(err, bytes) else err
            pytest.fail(f"{proc.args!r} exited with {proc.returncode} before serving: {err}")
    raise AssertionError("unreachable")


class ServerThread:
    """Serve an ASGI app with a real uvicorn server on an ephemeral loopback port."""

    def __init__(self, app: Any, lifespan: str = "on", **config: Any) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(
            uvicorn.Config(app, log_level="warning", lifespan=lifespan, access_log=False, **config)
        )
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True
        )

    def __enter__(self) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + 15
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.sock.close()


def wait_for(pred: Callable[[], Any], timeout: float = 15.0, interval: float = 0.1) -> Any:
    """Poll ``pred`` until it returns a truthy value; fail the test with what it last said."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = pred()
        except Exception as exc:  # servers still starting, etc.
            last = exc
        else:
            if last:
                return last
        time.sleep(interval)
    pytest.fail(f"condition not met within {timeout}s; last value: {last!r}")


HANG_GUARD_S = 30.0  # how long a test awaits a condition before calling it hung (not a budget)


async def settle(pred: Callable[[], bool], timeout: float = HANG_GUARD_S) -> bool:
    """Await ``pred()`` on the running loop (counters that callbacks update, with no event to
    await): the loop runs the code under test between checks, and the result comes as soon
    as the condition holds. ``timeout`` only tells a hang from a slow machine, so it is long;
    a caller never shortens it to assert speed (timing belongs in bench/)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not pred():
        if loop.time() > deadline:
            return False
        await asyncio.sleep(0.005)  # yields to the callbacks that make pred() true
    return True


def scrape(url: str, **headers: str) -> str:
    return httpx.get(url + "/metrics", headers=headers, timeout=5).text


def sample_value(text: str, name: str, **labels: str) -> float | None:
    """The value of one series in a text exposition (labels must match exactly those given)."""
    from prometheus_client.parser import text_string_to_metric_families

    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return s.value
    return None


# --- the one skip policy -----------------------------------------------------------------------

# What puts each external program a test runs on the machine: `make test` runs these steps, so
# in CI (CI=true, .ci/run) a missing one is a broken setup, never a reason to pass unchecked.
INSTALLED_BY = {
    "promtool": "`make deb-test` installs Debian's prometheus",
    "prometheus": "`make deb-test` installs Debian's prometheus",
    "nginx": "`make deb-test` installs Debian's nginx",
    "jsonnet": "`make deb-test` installs Debian's jsonnet",
    "chromium": "`make deb-test` installs Debian's chromium",
    "docker-compose": "`make deb-test` installs Debian's docker-compose (no compose plugin here)",
    "kubectl": "`make kustomize` installs pykustomize, which the tests use before kubectl",
    "podman": "`make deb-image` installs Debian's podman",
}
# Where Debian puts daemons, off a non-root user's PATH.
SBIN_DIRS = ("/usr/sbin", "/usr/bin", "/sbin")


def in_ci() -> bool:
    """CI=true (.ci/run exports it, as every CI service does)."""
    return os.environ.get("CI", "").lower() not in ("", "0", "false", "no")


def unavailable(what: str, how: str) -> NoReturn:
    """The one rule for a test whose prerequisite is missing: locally a skip saying ``how`` to
    get it; in CI a failure, because there `make test` provides it and a skip would let a run
    pass without the check."""
    if in_ci():
        pytest.fail(f"{what} (CI=true: `make test` provides it; {how})")
    pytest.skip(f"{what}; {how}")


def find(*names: str) -> str | None:
    """The first of ``names`` on PATH or in the sbin directories, else None."""
    for name in names:
        path = shutil.which(name) or next(
            (f"{d}/{name}" for d in SBIN_DIRS if os.access(f"{d}/{name}", os.X_OK)), None
        )
        if path:
            return path
    return None


def require(tool: str, *alternatives: str) -> str:
    """The path of an external program a test needs (``tool``, else the first alternative
    found: ``require("chromium", "chromium-browser")``); missing, :func:`unavailable`."""
    path = find(tool, *alternatives)
    if path is None:
        unavailable(f"{tool} is not installed", INSTALLED_BY.get(tool, f"install {tool}"))
    return path


def optional(tool: str) -> str | None:
    """For a test that covers both running with ``tool`` and without it (the demo, with or
    without its Prometheus): the path, or None locally; in CI a missing ``tool`` fails, as in
    :func:`require`, so CI always takes the branch with it."""
    path = find(tool)
    if path is None and in_ci():
        unavailable(f"{tool} is not installed", INSTALLED_BY.get(tool, f"install {tool}"))
    return path


@contextlib.contextmanager
def prometheus(
    targets: list[str],
    rule_files: list[Path] | None = None,
    scrape_interval: str = "1s",
    eval_interval: str = "1s",
    scrape_configs: list[dict[str, Any]] | None = None,
) -> Iterator[str]:
    """A real Prometheus on a free loopback port with its own data dir; yields its URL.
    ``scrape_configs`` replaces the default job (one static job over ``targets``)."""
    binary = require("prometheus")
    tmp = Path(tempfile.mkdtemp(prefix="dsv4-prom-"))
    rules = "".join(f"\n  - {p}" for p in (rule_files or []))
    static = ", ".join(f"'{t}'" for t in targets)
    (tmp / "prometheus.yml").write_text(
        f"global:\n  scrape_interval: {scrape_interval}\n  evaluation_interval: {eval_interval}\n"
        + (f"rule_files:{rules}\n" if rules else "")
        + (
            yaml.safe_dump({"scrape_configs": scrape_configs})
            if scrape_configs is not None
            else "scrape_configs:\n  - job_name: dsv4-sidecar\n"
            + f"    static_configs:\n      - targets: [{static}]\n"
        )
    )
    log = (tmp / "prometheus.log").open("wb")  # closed in finally

    def start(port: int) -> subprocess.Popen[bytes]:
        shutil.rmtree(tmp / "data", ignore_errors=True)  # a retry's fresh TSDB
        return subprocess.Popen(
            [
                binary,
                f"--config.file={tmp / 'prometheus.yml'}",
                f"--storage.tsdb.path={tmp / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
            ],
            stdout=subprocess.DEVNULL,
            stderr=log,
        )

    def ready(port: int) -> bool:
        return httpx.get(f"http://127.0.0.1:{port}/-/ready", timeout=1).status_code == 200

    try:
        proc, (port,) = spawn_listening(start, ready, timeout=30)
    except BaseException:
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_process(proc)
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)


def stop_process(proc: subprocess.Popen[Any]) -> None:
    """SIGTERM, then SIGKILL if it has not exited within 10 s (a test's cleanup, not a check)."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


async def openai_chats(base_url: str, n: int, concurrency: int) -> list[bool]:
    """``n`` chat completions with the real OpenAI client (odd ones streamed), ``concurrency``
    at a time, over the canary prompts; each says whether its answer finished."""
    import openai

    from exporter.samplers.prompts import load_prompts

    client = openai.AsyncOpenAI(base_url=base_url + "/v1", api_key="not-used", max_retries=0)
    prompts = load_prompts()
    sem = asyncio.Semaphore(concurrency)

    async def one(i: int) -> bool:
        p = prompts[i % len(prompts)]
        async with sem:
            if i % 2:
                stream = await client.chat.completions.create(
                    model="m", messages=p["messages"], tools=p["tools"], stream=True
                )
                chunks = [c async for c in stream]
                return bool(chunks) and chunks[-1].choices[0].finish_reason is not None
            r = await client.chat.completions.create(
                model="m", messages=p["messages"], tools=p["tools"]
            )
            return r.choices[0].finish_reason in ("tool_calls", "stop")

    try:
        return await asyncio.gather(*(one(i) for i in range(n)))
    finally:
        await client.close()


def promql(url: str, query: str) -> list[dict]:
    r = httpx.get(url + "/api/v1/query", params={"query": query}, timeout=5)
    r.raise_for_status()
    return r.json()["data"]["result"]


def racy_sim(**over: Any) -> SimSettings:
    """The simulated deployment that corrupts: bf16 index-K with HiCache (the transfer race)
    at 60 requests in flight, answering at once. ``over``: engine, configurator, seed..."""
    from exporter.sim.settings import SimSettings

    base: dict[str, Any] = {
        "index_k_dtype": "bf16",
        "hicache": "on",
        "ttft_ms": 1,
        "itl_ms": 0,
        "background_running": 60,
    }
    return SimSettings(**{**base, **over})


@contextlib.contextmanager
def tap_load(sc: ServerThread) -> Iterator[None]:
    """Steady streaming load through the sidecar's tap while the block runs (bounded)."""
    from exporter.loadgen import LoadGenerator

    tap = f"http://127.0.0.1:{sc.server.config.app.state.sidecar.tap.port}"
    stop = threading.Event()

    def drive() -> None:
        gen = LoadGenerator(tap, stream=True, timeout=30)
        while not stop.is_set():
            asyncio.run(gen.run_level(8, requests=40, duration=5))

    t = threading.Thread(target=drive, daemon=True)
    t.start()
    try:
        yield
    finally:
        stop.set()
        t.join(timeout=30)


def serve_argv(sglang_url: str, *extra: str) -> list[str]:
    """``dsv4-sidecar serve`` as the tests start it: loopback, the fake GPU backend, no canary,
    errors only on stderr; ``extra`` adds the flags a test is about."""
    return [
        sys.executable, "-m", "exporter", "serve", "--host", "127.0.0.1",
        "--sglang-url", sglang_url, "--gpu-backend", "fake", "--canary", "false",
        "--log-level", "error", *extra,
    ]  # fmt: skip


def serve_with_tap(
    sglang_url: str, stderr: Path, *extra: str
) -> tuple[subprocess.Popen[bytes], int, int]:
    """``dsv4-sidecar serve`` (:func:`serve_argv`, ``extra`` flags added) with its API and its
    tap on picked ports and its stderr in the file ``stderr``, once the tap accepts and
    /healthz answers (:func:`spawn_listening`): the process, the API port, the tap port."""

    def start(api: int, tap: int) -> subprocess.Popen[bytes]:
        argv = serve_argv(sglang_url, "--port", str(api), "--tap-port", str(tap), *extra)
        return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=stderr.open("wb"))

    def up(api: int, tap: int) -> bool:
        socket.create_connection(("127.0.0.1", tap), timeout=1).close()
        return httpx.get(f"http://127.0.0.1:{api}/healthz", timeout=1).status_code == 200

    proc, (api, tap) = spawn_listening(start, up, ports=2)
    return proc, api, tap

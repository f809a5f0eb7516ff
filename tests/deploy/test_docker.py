"""docker/Dockerfile (the sidecar image), docker/Dockerfile.sglang-probe and .dockerignore,
checked statically: hadolint, then the properties the deployment relies on. The images are
built and run by tests/deploy/test_image.py; the wheel build by tests/probe/test_packaging.py."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import metadata
from pathlib import Path

import pytest
import yaml

from tests.deploy.conftest import (
    DOCKER,
    METRICS_PORT,
    PROBE_DIR,
    REPO,
    SIDECAR_UID,
    TAP_PORT,
    run,
    venv_tool,
)

SIDECAR_DOCKERFILE = DOCKER / "Dockerfile"
PROBE_DOCKERFILE = DOCKER / "Dockerfile.sglang-probe"
HADOLINT_CONFIG = REPO / ".hadolint.yaml"


def parse(path: Path) -> list[list[tuple[str, str]]]:
    """Stages of a Dockerfile, each a list of (INSTRUCTION, arguments) with continuation lines
    joined and comments dropped. Instructions before the first FROM (global ARGs) form stage 0."""
    stages: list[list[tuple[str, str]]] = [[]]
    logical = ""
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not logical and (not line or line.startswith("#")):
            continue
        if logical and line.startswith("#"):
            continue  # a comment inside a continued instruction
        if line.endswith("\\"):
            logical += line[:-1] + " "
            continue
        logical += line
        instr, _, args = logical.partition(" ")
        instr = instr.upper()
        if instr == "FROM":
            stages.append([])
        stages[-1].append((instr, args.strip()))
        logical = ""
    return stages


def instructions(stage: list[tuple[str, str]], name: str) -> list[str]:
    return [args for instr, args in stage if instr == name]


def exec_form(args: str) -> list[str]:
    value = json.loads(args)
    assert isinstance(value, list), f"not exec form: {args}"
    return value


# --- hadolint -----------------------------------------------------------------------------


def test_hadolint_passes_both_dockerfiles():
    hadolint = venv_tool("hadolint")
    res = run(
        [
            hadolint,
            "--config",
            str(HADOLINT_CONFIG),
            str(SIDECAR_DOCKERFILE),
            str(PROBE_DOCKERFILE),
        ],
        cwd=REPO,
    )
    assert res.returncode == 0, res.stdout + res.stderr


def test_hadolint_config_fails_on_everything_and_every_ignore_has_a_reason():
    cfg = yaml.safe_load(HADOLINT_CONFIG.read_text(encoding="utf-8"))
    assert cfg["failure-threshold"] == "info"
    ignored = cfg.get("ignored") or []
    lines = HADOLINT_CONFIG.read_text(encoding="utf-8").splitlines()
    for rule in ignored:
        # An ignore is listed as "- DLxxxx  # why" (not inside the explanatory comment).
        entry = [ln for ln in lines if re.match(rf"\s*-\s*{rule}\b", ln)]
        assert entry and "#" in entry[0], f"{rule} is ignored without a reason comment"


def test_hadolint_really_runs_with_this_config(tmp_path):
    """Negative control: the same invocation rejects an untagged base and a root user."""
    bad = tmp_path / "Dockerfile"
    bad.write_text('FROM python\nUSER root\nCMD ["python"]\n', encoding="utf-8")
    res = run([venv_tool("hadolint"), "--config", str(HADOLINT_CONFIG), str(bad)], cwd=REPO)
    assert res.returncode != 0
    assert "DL3006" in res.stdout and "DL3002" in res.stdout


# --- the sidecar image ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def sidecar_stages():
    stages = parse(SIDECAR_DOCKERFILE)
    assert len(stages) >= 3, "multi-stage: a build stage and a final stage"
    return stages


def base_image_default(stages) -> str:
    (arg,) = [a for a in instructions(stages[0], "ARG") if a.startswith("BASE_IMAGE=")]
    return arg.split("=", 1)[1]


def test_base_is_an_argument_defaulting_to_pinned_slim_python(sidecar_stages):
    base = base_image_default(sidecar_stages)
    # Fully qualified (no registry search list is consulted), pinned by tag and digest.
    assert re.fullmatch(
        r"docker\.io/library/python:\d+\.\d+\.\d+-slim-\w+@sha256:[0-9a-f]{64}", base
    ), base
    bases = [instructions(s, "FROM")[0].split()[0] for s in sidecar_stages[1:]]
    # Both stages: the venv copied into the final stage links to the build stage's interpreter.
    assert bases == ["${BASE_IMAGE}"] * len(bases), bases
    # Re-declared in the final stage so its label records the base actually used.
    assert "BASE_IMAGE" in instructions(sidecar_stages[-1], "ARG")
    assert 'org.opencontainers.image.base.name="${BASE_IMAGE}"' in " ".join(
        instructions(sidecar_stages[-1], "LABEL")
    )


@pytest.mark.parametrize("path", [SIDECAR_DOCKERFILE, PROBE_DOCKERFILE], ids=lambda p: p.name)
def test_no_frontend_is_fetched(path):
    """A `# syntax=` line makes BuildKit pull a Dockerfile frontend image from a registry before
    building anything, which fails air-gapped; the builder's bundled frontend reads these files."""
    first = path.read_text(encoding="utf-8").splitlines()[0]
    assert not re.match(r"#\s*syntax\s*=", first, re.I), first


def test_final_stage_copies_a_venv_and_runs_nothing(sidecar_stages):
    build_name = instructions(sidecar_stages[1], "FROM")[0].split()[-1]
    final = sidecar_stages[-1]
    copies = instructions(final, "COPY")
    assert any(c.startswith(f"--from={build_name} /opt/dsv4-sidecar") for c in copies), copies
    assert not instructions(final, "RUN"), "nothing is installed in the final stage"
    build_runs = " ".join(instructions(sidecar_stages[1], "RUN"))
    assert "pip wheel" in build_runs
    assert re.search(r"python3? -m venv /opt/dsv4-sidecar", build_runs), build_runs


def test_build_stage_compiles_the_dsml_accelerator_and_proves_it(sidecar_stages):
    """The image grades with the C accelerator: the build stage has a compiler, and the build
    fails if the installed sidecar would fall back to the pure-Python text checks. The check
    must import the installed package: `python -c` in WORKDIR /src would put the bare source
    tree (no .so, .dockerignore keeps them out) first on sys.path."""
    runs = instructions(sidecar_stages[1], "RUN")
    assert "gcc" in " ".join(runs) and "libc6-dev" in " ".join(runs), runs
    (check,) = [r for r in runs if "d.KERNEL == 'c'" in r]
    step = next(s for s in check.split("&&") if "d.KERNEL" in s)
    assert re.search(r"python3? -[IP]\b", step) or step.strip().startswith("cd /"), step
    assert "d.__file__.startswith('/opt/dsv4-sidecar/')" in step
    probe_runs = " ".join(
        args for stage in parse(PROBE_DOCKERFILE) for args in instructions(stage, "ENV")
    )
    assert "DSV4_SIDECAR_NO_NATIVE=1" in probe_runs, "the probe wheel must stay pure Python"


def test_final_stage_user_is_numeric_non_root(sidecar_stages):
    users = instructions(sidecar_stages[-1], "USER")
    assert users, "USER is set in the final stage"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit() and int(uid) == SIDECAR_UID
    assert gid.isdigit() and int(gid) != 0


def test_runtime_contract(sidecar_stages):
    final = sidecar_stages[-1]
    env = " ".join(instructions(final, "ENV"))
    assert "PYTHONDONTWRITEBYTECODE=1" in env
    assert "NVIDIA_DRIVER_CAPABILITIES=utility" in env
    assert "NVIDIA_VISIBLE_DEVICES" not in env, "which GPUs are visible is the deployment's call"
    assert exec_form(instructions(final, "ENTRYPOINT")[-1]) == ["dsv4-sidecar"]
    assert exec_form(instructions(final, "CMD")[-1]) == ["serve"]
    exposed = {p for e in instructions(final, "EXPOSE") for p in e.split()}
    assert {str(METRICS_PORT), str(TAP_PORT)} <= exposed
    assert any("/tmp" in v for v in instructions(final, "VOLUME")), "the one writable place"
    labels = " ".join(instructions(final, "LABEL"))
    for key in ("title", "description", "version", "revision", "licenses", "source"):
        assert f"org.opencontainers.image.{key}=" in labels


def test_no_torch_in_the_sidecar_image(sidecar_stages):
    text = SIDECAR_DOCKERFILE.read_text(encoding="utf-8")
    assert "[probe]" not in text and not re.search(r"pip install[^\n]*torch", text)
    # The installed distribution's metadata is pyproject's, resolved: runtime requirements are
    # those without an `extra ==` marker.
    runtime = [r for r in metadata.requires("dsv4-sidecar") or [] if "extra ==" not in r]
    assert runtime and not [r for r in runtime if r.lower().startswith("torch")], runtime
    scripts = {e.name: e.value for e in metadata.entry_points(group="console_scripts")}
    assert scripts["dsv4-sidecar"] == "exporter.cli:main"


def _healthcheck_argv(stage: list[tuple[str, str]]) -> list[str]:
    (hc,) = instructions(stage, "HEALTHCHECK")
    opts, _, cmd = hc.partition("CMD ")
    assert "--interval=" in opts and "--timeout=" in opts
    argv = exec_form(cmd)
    # No curl in slim images: the interpreter probes, with the sidecar's stdlib-only module.
    assert argv == ["python", "-I", "-m", "exporter.healthcheck"], argv
    return argv


class _Health(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/healthz" else 404)
        self.end_headers()

    def log_message(self, *args):
        pass


def _probe(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, *argv[1:]], env=env, capture_output=True, timeout=20, check=False
    )


def test_healthcheck_probes_healthz_where_the_sidecar_listens(sidecar_stages, tmp_path):
    """Run the HEALTHCHECK's own command against a stand-in /healthz: it follows the address
    serve recorded (a `--port` the environment does not know), else DSV4_SIDECAR_PORT; 0 when
    /healthz answers, non-zero when nothing listens (so the container turns unhealthy)."""
    argv = _healthcheck_argv(sidecar_stages[-1])
    listen = tmp_path / "listen.json"
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    port = server.server_address[1]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    recorded = {"DSV4_SIDECAR_LISTEN_FILE": str(listen), "DSV4_SIDECAR_PORT": "1"}
    try:
        listen.write_text(json.dumps({"host": "0.0.0.0", "port": port, "pid": 1}))
        ok = _probe(argv, recorded)
        assert ok.returncode == 0, ok.stderr
        # Not written yet (the sidecar is starting): the port setting.
        listen.unlink()
        assert _probe(argv, {**recorded, "DSV4_SIDECAR_PORT": str(port)}).returncode == 0
        assert _probe(argv, recorded).returncode != 0, "port 1: nothing listens"
    finally:
        server.shutdown()
        server.server_close()
    listen.write_text(json.dumps({"host": "0.0.0.0", "port": port, "pid": 1}))
    down = _probe(argv, recorded)
    assert down.returncode != 0 and b"unhealthy" in down.stderr


# --- the SGLang + probe image ---------------------------------------------------------------


def test_probe_image_pins_sglang_and_switches_the_probe_on():
    stages = parse(PROBE_DOCKERFILE)
    (arg,) = [a for a in instructions(stages[0], "ARG") if a.startswith("SGLANG_IMAGE=")]
    image = arg.split("=", 1)[1]
    assert re.fullmatch(r"lmsysorg/sglang:v\d+\.\d+\.\d+[\w.-]*(@sha256:[0-9a-f]{64})?", image)
    final = stages[-1]
    assert instructions(final, "FROM") == ["${SGLANG_IMAGE}"]
    env = shlex.split(" ".join(instructions(final, "ENV")))
    assert "DSV4_PROBE=1" in env and f"DSV4_PROBE_DIR={PROBE_DIR}" in env
    runs = " ".join(instructions(final, "RUN"))
    # The wheel, without re-resolving SGLang's pinned environment; the hook is verified.
    assert re.search(r"pip install [^&]*--no-deps [^&]*dsv4_sidecar-\*\.whl", runs), runs
    assert "dsv4_sidecar_probe.pth" in runs
    assert "pip wheel" in " ".join(instructions(stages[1], "RUN"))


# --- .dockerignore ---------------------------------------------------------------------------


def _dockerignore_rules() -> list[tuple[bool, re.Pattern[str]]]:
    """(exclude?, regex) per .dockerignore line, in Docker's semantics: `*` and `?` stay within
    a path segment, `**` spans segments, `!` re-includes, the last matching rule wins, and a rule
    matching a directory covers what is below it."""
    rules = []
    for raw in (REPO / ".dockerignore").read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        exclude = not line.startswith("!")
        pattern = line.lstrip("!").strip("/")
        rx = ""
        i = 0
        while i < len(pattern):
            if pattern.startswith("**/", i):
                rx, i = rx + "(?:.*/)?", i + 3
            elif pattern.startswith("**", i):
                rx, i = rx + ".*", i + 2
            elif pattern[i] == "*":
                rx, i = rx + "[^/]*", i + 1
            elif pattern[i] == "?":
                rx, i = rx + "[^/]", i + 1
            else:
                rx, i = rx + re.escape(pattern[i]), i + 1
        rules.append((exclude, re.compile(rx + r"(?:/.*)?")))
    return rules


def dockerignored(path: str, rules=None) -> bool:
    rules = rules if rules is not None else _dockerignore_rules()
    ignored = False
    for exclude, rx in rules:
        if rx.fullmatch(path):
            ignored = exclude
    return ignored


def test_dockerignore_admits_what_the_wheel_build_needs():
    rules = _dockerignore_rules()
    pyproject = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    readme = re.search(r'^readme\s*=\s*"([^"]+)"', pyproject, re.M)
    assert readme, "pyproject.toml names its readme"
    needed = [
        "pyproject.toml",
        readme.group(1),
        "exporter/__init__.py",
        "exporter/cli/__init__.py",
        "exporter/probe/dsv4_sidecar_probe.pth",
    ]
    if (REPO / "setup.py").exists():
        needed.append("setup.py")
    for path in needed:
        assert (REPO / path).exists(), path
        assert not dockerignored(path, rules), f"{path} is needed in the build context"


def test_dockerignore_keeps_everything_else_out():
    rules = _dockerignore_rules()
    for path in (
        ".venv/bin/python",
        ".git/HEAD",
        "tests/conftest.py",
        "docker/Dockerfile",
        "bench/__init__.py",
        "alerts/dsv4-sidecar.rules.yaml",
        "run/out.json",
        "exporter/__pycache__/app.cpython-312.pyc",
        "exporter/cli/x.pyc",
        "exporter/dsml/_textscan.cpython-311-x86_64-linux-gnu.so",  # built here, for this Python
        "exporter/samplers/tap/_relay.cpython-311-x86_64-linux-gnu.so",
    ):
        assert dockerignored(path, rules), f"{path} should stay out of the build context"
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=REPO, capture_output=True, text=True, timeout=30, check=True
    ).stdout.split()
    sent = {p for p in tracked if not dockerignored(p, rules)}
    # The sources, and the lock the sidecar image installs its dependencies from.
    assert "docker/requirements.lock" in sent
    tops = {p.split("/")[0] for p in sent - {"docker/requirements.lock"}}
    assert tops <= {"pyproject.toml", "setup.py", "README.md", "LICENSE", "exporter"}, tops

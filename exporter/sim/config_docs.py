"""Generate docs/simulator.md from the simulator's settings model (``make docs``);
``--check`` fails when it is stale. Same table shape as docs/configuration.md.

    python -m exporter.sim.config_docs [--check] [--out docs/simulator.md]
"""

from __future__ import annotations

from exporter import generated
from exporter.config_docs import settings_table
from exporter.sim.settings import FakeGpuSettings, SimSettings

INTRO = """\
# The simulated SGLang

Generated from `exporter/sim/settings.py` by `make docs`.

`dsv4-sidecar simulate` serves a DeepSeek-V4 deployment that is not there: SGLang's
`/server_info`, `/metrics`, `/v1/chat/completions` and `/generate` as the simulated release
answers them, from the footprint model run on the simulated deployment's ground truth
(index-K dtype, configurator pricing, budget, weights, graphs). `make demo` and the end-to-end
tests run the sidecar against it. The sidecar is told only the simulator's URL, as it would be
told a real server's.

With `engine: vllm` (`--engine vllm`) it poses as vLLM instead, the release `vllm_version`
names (any of 0.23.0-0.34.x, default the newest): `/version` reports it, vLLM's
`/v1/models`, `/metrics` with `vllm:` names (running and waiting requests, KV usage,
preemptions, which rise above 32 running, token counters, `vllm:cache_config_info` with block
size 256, GPU blocks and cache dtype), no `/server_info` and no `/generate`, and the same
simulated model's raw text handed on as that release's `deepseek_v4` tool and reasoning
parsers deliver it: the rules of each release range come from the one table the grader reads
(`exporter/dsml/vllm_releases.py`), so 0.30+ turn a block opened `<｜DSML｜toolcalls>` or
invokes without a block into calls where 0.24 hands the text on as content
(`exporter/sim/vllm.py`; held to every released parser by
`tests/dsml/test_vllm_differential.py`).

The simulator is attached from outside the sidecar: nothing in the sidecar's production code
imports it. Its GPUs reach the sidecar through the `fake` GPU backend, a plugin (entry point
group `dsv4_sidecar.gpu_backends`, see `exporter/sources/gpu_backends.py`), selected with
`gpu_backend: fake`. Only the development installs declare it (`make venv`, `make demo`:
`setup.py`); a production install (the wheel, the image) does not, and there the sidecar is
started as `python -m exporter.sim.sidecar serve ...`, which registers the backend for its own
process (as `docker/compose.yaml` does). That backend reads
`GET /_sim/gpus?node_rank=K` at most once per NVML poll: the GPU model and, per GPU, what the
pools really allocate and the running requests. So the sidecar's NVML view is the simulated
deployment's ground truth, never its own prediction of it. Until the simulator has answered
once the node reports zero GPUs (NVML source down, reason `no_gpus`); afterwards an
unreachable simulator leaves the last answer in place. The backend has settings of its own
(below), read by the plugin from `DSV4_FAKE_GPU_*` variables, not from the sidecar's
configuration: the sidecar only names the backend, and asks it to check them at start.

{endpoints}
## `dsv4-sidecar simulate`

Every key can be given in a YAML file (`--config FILE`), as a `DSV4_SIM_*` environment
variable, or as a flag.

"""


ENDPOINTS = (
    (
        "GET /_sim/gpus?node_rank=K",
        "node K's GPUs: spec and, per GPU, global rank, true pool bytes, running requests",
    ),
    (
        "GET /_sim/stats",
        "ground truth of the corruption model: tool-call requests and degenerate answers per "
        "concurrency bucket",
    ),
    (
        "POST /_sim/control",
        "faults of the SGLang endpoints (`garbage`, `http_500`, `bad_shape`, "
        "`metrics_garbage`), delay, background running requests, queue",
    ),
)


def render() -> str:
    endpoints = [
        "Simulator-only endpoints (not part of SGLang's API):",
        "",
        "| endpoint | what it does |",
        "|---|---|",
        *(f"| `{path}` | {what} |" for path, what in ENDPOINTS),
        "",
    ]
    intro = INTRO.replace("{endpoints}\n", "\n".join(endpoints) + "\n")
    fake = [
        "",
        "## The `fake` GPU backend (`gpu_backend: fake`)",
        "",
        "Environment variables only (`DSV4_FAKE_GPU_*`), read by the plugin in the sidecar's",
        "process; a bad value stops `dsv4-sidecar serve` with exit 2 naming the variable. The",
        "flag and file-key columns do not apply.",
        "",
        *settings_table(FakeGpuSettings),
    ]
    return intro + "\n".join([*settings_table(SimSettings), *fake]) + "\n"


def main(argv: list[str] | None = None) -> int:
    return generated.doc_main(
        argv, __doc__, "docs/simulator.md", "exporter.sim.config_docs", render
    )


if __name__ == "__main__":
    raise SystemExit(main())

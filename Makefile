# The README's two commands: `make demo` and `make test`. Both set up everything on a fresh machine.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PY_DIRS := exporter tests bench alerts dashboards docker
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | sha1sum | cut -c1-12)

.PHONY: gpu-bundle gpu-check gpu-check-simulated
.PHONY: help venv demo-venv native kustomize deb-test deb-bench deb-demo test test-parallel test-fast lint fmt demo bench docs alerts dashboards readme k8s mixin lock image image-probe dist deb-image clean

help:
	@echo "make demo   - run the main job on the embedded default (simulated SGLang + GPUs); its own venv, runtime deps only"
	@echo "make test   - lint, docs freshness, dist and the images, then the whole test suite"
	@echo "make test-parallel - the suite alone, as make test runs it: in parallel, then the serial tier"
	@echo "make test-fast - the fast tier (tests/conftest.py): each package's core, under a minute"
	@echo "make bench  - benchmarks under bench/, results in bench/RESULTS.md"
	@echo "make lint   - ruff and mypy (strict for exporter/footprint and exporter/dsml)"
	@echo "make native - (re)build the C modules (grader accelerator, tap relay) in place (venv does it too)"
	@echo "make docs   - regenerate generated docs (metrics, configuration, triage rules, pools)"
	@echo "make alerts - regenerate alerts/dsv4-sidecar.rules.yaml, its promtool tests, the runbooks and the knob table from exporter/thresholds.py"
	@echo "make dashboards - regenerate dashboards/*.json from dashboards/*.py"
	@echo "make k8s    - regenerate docker/k8s/generated/ (PrometheusRule, dashboard ConfigMaps)"
	@echo "make mixin  - regenerate docker/mixin/mixin.libsonnet (monitoring mixin)"
	@echo "make image  - build the sidecar image with Debian's podman (cached; docker/image.py),"
	@echo "              tagged as the Kubernetes manifests reference it"
	@echo "make image-probe - the image, and the probe image's layer on a stand-in for SGLang's"
	@echo "make dist   - the sdist and wheel in dist/, checked with twine"
	@echo "make lock   - re-resolve docker/requirements.lock (the image's Python packages; needs PyPI)"
	@echo "make gpu-bundle - (where pip works) wheels + SGLang sources a GPU machine without network needs"
	@echo "make gpu-check  - (on a CUDA machine) every GPU claim in one table: docs/gpu-validation.md"
	@echo "make gpu-check-simulated - the same command's CPU mode (CI runs it in tests/gpu)"

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	DSV4_SIDECAR_DEV_PLUGINS=1 $(PY) -m pip install -q -e '.[dev,conformance]'
	@rm -f $(VENV)/.installed-*
	@touch $@

venv: $(STAMP)

# The demo's own venv: the package and its runtime dependencies only (pyproject's
# `dependencies`), not the test toolchain of $(VENV) (torch, scipy: about 1.6 GB). What the
# demo runs (`python -m exporter`: demo, simulator, sidecar; `python -m alerts.generate` from
# this checkout for its short-window rules) imports nothing else: tests/test_demo_install.py.
# The editable install also builds the DSML accelerator in place, so its stamp follows the C
# source as `native` does for $(VENV).
DEMO_VENV  ?= .venv-demo
# The C modules: the DSML grader's accelerator and the tap's chunked-answer relay.
NATIVE_SRC := exporter/dsml/_textscan.c exporter/samplers/tap/_relay.c
DEMO_PY    := $(DEMO_VENV)/bin/python
DEMO_STAMP := $(DEMO_VENV)/.installed-$(shell cat pyproject.toml setup.py $(NATIVE_SRC) | sha1sum | cut -c1-12)

$(DEMO_STAMP): pyproject.toml setup.py $(NATIVE_SRC)
	@test -x $(DEMO_PY) || $(PYTHON) -m venv $(DEMO_VENV)
	$(DEMO_PY) -m pip install -q --upgrade pip
	DSV4_SIDECAR_DEV_PLUGINS=1 $(DEMO_PY) -m pip install -q -e .
	@rm -f $(DEMO_VENV)/.installed-*
	@touch $@

demo-venv: $(DEMO_STAMP)

# The C modules (NATIVE_SRC: the DSML grader's accelerator, the tap's relay). `pip install -e`
# builds them once; this rebuilds it in place whenever its C source changes, so the tests never run a stale one.
NATIVE := $(VENV)/.native-dsml
$(NATIVE): $(NATIVE_SRC) setup.py | $(STAMP)
	$(PY) setup.py -q build_ext --inplace
	@touch $@

native: $(NATIVE)

# kustomize for tests/deploy (the join Component in docker/k8s-join): neither Debian nor PyPI
# packages a kustomize binary; PyPI's pykustomize wheel bundles kustomize's own Go API
# (sigs.k8s.io/kustomize/api v0.21.3, krusty) as a shared library called through cffi. Its
# metadata asks for Python >= 3.14, but the code is plain 3.11 (tests/deploy renders with it):
# hence --ignore-requires-python, for this one pinned wheel only.
KUSTOMIZE := $(VENV)/.kustomize-0.1.4
$(KUSTOMIZE): | $(STAMP)
	$(PY) -m pip install -q 'cffi>=1.16'
	$(PY) -m pip install -q --no-deps --ignore-requires-python 'pykustomize==0.1.4'
	@touch $@

kustomize: $(KUSTOMIZE)

# Debian packages the tests and benchmarks use (promtool/prometheus, nginx, jsonnet, chromium for
# the triage report's rendering); installed when missing. Every test that runs one of them asks
# tests/support.py's require(): a skip locally when it is missing, a failure in CI (CI=true).
# tests/deploy validates the compose files with a compose implementation: Docker's plugin when
# present, else Debian's docker-compose (pure Python, no daemon needed for `config`).
deb-test:
	@scripts/ensure-debian-packages.sh prometheus nginx jsonnet chromium
	@docker compose version >/dev/null 2>&1 || scripts/ensure-debian-packages.sh docker-compose
# The image build and its test: Debian's podman/buildah, runc (crun refuses this machine's
# hybrid cgroups: docker/podman/containers.conf) and mmdebstrap (the base when no registry).
deb-image:
	@scripts/ensure-debian-packages.sh podman buildah runc mmdebstrap
deb-bench:
	@scripts/ensure-debian-packages.sh prometheus nginx
# The demo's Prometheus (rules and alerts on its screen and in its URLs).
deb-demo:
	@scripts/ensure-debian-packages.sh prometheus

lint: venv
	$(VENV)/bin/ruff check $(PY_DIRS)
	$(VENV)/bin/ruff format --check $(PY_DIRS)
	$(VENV)/bin/mypy

fmt: venv
	$(VENV)/bin/ruff format $(PY_DIRS)
	$(VENV)/bin/ruff check --fix $(PY_DIRS)

# Every generator has one shape (exporter/generated.py): no argument writes its files,
# --check writes nothing and exits 1 naming the stale ones (2: it could not render).
GENERATORS := exporter.metrics.docgen exporter.config_docs exporter.sim.config_docs \
              exporter.oncall.triage.rules_doc exporter.footprint_docs \
              alerts.generate dashboards.generate dashboards.readme

docs: venv
	$(PY) -m exporter.metrics.docgen
	$(PY) -m exporter.config_docs
	$(PY) -m exporter.sim.config_docs
	$(PY) -m exporter.oncall.triage.rules_doc
	$(PY) -m exporter.footprint_docs

# Generated observability artefacts; tests/obs fails when the committed output is stale.
alerts: venv
	$(PY) -m alerts.generate

dashboards: venv
	$(PY) -m dashboards.generate

# README.md's demo paragraph from docs/img/demo-run.json, the record of the demo run that drew
# docs/img/*.png (`python -m dashboards.render_png` re-runs the demo and rewrites all three).
readme: venv
	$(PY) -m dashboards.readme

# Kubernetes objects wrapping alerts/*.yaml and dashboards/*.json; run after `make alerts` or
# `make dashboards`. tests/deploy fails when the committed output is stale.
k8s: venv
	$(PY) docker/k8s/generate.py

# The monitoring mixin (docker/mixin/mixin.libsonnet) from alerts/ and dashboards/; run after
# `make alerts` or `make dashboards`. tests/deploy evaluates it with Debian's jsonnet.
mixin: venv
	$(PY) docker/mixin/generate.py

# The sidecar image's exact Python packages (pip-compile, hashed), from pyproject.toml's
# runtime dependencies and build backend; `make test` checks it still fits them (offline).
lock: venv
	$(PY) docker/lock.py

image: venv deb-image
	$(PY) docker/image.py

image-probe: venv deb-image
	$(PY) docker/image.py --probe

# The release artefacts: the sdist, then from it (so the sdist is known to build) a pure-Python
# wheel: DSV4_SIDECAR_NO_NATIVE leaves the DSML accelerator out (setup.py), so the wheel is
# py3-none-any and installs on any Python >= 3.10 and platform (an index refuses a bare
# linux_x86_64 wheel); pip builds the accelerator from the sdist where asked to
# (--no-binary dsv4-sidecar) and the image builds its own. Both checked by twine (metadata,
# README rendering); tests/deploy/test_release.py installs the wheel into a clean venv.
# The sdist build writes dsv4_sidecar.egg-info into the checkout, without the development
# install's GPU plugin (setup.py); the tests' sys.path (pythonpath ".") would find it before
# the dev venv's own metadata, so it goes again.
dist: venv
	rm -rf dist
	$(PY) -m build --sdist --outdir dist .
	rm -rf dsv4_sidecar.egg-info
	DSV4_SIDECAR_NO_NATIVE=1 $(PY) -m pip wheel -q --no-deps --wheel-dir dist dist/dsv4_sidecar-*.tar.gz
	$(VENV)/bin/twine check --strict dist/*

# The heavy builds (the image: minutes, cold, on a loaded machine; the wheel) are steps here,
# before pytest, not fixtures under its per-test timeout; the tests use what they made.
test: venv native kustomize deb-test lint dist image-probe
	$(foreach g,$(GENERATORS),$(PY) -m $(g) --check &&) $(PY) docker/k8s/generate.py --check
	$(PY) docker/mixin/generate.py --check
	$(PY) docker/lock.py --check
	$(MAKE) --no-print-directory test-parallel

# The suite as `make test` runs it (tests/conftest.py, the serial tier): all but the serial tier
# across PYTEST_WORKERS pytest-xdist workers (one per CPU, at most 4: each worker may hold a
# released SGLang or vLLM with torch in memory, and the longest module, the release conformance,
# bounds the wall time beyond that), whole modules to a worker, then the serial tier alone.
# Both passes always run; either failing fails the target.
PYTEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); [ $$n -gt 4 ] && n=4; echo $$n)
test-parallel: venv native kustomize
	@$(PY) -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile -m "not serial"; a=$$?; \
	$(PY) -m pytest -q -m serial; b=$$?; \
	test $$a -eq 0 && test $$b -eq 0

# The fast tier (tests/conftest.py): each package's core in one process, no server, no
# release, no image; under a minute on two CPUs. Lint and the generators' --check are
# `make test`'s, with the rest of the suite.
test-fast: venv native
	$(PY) -m pytest -q -p no:cacheprovider -m fast

demo: demo-venv deb-demo
	$(DEMO_VENV)/bin/dsv4-sidecar demo

bench: venv native deb-bench
	$(PY) -m bench

# Every GPU claim checked in one call (docs/gpu-validation.md). `make gpu-bundle` runs where pip
# works and fills .gpu-bundle/ (ignored by git); carry it to the GPU machine, where
# `make gpu-check` unpacks it (no network needed) and prints the table, JSON in $$OUT or
# GPU_CHECK_JSON. The CPU mode runs in `make test` (tests/gpu/test_gpu_check.py).
gpu-bundle: venv
	$(PY) -m tests.gpu.bundle

gpu-check:
	tests/gpu/run-on-gpu.sh $(if $(GPU_CHECK_JSON),--json $(GPU_CHECK_JSON)) $(GPU_CHECK_ARGS)

gpu-check-simulated: venv
	$(PY) -m tests.gpu.check --simulated

clean:
	rm -rf $(VENV) $(DEMO_VENV) build dist *.egg-info .pytest_cache .ruff_cache exporter/dsml/_textscan*.so exporter/samplers/tap/_relay*.so

#!/usr/bin/env bash
# `make gpu-check` on a GPU machine with no network: unpack what `make gpu-bundle` put in
# .gpu-bundle/ (runtime wheels, released SGLang sources), then run every GPU check
# (tests/gpu/check.py). Arguments go to check.py (e.g. --releases 0.5.23, --json PATH).
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
SITE=${DSV4_GPU_SITE:-/tmp/dsv4-gpu-site}
export DSV4_SIDECAR_CACHE=${DSV4_SIDECAR_CACHE:-/tmp/dsv4-gpu-cache}
export PYTHONUNBUFFERED=1
if [ -d .gpu-bundle ]; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$SITE" .gpu-bundle/wheels/*.whl
  export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
  for archive in .gpu-bundle/sglang-*.tar.xz; do
    version=$(basename "$archive" .tar.xz)
    version=${version#sglang-}
    dest="$DSV4_SIDECAR_CACHE/sglang/$version"
    if [ ! -e "$dest/.complete" ]; then
      mkdir -p "$dest"
      tar -C "$dest" -xJf "$archive"
      echo "$(basename "$archive")" >"$dest/.complete"
    fi
  done
else
  echo "no .gpu-bundle/: using what this machine has (make gpu-bundle builds it where pip works)" >&2
fi
exec "$PY" -m tests.gpu.check "$@"

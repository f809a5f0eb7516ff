"""Build the sidecar image (and, with --probe, the probe image's layer) with Debian's podman.

    python docker/image.py              # `make image`: ghcr.io/dsv4-sidecar/dsv4-sidecar:<version>
                                        #   (what docker/k8s* reference), localhost/dsv4-sidecar:dev
    python docker/image.py --check      # exit 1 unless those images are this tree's (no build)
    python docker/image.py --probe      # also docker/Dockerfile.sglang-probe on a stand-in
    python docker/image.py --base debian|upstream|auto   (default auto; env DSV4_IMAGE_BASE)

Everything podman needs is in this repository (docker/podman/*.conf, passed through
CONTAINERS_CONF, CONTAINERS_STORAGE_CONF and CONTAINERS_REGISTRIES_CONF): vfs storage under a
root of its own, cgroupfs, events to a file, no registry search list. Nothing on the machine is
configured.

The base: the upstream image the Dockerfile pins (BASE_IMAGE's default, tag@digest) when it is
present or can be pulled; otherwise (no container registry, as on the project's machines) a
Debian bookworm root filesystem made by mmdebstrap from Debian's packages (python3 and
python3-venv) and imported with `podman import`.

The Python packages: docker/requirements.lock, hash-checked twice. They are downloaded on this
machine (pip, its own index configuration) into build/wheelhouse and served to the build from a
loopback PEP 503 index (PIP_INDEX_URL build argument, --network host), so the build needs no
index of its own and no certificate of this machine's network.

Cached: the image carries a label with the digest of its inputs (the Dockerfile, the lock, the
build context .dockerignore admits, the base image's id); a build whose inputs did not change
is skipped. The version (exporter/__init__.py, the one place it is set) is in those inputs; the
git revision is not (a commit that changes nothing the image holds reuses it) and is stamped
onto the reused image's labels instead, so org.opencontainers.image.revision always names the
tree `make image` last ran on.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import hashlib
import html
import http.server
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOCKER = REPO / "docker"
BUILD = REPO / "build"
# The local name (compose's `dsv4-sidecar:dev`, the tests) and the registry repository the
# Kubernetes manifests reference, tagged with the package version (release_image()).
IMAGE = "localhost/dsv4-sidecar:dev"
REGISTRY_REPOSITORY = "ghcr.io/dsv4-sidecar/dsv4-sidecar"
PROBE_IMAGE = "localhost/sglang-dsv4-probe:dev"
INPUTS_LABEL = "io.dsv4-sidecar.inputs"
VERSION_LABEL = "org.opencontainers.image.version"
REVISION_LABEL = "org.opencontainers.image.revision"
BASE_LABEL = "org.opencontainers.image.base.name"
# The Debian bases: packages and mirrors (bookworm, its updates and security fixes).
SUITE = "bookworm"
MIRRORS = (
    "deb http://deb.debian.org/debian bookworm main",
    "deb http://deb.debian.org/debian bookworm-updates main",
    "deb http://deb.debian.org/debian-security bookworm-security main",
)
BASE_PACKAGES = ("python3", "python3-venv")
# The probe image's stand-in for SGLang's image: its system python3 with pip (externally
# managed, as on SGLang's Ubuntu base, which the probe Dockerfile's PIP_BREAK_SYSTEM_PACKAGES
# is for).
STANDIN_PACKAGES = (*BASE_PACKAGES, "python3-pip")
STANDIN_NAME = "dsv4-sidecar-sglang-standin"
# Documentation, manual pages and translations stay out of the bases (copyright files stay).
DPKG_OPTS = (
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/info/*",
    "path-exclude=/usr/share/locale/*",
)
SIDECAR_CONTEXT_TOP = ("pyproject.toml", "setup.py", "README.md", "LICENSE")


def version() -> str:
    """``exporter.__version__``, read from the source (not imported: this script may run under a
    Python whose installed ``exporter`` is another tree's, and the image is built from this one)."""
    tree = ast.parse((REPO / "exporter" / "__init__.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__version__" for t in node.targets
        ):
            value = ast.literal_eval(node.value)
            if isinstance(value, str):
                return value
    raise RuntimeError("exporter/__init__.py sets no __version__ string")


def release_image() -> str:
    """The reference the Kubernetes manifests pull: the registry repository at the version."""
    return f"{REGISTRY_REPOSITORY}:{version()}"


class ImageError(RuntimeError):
    pass


def podman_env() -> dict[str, str]:
    env = dict(os.environ)
    env["CONTAINERS_CONF"] = str(DOCKER / "podman" / "containers.conf")
    env["CONTAINERS_STORAGE_CONF"] = str(DOCKER / "podman" / "storage.conf")
    env["CONTAINERS_REGISTRIES_CONF"] = str(DOCKER / "podman" / "registries.conf")
    return env


def podman(
    *args: str, check: bool = True, timeout: float = 900
) -> subprocess.CompletedProcess[str]:
    res = subprocess.run(
        ["podman", *args],
        env=podman_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if check and res.returncode != 0:
        raise ImageError(f"podman {' '.join(args[:3])}...: {res.stderr.strip()[-2000:]}")
    return res


# RLIMIT_NPROC podman 4.3 leaves its conmon when it cannot raise its own (measured here: conmon
# runs with 32768:32768 whatever the caller has); a container cannot be given more than that.
CONMON_NPROC = 32768


def limits() -> list[str]:
    """--ulimit flags within this process's own limits (see docker/podman/containers.conf)."""
    out = []
    for name, which, cap in (
        ("nofile", resource.RLIMIT_NOFILE, None),
        ("nproc", resource.RLIMIT_NPROC, CONMON_NPROC),
    ):
        _, hard = resource.getrlimit(which)
        if hard == resource.RLIM_INFINITY:
            hard = cap or 1 << 20
        value = min(hard, cap) if cap else hard
        out += ["--ulimit", f"{name}={value}:{value}"]
    return out


def log(msg: str) -> None:
    print(f"image: {msg}", file=sys.stderr, flush=True)


def exists(image: str) -> bool:
    return podman("image", "exists", image, check=False).returncode == 0


def image_id(image: str) -> str:
    return podman("image", "inspect", "--format", "{{.Id}}", image).stdout.strip()


def label(image: str, key: str) -> str | None:
    if not exists(image):
        return None
    out = podman("image", "inspect", "--format", "{{json .Labels}}", image).stdout
    return (json.loads(out) or {}).get(key)


def upstream_base() -> str:
    """BASE_IMAGE's default in docker/Dockerfile."""
    text = (DOCKER / "Dockerfile").read_text(encoding="utf-8")
    m = re.search(r"^ARG BASE_IMAGE=(\S+)$", text, re.M)
    if not m:
        raise ImageError("docker/Dockerfile declares no ARG BASE_IMAGE=<default>")
    return m.group(1)


def debian_base_tag(packages: Sequence[str], name: str) -> str:
    """The tag of a Debian base: its name and the digest of the recipe that makes it."""
    recipe = json.dumps([SUITE, MIRRORS, sorted(packages), DPKG_OPTS])
    return f"localhost/{name}:{SUITE}-{hashlib.sha256(recipe.encode()).hexdigest()[:12]}"


def debian_base(packages: Sequence[str], name: str) -> str:
    """A Debian root filesystem by mmdebstrap, imported; tagged by what made it."""
    tag = debian_base_tag(packages, name)
    if exists(tag):
        return tag
    if not shutil.which("mmdebstrap"):
        raise ImageError("mmdebstrap is missing (scripts/ensure-debian-packages.sh mmdebstrap)")
    BUILD.mkdir(exist_ok=True)
    tar = BUILD / f"{name}-rootfs.tar"
    log(f"making {tag} with mmdebstrap ({', '.join(packages)})")
    cmd = ["mmdebstrap", "--variant=minbase", "--mode=root", "--format=tar", "--quiet"]
    cmd += [f"--include={','.join(packages)}"]
    cmd += [f"--dpkgopt={o}" for o in DPKG_OPTS]
    cmd += ['--aptopt=Acquire::Languages "none"']
    subprocess.run([*cmd, SUITE, str(tar), *MIRRORS], check=True, timeout=900)
    try:
        podman("import", "--change", 'CMD ["python3"]', str(tar), tag)
    finally:
        tar.unlink(missing_ok=True)
    return tag


def choose_base(mode: str) -> str:
    upstream = upstream_base()
    if mode in ("auto", "upstream"):
        if exists(upstream):
            return upstream
        pulled = podman("pull", "--quiet", upstream, check=False, timeout=300)
        if pulled.returncode == 0:
            return upstream
        if mode == "upstream":
            raise ImageError(f"cannot pull {upstream}: {pulled.stderr.strip()}")
        reason = pulled.stderr.strip().splitlines()[-1:] or ["?"]
        log(f"{upstream} cannot be pulled ({reason[0][:200]}); using a Debian base")
    return debian_base(BASE_PACKAGES, "dsv4-sidecar-base")


def _context_files() -> list[Path]:
    """The build context .dockerignore admits (the allow-list of docker/Dockerfile)."""
    files = [REPO / n for n in SIDECAR_CONTEXT_TOP if (REPO / n).is_file()]
    files.append(DOCKER / "requirements.lock")
    files += [
        p
        for p in (REPO / "exporter").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".pyc", ".pyo", ".so")
    ]
    return sorted(files)


def inputs_digest(dockerfile: Path, base_id: str, build_args: dict[str, str]) -> str:
    h = hashlib.sha256()
    h.update(f"base {base_id}\n".encode())
    for key in sorted(build_args):
        if key != "PIP_INDEX_URL":  # where the locked files come from, not what they are
            h.update(f"arg {key}={build_args[key]}\n".encode())
    for path in [dockerfile, REPO / ".dockerignore", *_context_files()]:
        h.update(f"file {path.relative_to(REPO)}\n".encode())
        h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()


# --- the wheelhouse ------------------------------------------------------------------------


def python_tags(base: str) -> tuple[str, str]:
    """(X.Y, glibc X.Y) of the base image's python3."""
    code = "import platform, sys; print('%d.%d' % sys.version_info[:2], platform.libc_ver()[1])"
    res = podman("run", "--rm", *limits(), "--network", "none", base, "python3", "-c", code)
    out = res.stdout.split()
    return out[0], out[1]


def wheelhouse(py: str, glibc: str) -> Path:
    """The lock's wheels for this Python and platform, downloaded (hash-checked) once."""
    lock = DOCKER / "requirements.lock"
    key = hashlib.sha256(lock.read_bytes()).hexdigest()[:12]
    house = BUILD / "wheelhouse" / f"cp{py.replace('.', '')}-{key}"
    done = house / ".complete"
    if done.exists():
        return house
    major, minor = (int(x) for x in glibc.split(".")[:2])
    platforms = ["manylinux2014_x86_64", "linux_x86_64"]
    platforms += [f"manylinux_{major}_{m}_x86_64" for m in range(5, minor + 1)]
    abi = f"cp{py.replace('.', '')}"
    log(f"downloading the lock's wheels for {abi} into {house.relative_to(REPO)}")
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--require-hashes"]
    cmd += ["--only-binary", ":all:", "--python-version", py, "--implementation", "cp"]
    cmd += ["--abi", abi, "--abi", "abi3", "--abi", "none"]
    cmd += [a for p in platforms for a in ("--platform", p)]
    cmd += ["--dest", str(house), "-r", str(lock)]
    # The index only: no machine-wide find-links, extra indexes or constraints (the hashes
    # would refuse their files anyway); how the index is reached (PIP_CERT etc.) stays.
    env = {k: v for k, v in os.environ.items() if k not in ("PIP_FIND_LINKS", "PIP_CONSTRAINT")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_INDEX_URL="https://pypi.org/simple")
    subprocess.run(cmd, check=True, timeout=900, env=env)
    done.touch()
    return house


def _index_pages(house: Path) -> dict[str, bytes]:
    """PEP 503 pages for the wheels in ``house``: {url path: body}."""
    projects: dict[str, list[Path]] = {}
    for whl in sorted(house.glob("*.whl")):
        name = re.sub(r"[-_.]+", "-", whl.name.split("-")[0]).lower()
        projects.setdefault(name, []).append(whl)
    pages = {
        "/simple/": "".join(f'<a href="{n}/">{n}</a>\n' for n in projects).encode(),
    }
    for name, wheels in projects.items():
        links = ""
        for whl in wheels:
            digest = hashlib.sha256(whl.read_bytes()).hexdigest()
            links += f'<a href="/files/{html.escape(whl.name)}#sha256={digest}">{whl.name}</a>\n'
        pages[f"/simple/{name}/"] = links.encode()
    return pages


@contextlib.contextmanager
def serve_index(house: Path) -> Iterator[str]:
    """A loopback PEP 503 index of ``house``; yields its URL."""
    pages = _index_pages(house)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("#")[0]
            if path in pages:
                body, ctype = pages[path], "text/html"
            elif (
                path.startswith("/files/") and (house / path[7:]).is_file() and "/" not in path[7:]
            ):
                body, ctype = (house / path[7:]).read_bytes(), "application/octet-stream"
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/simple/"
    finally:
        server.shutdown()
        server.server_close()


# --- builds ----------------------------------------------------------------------------------


def inputs_of(dockerfile: Path, build_args: dict[str, str]) -> str:
    """The inputs digest of a build of ``dockerfile`` with ``build_args``, bases by image id."""
    base_id = image_id(build_args.get("BASE_IMAGE") or build_args["SGLANG_IMAGE"])
    if "SGLANG_IMAGE" in build_args:
        base_id += image_id(build_args["WHEEL_BASE_IMAGE"])
    return inputs_digest(dockerfile, base_id, build_args)


def stamp_revision(tag: str, rev: str) -> None:
    """Set ``tag``'s revision label without rebuilding it. podman cannot edit a label, so this
    builds an image of nothing but ``FROM`` it and a LABEL: the same layers under a new config
    (a LABEL adds no layer), the HEALTHCHECK and every other label inherited."""
    context = BUILD / "revision-stamp"  # empty but for the Containerfile: nothing to send
    context.mkdir(parents=True, exist_ok=True)
    containerfile = context / "Containerfile"
    containerfile.write_text(f'FROM {image_id(tag)}\nLABEL {REVISION_LABEL}="{rev}"\n')
    args = ["build", "--format", "docker", "--pull=never", "--network", "none", *limits()]
    podman(*args, "--file", str(containerfile), "--tag", tag, str(context))


def build(
    dockerfile: Path, tags: Sequence[str], build_args: dict[str, str], index_house: Path, rev: str
) -> tuple[bool, float]:
    """Build ``tags`` unless the first one's inputs label matches; (built?, seconds). ``rev``,
    the revision label, is not an input: an image of the same inputs is re-stamped, not rebuilt."""
    tag = tags[0]
    digest = inputs_of(dockerfile, build_args)
    if label(tag, INPUTS_LABEL) == digest:
        log(f"{tag}: inputs unchanged, not rebuilt")
        if label(tag, REVISION_LABEL) != rev:
            log(f"{tag}: revision label set to {rev}")
            stamp_revision(tag, rev)
        for other in tags[1:]:
            podman("tag", tag, other)
        return False, 0.0
    start = time.monotonic()
    with serve_index(index_house) as index:
        args = ["build", "--format", "docker", "--network", "host", "--pull=never", *limits()]
        args += ["--file", str(dockerfile), "--label", f"{INPUTS_LABEL}={digest}"]
        args += [a for t in tags for a in ("--tag", t)]
        for key, value in {**build_args, "REVISION": rev, "PIP_INDEX_URL": index}.items():
            args += ["--build-arg", f"{key}={value}"]
        log(f"building {', '.join(tags)} from {dockerfile.relative_to(REPO)}")
        res = podman(*args, str(REPO), check=False, timeout=1800)
        if res.returncode != 0:
            log(res.stdout[-3000:])
    if res.returncode != 0:
        raise ImageError(f"build of {tag} failed:\n{res.stdout[-4000:]}\n{res.stderr[-4000:]}")
    return True, time.monotonic() - start


# What the image holds (the build context .dockerignore admits) and how it is built: a change to
# any of these, uncommitted or untracked, makes the revision "<HEAD>-dirty".
REVISION_PATHS = (
    *SIDECAR_CONTEXT_TOP,
    "exporter",
    "docker/requirements.lock",
    "docker/Dockerfile",
    "docker/Dockerfile.sglang-probe",
    ".dockerignore",
)


def revision() -> str:
    """The git revision the image is built from (org.opencontainers.image.revision): HEAD's full
    hash, suffixed ``-dirty`` when what the image holds differs from HEAD, so a label never names
    a commit whose tree is not what the image carries; ``unknown`` outside a git checkout."""
    git = ["git", "-C", str(REPO)]
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=False)
    if head.returncode != 0 or not head.stdout.strip():
        return "unknown"
    status = subprocess.run(
        [*git, "status", "--porcelain", "--", *REVISION_PATHS],
        capture_output=True,
        text=True,
        check=False,
    )
    dirty = status.returncode != 0 or bool(status.stdout.strip())
    return head.stdout.strip() + ("-dirty" if dirty else "")


def sidecar_args(base: str) -> dict[str, str]:
    return {"BASE_IMAGE": base, "VERSION": version()}


def probe_args(standin: str, base: str) -> dict[str, str]:
    return {"SGLANG_IMAGE": standin, "WHEEL_BASE_IMAGE": base, "VERSION": version()}


def build_all(base_mode: str = "auto", probe: bool = False) -> dict[str, object]:
    if not shutil.which("podman"):
        raise ImageError("podman is missing (scripts/ensure-debian-packages.sh podman buildah)")
    base = choose_base(base_mode)
    py, glibc = python_tags(base)
    house = wheelhouse(py, glibc)
    rev = revision()
    tags = (IMAGE, release_image())
    built, seconds = build(DOCKER / "Dockerfile", tags, sidecar_args(base), house, rev)
    out: dict[str, object] = {"image": IMAGE, "tags": list(tags), "revision": rev}
    out.update(base=base, built=built, seconds=seconds)
    out["size"] = int(podman("image", "inspect", "--format", "{{.Size}}", IMAGE).stdout.strip())
    if probe:
        standin = debian_base(STANDIN_PACKAGES, STANDIN_NAME)
        sp, sg = python_tags(standin)
        pbuilt, pseconds = build(
            DOCKER / "Dockerfile.sglang-probe",
            (PROBE_IMAGE,),
            probe_args(standin, base),
            wheelhouse(sp, sg),
            rev,
        )
        out.update(probe_image=PROBE_IMAGE, probe_base=standin, probe_built=pbuilt)
        out["probe_seconds"] = pseconds
    return out


def stale(probe: bool = False) -> list[str]:
    """Why the images `make image` builds are not this tree's, one line each (empty: they are):
    missing, built from other inputs, another revision, or the registry tag on another image.
    Builds nothing; the image tests run on what `make image` made, and ask this first."""
    if not shutil.which("podman"):
        return ["podman is missing (scripts/ensure-debian-packages.sh podman buildah)"]
    rebuild = "run `make image`"
    if not exists(IMAGE):
        return [f"{IMAGE} does not exist ({rebuild})"]
    base = label(IMAGE, BASE_LABEL) or ""
    if not exists(base):
        return [f"{IMAGE}'s base {base or '(no label)'} does not exist ({rebuild})"]
    out = []
    rev = revision()
    images = [(IMAGE, DOCKER / "Dockerfile", sidecar_args(base))]
    if probe:
        standin = debian_base_tag(STANDIN_PACKAGES, STANDIN_NAME)
        if not (exists(PROBE_IMAGE) and exists(standin)):
            return [f"{PROBE_IMAGE} or its base {standin} does not exist (`make image-probe`)"]
        images.append((PROBE_IMAGE, DOCKER / "Dockerfile.sglang-probe", probe_args(standin, base)))
    for tag, dockerfile, args in images:
        if label(tag, INPUTS_LABEL) != inputs_of(dockerfile, args):
            out.append(f"{tag} was built from other inputs than this tree's ({rebuild})")
        elif label(tag, REVISION_LABEL) != rev:
            out.append(f"{tag} is labelled revision {label(tag, REVISION_LABEL)}, not {rev}")
    release = release_image()
    if not exists(release) or image_id(release) != image_id(IMAGE):
        out.append(f"{release} is not the image {IMAGE} names ({rebuild})")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--base",
        choices=("auto", "debian", "upstream"),
        default=os.environ.get("DSV4_IMAGE_BASE", "auto"),
    )
    ap.add_argument("--probe", action="store_true", help="also build the probe image's layer")
    ap.add_argument(
        "--check",
        action="store_true",
        help="build nothing; exit 1 naming each image that is missing or not this tree's",
    )
    args = ap.parse_args(argv)
    if args.check:
        problems = stale(args.probe)
        for line in problems:
            print(f"image: {line}", file=sys.stderr)
        return 1 if problems else 0
    try:
        result = build_all(args.base, args.probe)
    except (ImageError, subprocess.CalledProcessError) as exc:
        print(f"image: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

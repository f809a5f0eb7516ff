"""yamllint (strict: warnings fail) over every deployment YAML file, with the committed
.yamllint.yaml."""

from __future__ import annotations

from tests.deploy.conftest import DOCKER, REPO, run, venv_tool


def test_yamllint_is_clean():
    # Relative paths: the config's `ignore` patterns are matched against them.
    targets = ["docker", ".yamllint.yaml", ".hadolint.yaml"]
    res = run(
        [
            venv_tool("yamllint"),
            "--strict",
            "-f",
            "parsable",
            "-c",
            str(REPO / ".yamllint.yaml"),
            *map(str, targets),
        ],
        cwd=REPO,
    )
    assert res.returncode == 0, res.stdout + res.stderr


def test_yamllint_covers_every_yaml_file_under_docker():
    """yamllint reads *.yaml, *.yml and .yamllint by default: nothing under docker/ escapes."""
    files = [p for p in DOCKER.rglob("*") if p.is_file() and p.suffix in (".yaml", ".yml")]
    assert len(files) >= 12
    res = run(
        [venv_tool("yamllint"), "--list-files", "-c", str(REPO / ".yamllint.yaml"), str(DOCKER)],
        cwd=REPO,
    )
    assert res.returncode == 0, res.stderr
    listed = {(REPO / line).resolve() for line in res.stdout.split()}
    assert {f.resolve() for f in files} <= listed

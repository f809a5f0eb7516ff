"""Configuration: precedence, and errors that name the key and the fix."""

from __future__ import annotations

import pytest

from exporter.cli import main
from exporter.config import SidecarSettings
from exporter.config_loader import ConfigError, load_settings
from exporter.sim.settings import SimSettings


def test_precedence_flag_over_env_over_file(tmp_path, monkeypatch):
    f = tmp_path / "c.yaml"
    f.write_text("port: 9500\nsglang_url: http://file:1\nnvml_poll_interval: 7\n")
    monkeypatch.setenv("DSV4_SIDECAR_SGLANG_URL", "http://env:2")
    monkeypatch.setenv("DSV4_SIDECAR_PORT", "9600")
    s = load_settings({"port": "9700"}, f)
    assert s.port == 9700  # flag
    assert s.sglang_url == "http://env:2"  # env over file
    assert s.nvml_poll_interval == 7  # file over default


def test_server_url_and_its_former_name_sglang_url(tmp_path, monkeypatch, caplog):
    """One server URL setting for every engine; sglang_url, its former name, still works as a
    file key, a flag, a constructor keyword and an environment variable, below the new one."""
    f = tmp_path / "c.yaml"
    f.write_text("sglang_url: http://file:1\n")
    assert load_settings(None, f).server_url == "http://file:1"
    assert load_settings({"sglang_url": "http://flag:1"}, f).server_url == "http://flag:1"
    assert SidecarSettings(sglang_url="http://kw:1").server_url == "http://kw:1"
    monkeypatch.setenv("DSV4_SIDECAR_SGLANG_URL", "http://old-env:2")
    with caplog.at_level("WARNING"):
        s = load_settings(None, f)
    assert s.server_url == "http://old-env:2" == s.sglang_url  # env over file
    assert "unknown environment variable" not in caplog.text
    monkeypatch.setenv("DSV4_SIDECAR_SERVER_URL", "http://new-env:3")
    assert load_settings(None, f).server_url == "http://new-env:3"  # the current name wins
    assert load_settings({"server_url": "http://flag:4"}).server_url == "http://flag:4"
    # the flag's former spelling parses to the same setting
    import argparse

    from exporter.config_loader import add_settings_arguments

    parser = argparse.ArgumentParser()
    add_settings_arguments(parser, SidecarSettings)
    assert parser.parse_args(["--sglang-url", "http://x:1"]).server_url == "http://x:1"


def test_bad_env_value_names_key_origin_and_fix(monkeypatch):
    monkeypatch.setenv("DSV4_SIDECAR_NVML_TIMEOUT", "soon")
    with pytest.raises(ConfigError) as e:
        load_settings()
    msg = str(e.value)
    assert "nvml_timeout" in msg and "DSV4_SIDECAR_NVML_TIMEOUT" in msg and "fix:" in msg


def test_unknown_file_key_lists_known_keys(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("sglang_uri: http://x\n")
    with pytest.raises(ConfigError, match=r"unknown key 'sglang_uri'.*server_url"):
        load_settings(None, f)


@pytest.mark.parametrize(("content", "match"), [("[1, 2]", "mapping"), ("a: [", "not valid YAML")])
def test_bad_file(tmp_path, content, match):
    f = tmp_path / "c.yaml"
    f.write_text(content)
    with pytest.raises(ConfigError, match=match):
        load_settings(None, f)


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_settings(None, tmp_path / "absent.yaml")


def test_url_and_rank_map_validation():
    with pytest.raises(ConfigError, match=r"server_url.*http://"):
        load_settings({"sglang_url": "localhost:30000"})
    assert load_settings({"rank_map": "3,2"}).rank_map == [3, 2]


def test_sim_settings_env(monkeypatch):
    monkeypatch.setenv("DSV4_SIM_INDEX_K_DTYPE", "fp4")
    assert load_settings({}, None, SimSettings).index_k_dtype == "fp4"


def test_cli_reports_config_errors_exit_2(capsys):
    assert main(["serve", "--port", "-1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dsv4-sidecar serve: error: config error: port") and "flag --port" in err


def test_every_setting_has_flag_env_and_description(capsys):
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    out = capsys.readouterr().out
    for key, field in SidecarSettings.model_fields.items():
        assert "--" + key.replace("_", "-") in out
        assert "DSV4_SIDECAR_" + key.upper() in out.replace("\n", "").replace(" ", "")
        assert field.description

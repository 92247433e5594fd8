"""Configuration: layering, and errors that name the field, the value and what is allowed."""

import pytest

from soak.run.config import ConfigError
from soak.run.config_load import load_config

BASE = {"endpoints": ["http://127.0.0.1:8000"], "model": "tiny"}


def test_precedence_cli_over_env_over_toml(tmp_path):
    toml = tmp_path / "c.toml"
    toml.write_text('[run]\nconcurrency = 4\nmax_tokens = 10\nlabel = "fromfile"\n')
    env = {"SOAKTOP_CONCURRENCY": "8", "SOAKTOP_MAX_TOKENS": "20"}
    cfg = load_config({"concurrency": 16}, toml_path=toml, environ=env, base=BASE)
    assert (cfg.concurrency, cfg.max_tokens, cfg.label) == (16, 20, "fromfile")


def test_negative_concurrency_names_field_and_value():
    with pytest.raises(ConfigError) as e:
        load_config({"concurrency": -3}, environ={}, base=BASE)
    assert "concurrency = -3" in str(e.value) and "greater than or equal to 1" in str(e.value)


def test_unknown_toml_key_is_named_with_allowed_keys(tmp_path):
    toml = tmp_path / "c.toml"
    toml.write_text("concurency = 4\n")
    with pytest.raises(ConfigError) as e:
        load_config({}, toml_path=toml, environ={}, base=BASE)
    assert "unknown key 'concurency'" in str(e.value) and "concurrency" in str(e.value)


def test_malformed_toml(tmp_path):
    toml = tmp_path / "c.toml"
    toml.write_text("concurrency = = 4\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config({}, toml_path=toml, environ={}, base=BASE)


def test_missing_prompt_file_and_bad_url(tmp_path):
    with pytest.raises(ConfigError, match=r"prompts file .*does not exist"):
        load_config({"prompts": tmp_path / "nope.json"}, environ={}, base=BASE)
    with pytest.raises(
        ConfigError, match=r"endpoints = \['localhost:8000'\].*not an http\(s\) URL"
    ):
        load_config({"endpoints": ["localhost:8000"]}, environ={}, base=BASE)


def test_endpoint_v1_suffix_is_normalised_and_redaction_hides_it():
    cfg = load_config({"endpoints": ["http://h:1/v1/"], "redact": True}, environ={}, base=BASE)
    assert cfg.endpoints == ["http://h:1"]
    assert "h:1" not in str(cfg.public_dict())


def test_credentials_in_a_url_are_refused_without_echoing_them():
    with pytest.raises(ConfigError) as e:
        load_config({"endpoints": ["http://user:hunter2@h:1"]}, environ={}, base=BASE)
    assert "--api-key-env" in str(e.value) and "hunter2" not in str(e.value)


def test_a_request_count_alone_is_not_cut_by_the_default_duration():
    assert load_config({"max_requests": 10_000}, environ={}, base=BASE).duration_s is None
    both = load_config({"max_requests": 10, "duration_s": 5}, environ={}, base=BASE)
    assert both.duration_s == 5


def test_telemetry_flags_parse_and_bad_values_name_the_field():
    import os
    import subprocess
    import sys

    from soak.cli.parser import build_parser, cli_values

    ns = build_parser().parse_args(
        [
            "run",
            "--endpoint",
            "http://127.0.0.1:8000",
            "--model",
            "m",
            "--ignore-xid",
            "45,31",
            "--ignore-xid",
            "13",
            "--server-pid",
            str(os.getpid()),
            "--reconcile",
            "strict",
            "--telemetry-interval",
            "2",
        ]
    )
    cfg = load_config(cli_values(ns), environ={})
    assert cfg.ignore_xid == [45, 31, 13] and cfg.server_pid == [os.getpid()]
    assert cfg.reconcile == "strict" and cfg.telemetry_interval_s == 2.0
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    with pytest.raises(ConfigError) as e:
        load_config({"server_pid": [gone.pid]}, environ={}, base=BASE)
    assert f"server_pid = [{gone.pid}]" in str(e.value)
    assert "no such process on this host" in str(e.value)
    with pytest.raises(ConfigError) as e:
        load_config({"reconcile": "loose"}, environ={}, base=BASE)
    assert "reconcile = 'loose'" in str(e.value) and "'report' or 'strict'" in str(e.value)
    # environment lists: SOAKTOP_IGNORE_XID=45,13
    cfg = load_config({}, environ={"SOAKTOP_IGNORE_XID": "45,13"}, base=BASE)
    assert cfg.ignore_xid == [45, 13]

"""The request surface's pure parts: --header syntax and refusals, the proxy refusal,
the TLS files' errors, and the Responses API's body (issue 18 §4)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from loadgen.headers import (
    HeaderError,
    check_spec,
    headers_problem,
    public_headers,
    resolve_headers,
    run_headers,
    secret_name,
    secret_values,
    secret_vars,
)
from loadgen.prompts import BodyBuilder
from loadgen.proxy import proxy_problem, strip_credentials
from loadgen.tls import TlsError, TlsFiles, check_pem, context
from soak.run.config import RunConfig

SECRET = "tok-9f8e7d6c5b4a"


def test_literal_and_env_headers_resolve() -> None:
    env = {"TENANT_TOKEN": SECRET}
    got = resolve_headers(["X-Tenant: blue", "Authorization: env:TENANT_TOKEN"], env)
    assert got == {"X-Tenant": "blue", "Authorization": SECRET}


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("Host: evil.example", "Host: refused"),
        ("content-length: 5", "refused"),
        ("Transfer-Encoding: chunked", "refused"),
        ("Connection: close", "hop-by-hop"),
        ("X-Request-Id: mine", "per request"),
        ("X-A: one\r\nX-B: two", "CR, LF or NUL"),
        ("X-A: one\nInjected: 1", "CR, LF or NUL"),
        ("Bad Name: v", "not an HTTP header name"),
        ("NoColon", "no ':'"),
        ("X-Empty:   ", "empty value"),
    ],
)
def test_bad_headers_are_refused_in_words(spec: str, words: str) -> None:
    with pytest.raises(HeaderError, match=words) as e:
        check_spec(spec)
    assert "two" not in str(e.value) and "evil" not in str(e.value)  # never the value


def test_env_header_unset_or_with_line_break() -> None:
    with pytest.raises(HeaderError, match="TENANT_TOKEN is not set"):
        resolve_headers(["X-K: env:TENANT_TOKEN"], {})
    with pytest.raises(HeaderError, match="is empty"):
        resolve_headers(["X-K: env:TENANT_TOKEN"], {"TENANT_TOKEN": ""})
    with pytest.raises(HeaderError, match="CR, LF") as e:
        resolve_headers(["X-K: env:T"], {"T": SECRET + "\r\nX-Evil: 1"})
    assert SECRET not in str(e.value)


def test_duplicate_and_authorization_clash() -> None:
    assert "given twice" in (headers_problem(["X-A: 1", "x-a: 2"], None) or "")
    assert "both set Authorization" in (headers_problem(["Authorization: x y"], "KEY") or "")
    assert headers_problem(["X-A: 1", "Authorization: x y"], None) is None


def test_the_record_shows_names_only() -> None:
    shown = public_headers([f"X-Key: {SECRET}", "Authorization: env:TOK"])
    assert shown == ["X-Key: <redacted>", "Authorization: env:TOK"]
    cfg = RunConfig.model_validate(
        {"endpoints": ["http://127.0.0.1:1"], "model": "m", "headers": [f"X-Key: {SECRET}"]}
    )
    assert SECRET not in orjson.dumps(cfg.public_dict()).decode()


def test_config_error_names_the_field_not_the_value() -> None:
    with pytest.raises(ValueError, match="refused") as e:
        RunConfig.model_validate(
            {"endpoints": ["http://127.0.0.1:1"], "model": "m", "headers": ["Host: h-secret"]}
        )
    assert "headers" in str(e.value)


def test_proxy_is_refused_unless_no_proxy_covers_the_host() -> None:
    env = {"HTTPS_PROXY": "http://user:pw-secret@proxy.example:3128"}
    why = proxy_problem(["https://engine.example:8000"], env)
    assert why is not None
    assert "HTTPS_PROXY=http://***@proxy.example:3128" in why and "pw-secret" not in why
    assert "NO_PROXY" in why
    assert proxy_problem(["http://engine.example:8000"], env) is None  # http: no proxy set
    assert proxy_problem(["https://engine.example"], env | {"NO_PROXY": "example"}) is None
    assert proxy_problem(["https://engine.example"], env | {"no_proxy": "*"}) is None
    loop = {"http_proxy": "http://p:1", "ALL_PROXY": "socks5://p:2"}
    assert "http_proxy" in (proxy_problem(["http://127.0.0.1:8000"], loop) or "")
    assert proxy_problem(["http://127.0.0.1:8000"], loop | {"NO_PROXY": "127.0.0.1"}) is None
    assert strip_credentials("http://proxy:1") == "http://proxy:1"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://u:pw-secret@proxy:abc", "http://***@proxy:abc"),  # a bad port: no crash
        ("u:pw-secret@proxy:3128", "***@proxy:3128"),  # no scheme
        ("http://u:pw/secret@proxy:3128", "http://***@proxy:3128"),  # a '/' in it
    ],
)
def test_proxy_credentials_never_shown(url: str, shown: str) -> None:
    assert strip_credentials(url) == shown
    why = proxy_problem(["https://engine.example"], {"HTTPS_PROXY": url}) or ""
    assert shown in why and "secret" not in why


def test_tls_files_are_checked_in_words(tmp_path: Path) -> None:
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    with pytest.raises(ValueError, match="not a PEM file"):
        check_pem(junk)
    with pytest.raises(ValueError, match="cannot be read"):
        check_pem(tmp_path / "missing.pem")
    fake = tmp_path / "fake.pem"
    fake.write_text("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
    with pytest.raises(TlsError, match=r"--ca-cert .*fake\.pem: not a usable CA bundle"):
        context(TlsFiles(ca_cert=str(fake)))
    with pytest.raises(TlsError, match=r"--client-cert .*fake\.pem"):
        context(TlsFiles(client_cert=str(fake)))
    with pytest.raises(TlsError, match="--client-key without --client-cert"):
        context(TlsFiles(client_key=str(fake)))
    assert context(TlsFiles()) is None


@pytest.mark.parametrize(
    ("api", "field", "want"),
    [
        ("chat", "max_tokens", {"max_tokens": 7, "stream_options": {"include_usage": True}}),
        ("chat", "max_completion_tokens", {"max_completion_tokens": 7}),
        ("completions", "max_completion_tokens", {"max_completion_tokens": 7, "prompt": "p"}),
        ("responses", "max_tokens", {"max_output_tokens": 7, "input": "p"}),
    ],
)
def test_body_fields(api: str, field: str, want: dict[str, object]) -> None:
    b = BodyBuilder(model="m", api=api, max_tokens=7, max_tokens_field=field)  # type: ignore[arg-type]
    body = orjson.loads(b.build("p"))
    assert want.items() <= body.items()
    other = {"max_tokens", "max_completion_tokens", "max_output_tokens"} - set(want)
    assert not other & set(body)
    assert b.output_limit == 7
    if api == "responses":
        assert b.path == "/v1/responses" and "stream_options" not in body


def test_a_shard_environment_loses_the_secrets_variables_only() -> None:
    from soak.run.shard_links import shard_env

    specs = ["X-Key: env:TENANT_TOKEN", "X-Tenant: team", "X-Path: /usr"]
    environ = {
        "TENANT_TOKEN": SECRET,
        "MY_KEY": "sk-apikey-1234",
        "HOME": "/home/team",  # holds the literal "team": a shard must keep it
        "PATH": "/usr/bin",
    }
    env = shard_env(environ, secret_vars(specs, "MY_KEY"))
    assert env == {"HOME": "/home/team", "PATH": "/usr/bin"}


def test_only_env_and_credential_headers_are_secrets() -> None:
    specs = [
        "X-Tenant: team",
        "X-Region: env:REGION",
        "Cookie: sid=abcdef",
        "X-Api-Key: literal-key-1",
    ]
    environ = {"REGION": "eu-west-7", "KEY": "sk-9876"}
    headers = run_headers(specs, "KEY", environ)
    assert headers["Authorization"] == "Bearer sk-9876"
    got = set(secret_values(specs, headers))
    assert got == {"eu-west-7", "sid=abcdef", "literal-key-1", "Bearer sk-9876", "sk-9876"}
    assert "team" not in got
    assert all(secret_name(n) for n in ("Authorization", "proxy-authorization", "X-Auth-Token"))
    assert not secret_name("X-Tenant")


def test_responses_api_refuses_chat_shaped_fields(tmp_path: Path) -> None:
    from soak.cli.parser import cli_flags
    from soak.run.config import ConfigError
    from soak.run.config_load import load_config

    sample = Path(__file__).resolve().parents[2] / "samples" / "mix" / "mix.toml"
    base = {"endpoints": ["http://127.0.0.1:8000"], "model": "m", "gates": []}
    with pytest.raises(ConfigError, match=r"mix class 'json': response_format .*--api chat"):
        load_config(base | {"mix": sample, "api": "responses"}, environ={}, cli_flags=cli_flags())
    with pytest.raises(ConfigError, match=r"reasoning_effort = 'high'.*reasoning\.effort"):
        load_config(base | {"api": "responses", "reasoning_effort": "high"}, environ={})
    plain = tmp_path / "mix.toml"
    plain.write_text('[[class]]\nname = "a"\nweight = 1\n\n[[class]]\nname = "b"\nweight = 2\n')
    cfg = load_config(base | {"mix": plain, "api": "responses"}, environ={})
    assert cfg.mix is not None and cfg.api == "responses"


def test_scout_sends_the_runs_headers(monkeypatch: pytest.MonkeyPatch) -> None:
    """``soaktop scout`` waits for and probes each switched arm with the run's headers
    (an engine that requires them would look down otherwise), and its logs lose only
    the secrets among them."""
    from soak.cli.scout import _headers, _secrets

    monkeypatch.setenv("R7_TOKEN", SECRET)
    monkeypatch.setenv("R7_KEY", "sk-r7-key-1")
    cfg = RunConfig.model_validate(
        {
            "endpoints": ["http://127.0.0.1:1"],
            "model": "m",
            "headers": ["X-Tenant: team", "X-Key: env:R7_TOKEN"],
            "api_key_env": "R7_KEY",
        }
    )
    assert _headers(cfg) == {
        "X-Tenant": "team",
        "X-Key": SECRET,
        "Authorization": "Bearer sk-r7-key-1",
    }
    assert set(_secrets(cfg)) == {SECRET, "Bearer sk-r7-key-1", "sk-r7-key-1"}

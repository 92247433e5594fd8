"""Property tests of the config loader: any value for any field, from the command line, a
``SOAKTOP_*`` variable or a TOML file, is either accepted within its documented range or
refused with a :class:`ConfigError` naming the field; nothing else ever escapes."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from soak.run.config import ConfigError, RunConfig
from soak.run.config_load import load_config
from soak.run.config_words import allowed

BASE = {"endpoints": ["http://127.0.0.1:8000"], "model": "tiny", "gates": [], "nvml": False}
FIELDS = sorted(RunConfig.model_fields)
# Derandomized and modest: the same examples on every machine, the file well under 15 s.
PROPS = settings(
    max_examples=150,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

huge_ints = st.sampled_from([2**63, 2**64 + 1, -(2**63) - 1, 10**30, 10**5000])
floats = st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from(
    [math.inf, -math.inf, math.nan, 1e308, 5e-324, -0.0]
)
scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | huge_ints
    | floats
    | st.text(max_size=40)
    | st.sampled_from(["inf", "nan", "1e400", "-1", "0", "http://127.0.0.1:99999", "\x1b]0;x\x07"])
)
values = scalars | st.lists(scalars, max_size=3) | st.dictionaries(st.text(max_size=5), scalars)


def _check(cfg: RunConfig) -> None:
    """What an accepted config must hold: finite floats, ints within their bounds."""
    for name, info in RunConfig.model_fields.items():
        v = getattr(cfg, name)
        items = v if isinstance(v, list) else [v]
        for x in items:
            if isinstance(x, float):
                assert math.isfinite(x), (name, x)
            if isinstance(x, int | float) and not isinstance(x, bool):
                for m in info.metadata:
                    for attr, ok in (
                        ("ge", x >= getattr(m, "ge", -math.inf)),
                        ("gt", x > getattr(m, "gt", -math.inf)),
                        ("le", x <= getattr(m, "le", math.inf)),
                    ):
                        assert ok, (name, x, attr)
                assert abs(x) < 2**63, (name, x)  # fits the runner's JSON
    # What the CLI accepted, the runner accepts: the JSON it is handed on stdin validates
    # to the same config, and the run directory's config.json can be written.
    assert RunConfig.model_validate_json(cfg.model_dump_json()) == cfg
    orjson.dumps(cfg.public_dict())


def _load(**kw: Any) -> None:
    try:
        cfg = load_config(kw.pop("cli", {}), environ=kw.pop("environ", {}), **kw)
    except ConfigError as e:
        text = str(e)
        assert text and "Traceback" not in text and "validation error" not in text, text
        assert "pydantic.dev" not in text, text
        return
    _check(cfg)


@pytest.mark.parametrize("field", FIELDS)
@settings(PROPS, max_examples=12)
@given(value=values)
def test_any_cli_value_is_accepted_in_range_or_a_sentence(field: str, value: Any) -> None:
    _load(cli={field: value}, base=BASE)


@PROPS
@given(field=st.sampled_from(FIELDS), raw=st.text(max_size=60) | st.sampled_from(["inf", "1e999"]))
def test_any_environment_value_is_accepted_in_range_or_a_sentence(field: str, raw: str) -> None:
    if "\x00" in raw:  # an environment variable cannot hold NUL
        raw = raw.replace("\x00", "")
    _load(environ={f"SOAKTOP_{field.upper()}": raw}, base=BASE)


_TOML_VALUES = st.sampled_from(
    [
        *["inf", "nan", "-inf", "1e400", "99999999999999999999", "-1", "0", '"x"', "[1, 2]"],
        "{a = 1}",
        "true",
        '"http://127.0.0.1:0"',
        "1979-05-27T07:32:00Z",
        '""',
        "0.0",
    ]
)


@pytest.fixture(scope="module")
def toml_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("toml")


@PROPS
@given(field=st.sampled_from(FIELDS), value=_TOML_VALUES)
def test_any_toml_value_is_accepted_in_range_or_a_sentence(
    toml_dir: Path, field: str, value: str
) -> None:
    path = toml_dir / "c.toml"
    path.write_text(f"[run]\n{field} = {value}\n")
    _load(toml_path=path, base=BASE)


@PROPS
@given(text=st.binary(max_size=80))
def test_any_toml_file_is_read_or_refused_in_a_sentence(toml_dir: Path, text: bytes) -> None:
    path = toml_dir / "g.toml"
    path.write_bytes(text)
    _load(toml_path=path, base=BASE)


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("concurrency", 2**64, "allowed: a whole number from 1 to 100,000"),
        ("max_requests", 10**30, "1,000,000,000"),
        ("drain_timeout_s", math.inf, "finite"),
        ("duration_s", math.nan, "finite"),
        ("temperature", 3.0, "at most 2"),
        ("pool_seed", 2**63, "9,223,372,036,854,775,807"),
        ("server_pid", [0], "from 1 to 4,194,304"),
        ("ignore_xid", [10**40], "from 1 to 1,000"),
        ("canary_tasks", 10**9, "from 1 to 1,000"),
        ("endpoints", ["http://127.0.0.1:0"], "1 to 65535"),
        ("endpoints", ["http://127.0.0.1:99999"], "1 to 65535"),
        ("dcgm", ["http://:9400/metrics"], "has no host"),
    ],
)
def test_an_out_of_range_value_names_the_field_and_what_is_allowed(field, value, words):
    with pytest.raises(ConfigError) as e:
        load_config({field: value}, environ={}, base=BASE)
    assert str(e.value).startswith(field) and words in str(e.value), str(e.value)


def test_every_field_has_a_documented_range():
    for name in FIELDS:
        assert allowed(name), name


def test_a_huge_number_is_named_by_its_size_not_echoed():
    with pytest.raises(ConfigError) as e:
        load_config({"concurrency": 10**5000}, environ={}, base=BASE)
    assert "a number of about 5001 digits" in str(e.value) and len(str(e.value)) < 400


def test_the_api_key_variable_must_be_set_and_not_empty():
    with pytest.raises(ConfigError, match="SOAK_TEST_KEY is not set"):
        load_config({"api_key_env": "SOAK_TEST_KEY"}, environ={}, base=BASE)
    with pytest.raises(ConfigError, match="SOAK_TEST_KEY is empty"):
        load_config({"api_key_env": "SOAK_TEST_KEY"}, environ={"SOAK_TEST_KEY": ""}, base=BASE)
    cfg = load_config({"api_key_env": "SOAK_TEST_KEY"}, environ={"SOAK_TEST_KEY": "k"}, base=BASE)
    assert cfg.api_key_env == "SOAK_TEST_KEY"


def test_files_must_exist_and_parse(tmp_path):
    bad = tmp_path / "p.json"
    bad.write_text("[{not json")
    with pytest.raises(ConfigError, match="is not valid JSON"):
        load_config({"prompts": bad}, environ={}, base=BASE)
    with pytest.raises(ConfigError, match="is a directory"):
        load_config({"suite_files": [tmp_path]}, environ={}, base=BASE)
    # a server log may appear after the start, but its directory must exist
    ok = load_config({"server_log": [tmp_path / "later.log"]}, environ={}, base=BASE)
    assert ok.server_log == [tmp_path / "later.log"]
    with pytest.raises(ConfigError, match="neither does its directory"):
        load_config({"server_log": [tmp_path / "no" / "x.log"]}, environ={}, base=BASE)
    with pytest.raises(ConfigError, match="is not a directory"):
        load_config({"out": bad}, environ={}, base=BASE)

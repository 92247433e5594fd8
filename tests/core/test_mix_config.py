"""``--mix FILE``: the TOML file read and checked before any run directory exists, each
error in words naming the file, the class, the field, the value and what is allowed; the
classes' request bodies; class-scoped thresholds refused when the mix lacks the class."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from soak.cli.parser import cli_flags
from soak.run.config import ConfigError, RunConfig
from soak.run.config_load import load_config
from soak.run.mix_setup import class_bodies, mix_contracts

SAMPLE = Path(__file__).resolve().parents[2] / "samples" / "mix" / "mix.toml"
BASE = {"endpoints": ["http://127.0.0.1:8000"], "model": "m", "gates": []}


def _config(tmp_path: Path, toml: str | None = None, **cli: object) -> RunConfig:
    mix = SAMPLE
    if toml is not None:
        mix = tmp_path / "mix.toml"
        mix.write_text(toml)
    return load_config(BASE | {"mix": mix} | cli, environ={}, cli_flags=cli_flags())


def _error(tmp_path: Path, toml: str | None = None, **cli: object) -> str:
    with pytest.raises(ConfigError) as e:
        _config(tmp_path, toml, **cli)
    return str(e.value)


def test_the_sample_mix_reads_with_its_paths_beside_it(tmp_path: Path) -> None:
    cfg = _config(tmp_path)
    assert cfg.mix is not None
    assert [(c.name, c.weight) for c in cfg.mix.classes] == [
        ("chat", 6.0),
        ("long", 2.0),
        ("json", 2.0),
    ]
    chat, long, json = cfg.mix.classes
    assert chat.prompts == str(SAMPLE.parent / "chat.jsonl") and long.synthetic_input_tokens == 1500
    assert json.response_format is not None and json.response_format["type"] == "json_schema"
    assert set(mix_contracts(cfg)) == {"json"}
    # config.json holds the mix as read, and reads back the same (recover, verify)
    again = RunConfig.model_validate(orjson.loads(orjson.dumps(cfg.public_dict())))
    assert again.mix == cfg.mix


def test_redact_drops_the_mix_paths(tmp_path: Path) -> None:
    mix = _config(tmp_path, redact=True).public_dict()["mix"]
    assert mix["file"] == "<redacted>"
    assert {c["name"]: c["prompts"] for c in mix["classes"]} == {
        "chat": "<redacted>",
        "long": None,
        "json": "<redacted>",
    }


def test_each_class_sends_its_own_fields_and_the_run_s_for_the_rest(tmp_path: Path) -> None:
    toml = """
[[class]]
name = "plain"
weight = 1

[[class]]
name = "tools"
weight = 1
max_tokens = 40
reasoning = "high"
tools = [{type = "function", function = {name = "get_weather", parameters = {type = "object"}}}]
tool_choice = "required"
"""
    cfg = _config(tmp_path, toml, max_tokens=99, top_p=0.9, reasoning_effort="low")
    assert cfg.mix is not None
    plain, tools = (orjson.loads(class_bodies(cfg, c).build("hi")) for c in cfg.mix.classes)
    assert (plain["max_tokens"], plain["top_p"], plain["reasoning_effort"]) == (99, 0.9, "low")
    assert "tools" not in plain
    assert (tools["max_tokens"], tools["reasoning_effort"], tools["tool_choice"]) == (
        40,
        "high",
        "required",
    )
    assert tools["tools"][0]["function"]["name"] == "get_weather"
    assert mix_contracts(cfg)["tools"].kind == "tool_call"


_ONE = '[[class]]\nname = "a"\nweight = 1\n'


@pytest.mark.parametrize(
    ("toml", "words"),
    [
        ("", "class = None: give at least one [[class]] table"),
        ("weights = 1\n" + _ONE, "weights = 1: unknown key; a mix file holds [[class]] tables"),
        ('[[class]]\nname = "A b"\nweight = 1\n', "class #1: name = 'A b': required: 1 to 32"),
        (
            '[[class]]\nname = "a"\nweight = 0\n',
            "class 'a': weight = 0: required: a number above 0",
        ),
        ('[[class]]\nname = "a"\nweight = true\n', "class 'a': weight = True: required: a number"),
        (_ONE + _ONE, "class 'a': name = 'a': given to two classes"),
        (_ONE + "colour = 1\n", "class 'a': colour = 1: unknown field; allowed: name, weight"),
        (_ONE + "max_tokens = 0\n", "class 'a': max_tokens = 0: a whole number from 1 to"),
        (_ONE + 'prompts = "nope.jsonl"\n', "prompts = 'nope.jsonl': the file"),
        (
            _ONE + f'prompts = "{SAMPLE.parent / "chat.jsonl"}"\nsynthetic_input_tokens = 5\n',
            "exclusive with synthetic_input_tokens",
        ),
        (_ONE + 'response_format = {type = "xml"}\n', "response_format = {'type': 'xml'}: give"),
        (
            _ONE
            + 'response_format = {type = "json_schema", json_schema = {schema = {type = 3}}}\n',
            "response_format.json_schema.schema = '{…}': not a valid JSON Schema",
        ),
        (_ONE + 'tool_choice = "required"\n', "class 'a': tool_choice = 'required': needs tools"),
        (
            _ONE + 'tools = [{type = "function", function = {name = "f"}}]\n'
            'tool_choice = {type = "function", function = {name = "g"}}\n',
            "naming one of the class's tools: f",
        ),
        (_ONE + 'reasoning = "HIGH"\n', "reasoning = 'HIGH': 1 to 32 lowercase letters"),
        ("[[class]\n", "is not valid TOML"),
    ],
)
def test_a_bad_mix_is_refused_in_words(tmp_path: Path, toml: str, words: str) -> None:
    message = _error(tmp_path, toml)
    assert message.startswith("mix = ") and "(--mix)" in message, message
    assert f"mix file {str(tmp_path / 'mix.toml')!r}" in message, message
    assert words in message, message


def test_a_mix_is_refused_where_it_cannot_apply(tmp_path: Path) -> None:
    assert "does not exist" in _error(tmp_path, mix=tmp_path / "missing.toml")
    assert "the matrix builds its own" in _error(
        tmp_path, matrix="input=100 concurrency=1 reps=1 requests=1"
    )
    tools = _ONE + 'tools = [{type = "function", function = {name = "f"}}]\n'
    assert "tool calls need api = 'chat'" in _error(tmp_path, tools, api="completions")


@pytest.mark.parametrize(
    ("threshold", "words"),
    [
        ("class.nope.error_rate==0", "the mix has no class 'nope'; its classes: chat, long, json"),
        ("class.json.gpu.max_temp_c<80", "'gpu.max_temp_c' is not a load metric a class can"),
        ("class.json.ttfb.p99<2s,abort", "has no live figure (soaktop keeps it only in the"),
        ("class.json.ttft<2s", "is not a load metric a class can scope"),
    ],
)
def test_class_thresholds_name_the_mix_s_classes(
    tmp_path: Path, threshold: str, words: str
) -> None:
    assert words in _error(tmp_path, thresholds=[threshold])


def test_class_thresholds_need_a_mix_and_accept_its_classes(tmp_path: Path) -> None:
    given = ["class.json.error_rate==0", "class.long.ttft.p99<5s", "class.json.failed<3,abort"]
    cfg = _config(tmp_path, thresholds=given)
    assert cfg.thresholds == given  # a class's live figure takes ,abort (issue 16 §2)
    with pytest.raises(ConfigError, match="the run has no mix: class thresholds need --mix"):
        load_config(BASE | {"thresholds": ["class.json.error_rate==0"]}, environ={})

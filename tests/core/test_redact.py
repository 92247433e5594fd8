"""The redaction layer: what ``--redact`` recognises, learns and replaces, and how.

Pseudonyms are keyed hashes under a per-machine salt: stable for one value, distinct for
two, the same in two runs with the same salt. Soaktop's own words (routes, times,
versions, ratios, hashes) must come through untouched — a redactor that eats them makes
the record useless. Secrets go with or without ``--redact``, also when a stream splits
them across chunks, at every split position.
"""

from __future__ import annotations

import io
import json
import os
import stat
import time
import traceback
from pathlib import Path
from typing import Any

import orjson
import pytest

from soak.cli.demo import SimHandle, keep_server_logs
from soak.record.events import EventLog
from soak.record.journal import read_jsonl
from soak.record.models import Identity
from soak.record.redact import Redactor
from soak.run.config_load import load_config
from soak.run.redaction import RedactingStream, RedactingWriter, load_salt, run_redactor
from soak.watch.gpu.nvml import NvmlWatch
from tests.core.test_nvml import FakeGpu, FakeNvml
from tests.hostile_server import _chunk

KEY = "sk-soaktop-test-0123456789abcdef"
UUID = "GPU-d9e1714b-d93d-cdb9-d018-eb5635fc6831"
UUID2 = "GPU-120e64c2-6983-5514-42b1-e4c69fad5300"
SALT = b"s" * 32


def red(**kw: Any) -> Redactor:
    return Redactor(["http://127.0.0.1:45883", "http://gpu-box:8000"], True, [KEY], salt=SALT, **kw)


# -- shapes ----------------------------------------------------------------------------

PRIVATE = {
    "gpu uuid": (f"reading {UUID} now", UUID),
    "mig": (f"MIG-GPU-{UUID[4:]}/1/0 busy", f"MIG-GPU-{UUID[4:]}"),
    "pci (NVML)": ("bus 00000000:3B:00.0 ok", "3B:00.0"),
    "pci (kernel Xid)": ("NVRM: Xid (PCI:0000:18:00): 31, pid=1", "0000:18:00"),
    "ipv4 and port": ("peer 10.1.2.3:5555 said", "10.1.2.3"),
    "ipv6": ("bound to fe80::1ff:fe23:4567:890a%eth0 and ::1", "fe80::1ff"),
    "mac": ("nic aa:bb:cc:dd:ee:ff up", "aa:bb:cc:dd:ee:ff"),
    "absolute path": ("open /home/alice/prompts.jsonl failed.", "alice"),
    "home path": ("see ~/logs/vllm.log", "logs/vllm"),
    "fqdn": ("node gpu-node-17.internal.corp down", "gpu-node-17"),
    "other url": ("from https://models.example.com/alice/weights", "alice"),
    "file url": ("file:///etc/soaktop/secret.toml", "secret.toml"),
    "endpoint": ("GET http://127.0.0.1:45883/v1/models", "45883"),
    "endpoint host name": ("gpu-box refused", "gpu-box"),
    "secret": (f"key={KEY}", KEY),
}


@pytest.mark.parametrize("name", sorted(PRIVATE))
def test_each_class_of_private_value_is_replaced(name: str) -> None:
    text, private = PRIVATE[name]
    out = red().text(text)
    assert private.lower() not in out.lower(), out
    assert red().text(out) == out  # redacting twice changes nothing


OWN_WORDS = [
    "/v1/models answered HTTP 404",
    "<endpoint 0>/v1/chat/completions",
    "GET /metrics and /health, /version, /tokenize",
    "output 692.9 tok/s, 3/4 workers, TTFT p50/p99",
    "at 19:00:43 (load+00:17:02), 12-01 19:03:13",
    "vLLM 0.32.0, driver 550.54.15, CUDA 12.4",
    "VLLM::EngineCore0 and std::vector",
    "b2c6b5d081977e15aa70d4280d94362bd94077a9532f05f3bd6396e355c4a7cc",
    "tiny-sim__run__vllm__soak__1201-190043/load/chat/17",
    "evidence/before-json-2.json, record.json, vllm.entrypoints.openai",
    'schema {"$ref": "#/definitions/item"}',
    "GPU 1 (NVIDIA H200, host host-1a2b3c4d)",
]


@pytest.mark.parametrize("words", OWN_WORDS)
def test_soaktops_own_words_come_through_untouched(words: str) -> None:
    assert red().text(words) == words


def test_pseudonyms_are_stable_distinct_and_keyed_by_the_salt() -> None:
    a, b = red(), red()
    assert a.text(UUID) == b.text(UUID)  # same salt: the same pseudonym in two runs
    assert a.text(UUID).startswith("gpu-") and a.text(UUID2).startswith("gpu-")
    assert a.text(UUID) != a.text(UUID2)
    other = Redactor([], True, salt=b"t" * 32)
    assert other.text(UUID) != a.text(UUID)  # another machine's salt: not linkable
    # one device written two ways (NVML, a kernel line) is one pseudonym
    assert a.text("00000000:3B:00.0") == a.text("0000:3b:00")
    assert a.text(UUID.lower()) == a.text(UUID.upper().replace("GPU-", "GPU-"))


def test_learned_values_are_replaced_as_whole_words_only() -> None:
    r = red()
    host = r.learn("host", "sim-node-1")
    assert host is not None and host.startswith("host-")
    assert r.text("GPU 0 on sim-node-1.") == f"GPU 0 on {host}."
    assert "sim-node-10" in r.text("sim-node-10 is another node")  # not part of a longer name
    assert r.text("SIM-NODE-1 up") == f"{host} up"


def test_structured_fields_are_replaced_whole_and_learned() -> None:
    r = red()
    line = r.obj(
        {
            "gpus": [
                {"host": "n7", "uuid": "weird-id-1", "pci_bus_id": "00000000:3B:00.0"},
                {"host": None, "uuid": f"MIG-{UUID[4:]}", "serial": "1652222014738"},
            ],
            "note": "n7 reported weird-id-1 and serial 1652222014738",
        }
    )
    g0, g1 = line["gpus"]
    assert g0["host"].startswith("host-") and g0["uuid"].startswith("gpu-")
    assert g0["pci_bus_id"] == r.text("0000:3b:00")
    assert g1["host"] is None and g1["uuid"].startswith("mig-")
    assert g1["serial"].startswith("serial-")
    # learned from the fields: the free text that names them later is scrubbed too
    assert line["note"] == r.text("n7 reported weird-id-1 and serial 1652222014738")
    assert r.text("n7 reported weird-id-1") == f"{g0['host']} reported {g0['uuid']}"
    assert r.obj(line) == line


def test_a_model_that_is_a_path_keeps_its_name() -> None:
    r = red()
    shown = r.learn_model("/srv/models/team-secret/llama-7b")
    assert shown.endswith("/llama-7b") and shown.startswith("path-") and "team" not in shown
    assert r.text("loaded /srv/models/team-secret/llama-7b") == f"loaded {shown}"
    assert r.learn_model("meta-llama/Llama-3-8B") == "meta-llama/Llama-3-8B"  # a hub name


def test_without_redact_only_secrets_go() -> None:
    r = Redactor(["http://127.0.0.1:45883"], False, [KEY])
    text = f"http://127.0.0.1:45883 {UUID} /home/alice {KEY}"
    assert r.text(text) == f"http://127.0.0.1:45883 {UUID} /home/alice <secret>"
    assert r.obj({"host": "n7"}) == {"host": "n7"}


# -- secrets: split, cut, escaped --------------------------------------------------------


def _stream(*pieces: str) -> str:
    chunks = [_chunk("m", {"role": "assistant", "content": ""})]
    chunks += [_chunk("m", {"content": p}) for p in pieces]
    return "".join(chunks) + "data: [DONE]\n\n"


def _assembled(body: str) -> str:
    out = []
    for line in body.splitlines():
        if line.startswith("data: {"):
            out.append(json.loads(line[6:])["choices"][0]["delta"].get("content", ""))
    return "".join(out)


def _no_part_of_key(text: str) -> None:
    assert KEY not in text
    for i in range(len(KEY) - 7):
        assert KEY[i : i + 8] not in text, KEY[i : i + 8]


@pytest.mark.parametrize("redact", [False, True])
def test_a_key_split_across_two_chunks_is_scrubbed_at_every_position(redact: bool) -> None:
    r = Redactor([], redact, [KEY], salt=SALT)
    for k in range(1, len(KEY)):
        body = r.body(_stream("the key is ", KEY[:k], KEY[k:], " ok"))
        assert _assembled(body) == "the key is <secret> ok", k
        _no_part_of_key(body)
        if k >= 3:  # neither half, down to three characters
            assert KEY[:k] not in body, k
        if len(KEY) - k >= 3:
            assert KEY[k:] not in body, k


def test_a_key_split_three_ways_and_across_tool_call_arguments() -> None:
    r = Redactor([], False, [KEY])
    body = r.body(_stream(KEY[:5], KEY[5:9], KEY[9:]))
    assert _assembled(body) == "<secret>"
    args = [
        _chunk("m", {"tool_calls": [{"index": 0, "function": {"arguments": '{"k": "' + KEY[:7]}}]}),
        _chunk("m", {"tool_calls": [{"index": 0, "function": {"arguments": KEY[7:] + '"}'}}]}),
    ]
    _no_part_of_key(r.body("".join(args)))


def test_an_escaped_key_in_a_json_body_or_chunk_is_found() -> None:
    escaped = "\\u0073" + KEY[1:]  # "s" written as a JSON escape
    r = Redactor([], True, [KEY], salt=SALT)
    body = r.body('{"choices": [{"message": {"content": "' + escaped + '"}}]}')
    assert KEY not in json.dumps(json.loads(body)) and "<secret>" in body
    chunk = 'data: {"choices":[{"index":0,"delta":{"content":"' + escaped + '"}}]}\n\n'
    assert "<secret>" in r.body(chunk)
    line = r.json_line(b'{"detail": "' + escaped.encode() + b'"}')
    assert KEY not in orjson.loads(line)["detail"]


def test_a_key_cut_by_an_excerpt_leaves_no_fragment_in_a_line() -> None:
    r = Redactor([], False, [KEY])
    line = orjson.dumps({"reason": f"invalid JSON: {('x' * 50 + KEY)[:60]!r}"})
    out = r.json_line(line)
    _no_part_of_key(out.decode())
    assert b"<secret>" in out


# -- writers -----------------------------------------------------------------------------


def test_a_redacting_journal_scrubs_every_line(tmp_path: Path) -> None:
    r = red()
    w = RedactingWriter(tmp_path / "t.jsonl", r)
    w.write({"source": "dcgm", "gpus": [{"host": "node-7", "uuid": UUID}], "error": None})
    w.write_raw(orjson.dumps({"e": "scrape http://127.0.0.1:45883 from node-7: " + KEY}))
    w.close()
    text = (tmp_path / "t.jsonl").read_text()
    for private in (UUID, "node-7", "127.0.0.1", KEY):
        assert private not in text
    lines = list(read_jsonl(tmp_path / "t.jsonl"))
    assert lines[0]["gpus"][0]["host"] in lines[1]["e"]  # the same pseudonym in both


def test_a_model_is_scrubbed_and_stays_valid() -> None:
    ident = Identity.model_validate(
        {
            "model": "m",
            "model_served": True,
            "engine": "vllm",
            "endpoints": [],
            "config_sha256": "0" * 64,
            "soaktop_version": "0",
            "host": {"hostname": "box"},
            "gpus": [{"uuid": UUID, "host": "n7"}],
        }
    )
    out = red().model(ident)
    assert UUID not in out.model_dump_json() and "n7" not in out.model_dump_json()
    assert out.config_sha256 == "0" * 64


def test_a_traceback_into_runner_log_is_scrubbed() -> None:
    sink = io.StringIO()
    stream = RedactingStream(sink, red())
    try:
        raise OSError(f"cannot read /home/alice/secret.jsonl from 10.1.2.3 ({KEY})")
    except OSError:
        traceback.print_exc(file=stream)
    stream.write("partial line /home/alice/x")
    stream.flush()
    out = sink.getvalue()
    assert "Traceback" in out and "OSError" in out
    for private in ("alice", "10.1.2.3", KEY):
        assert private not in out


# -- the salt ----------------------------------------------------------------------------


def test_the_salt_is_made_once_private_and_reused(tmp_path: Path) -> None:
    path = tmp_path / "cfg" / "soaktop" / "redact-salt"
    salt, problem = load_salt(path)
    assert problem is None and len(salt) == 32
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_salt(path) == (salt, None)
    broken = tmp_path / "file"
    broken.write_text("x")
    other, problem = load_salt(broken / "redact-salt")  # a parent that is a file
    assert problem is not None and str(broken) in problem and len(other) == 32
    broken.write_text("not hex\n")
    other, problem = load_salt(broken)
    assert problem is not None and "unreadable" in problem and len(other) == 32


def test_run_redactor_learns_the_configuration(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "vllm.log").write_text("")
    cfg = load_config(
        {
            "endpoints": ["http://gpu-box.example:8000"],
            "model": "/srv/models/llama",
            "redact": True,
            "server_log": ["logs/vllm.log"],
            "server_log_cmd": ["docker logs -f vllm-team-a"],
            "dcgm": ["http://10.0.0.7:9400/metrics"],
            "out": str(tmp_path / "runs"),
        },
        environ={},
    )
    r = run_redactor(cfg, [], SALT)
    out = r.text(
        "gpu-box.example:8000 and logs/vllm.log and vllm-team-a and "
        f"{os.uname().nodename} and http://10.0.0.7:9400/metrics and /srv/models/llama"
    )
    for private in ("gpu-box", "logs/vllm", "team-a", "10.0.0.7", "/srv"):
        assert private not in out, out
    if len(os.uname().nodename) >= 2:
        assert os.uname().nodename not in out.split()
    assert "<dcgm 0>" in out


# -- NVML and DCGM identities --------------------------------------------------------------


async def test_nvml_identities_are_registered_with_the_redactor(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    odd = "GPU-serial-1652222014738"  # not the UUID shape: only the field says it is one
    fake = FakeNvml([FakeGpu(0, "NVIDIA H200"), FakeGpu(1, "NVIDIA H200")])
    fake.gpus[1].uuid = odd
    fake.install(monkeypatch)
    r = red()
    origin = time.perf_counter_ns()
    events = EventLog(RedactingWriter(tmp_path / "events.jsonl", r), origin, r)
    telemetry = RedactingWriter(tmp_path / "telemetry.jsonl", r)
    watch = NvmlWatch(origin, telemetry, events, scrub=r.obj)
    assert await watch.open()
    await watch.sample()
    await watch.stop()
    telemetry.close()
    raw = [g.uuid for g in fake.gpus] + [g.bus_id for g in fake.gpus]
    written = (tmp_path / "telemetry.jsonl").read_text() + json.dumps(watch.identity())
    written += json.dumps(watch.summary()) + json.dumps(watch.view())
    for value in raw:
        assert value not in written and value.lower() not in written.lower()
    # learned: a later free-text mention (a server log line) is scrubbed the same way
    ident = watch.identity()
    assert r.text(f"cuda error on {odd}") == f"cuda error on {ident[1]['uuid']}"
    assert {i["pci_bus_id"] for i in ident} == {r.text(g.bus_id) for g in fake.gpus}


# -- demo server logs --------------------------------------------------------------------


def test_demo_server_log_copy_is_scrubbed_with_redact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    log = tmp_path / "sim" / "replica0.log"
    log.parent.mkdir()
    log.write_text(
        "INFO Starting vLLM API server 0 on http://127.0.0.1:43793\n"
        f'INFO 127.0.0.1:32944 - "POST /v1/chat/completions HTTP/1.1" 200 {UUID}\n'
        f"ERROR NVRM: Xid (PCI:0000:18:00): 31 in {log}\n"
    )
    sim = SimHandle(proc=None, ready={"replicas": [{"log": str(log)}]}, log_dir=log.parent)  # type: ignore[arg-type]
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    cfg = load_config(
        {"endpoints": ["http://127.0.0.1:43793"], "model": "m", "redact": True}, environ={}
    )
    keep_server_logs(sim, run_dir, cfg)
    copy = (run_dir / "server_logs" / "replica0.log").read_text()
    assert copy.count("\n") == 3 and "POST /v1/chat/completions HTTP/1.1" in copy
    for private in ("127.0.0.1", "43793", UUID, "0000:18:00", str(tmp_path)):
        assert private not in copy, copy
    plain = tmp_path / "plain"
    plain.mkdir()
    keep_server_logs(sim, plain, cfg.model_copy(update={"redact": False}))
    assert (plain / "server_logs" / "replica0.log").read_text() == log.read_text()


def test_the_redactor_is_fast_enough_for_a_snapshot_a_second() -> None:
    r = red()
    r.learn("host", "sim-node-0")
    snap = orjson.dumps(
        {
            "telemetry": {
                "gpus": [
                    {"index": i, "host": "sim-node-0", "uuid": UUID, "util_percent": 50.0}
                    for i in range(16)
                ],
                "engines": [
                    {"endpoint": i, "values": {f"m{j}": j for j in range(40)}} for i in range(4)
                ],
            },
            "events": [{"message": f"<endpoint 0>: failure {i} — HTTP 500"} for i in range(50)],
        }
    )
    r.json_line(snap)
    begun = time.perf_counter()
    for _ in range(20):
        r.json_line(snap)
    assert (time.perf_counter() - begun) / 20 < 0.02  # well under the loop-lag budget


def test_stream_lines_that_are_not_chunks_and_keys_of_chunks_are_scrubbed() -> None:
    r = red()
    body = (
        f"event: error\ndata: not json from /home/alice/x\n\n"
        f'data: {{"choices": [], "/home/alice/y": 1, "note": "{UUID}"}}\n\n'
        "data: [DONE]\n\n"
    )
    out = r.body(body)
    assert "alice" not in out and UUID not in out
    assert out.endswith("data: [DONE]\n\n") and out.startswith("event: error\n")


def test_a_real_name_shaped_like_a_pseudonym_is_still_redacted() -> None:
    red = Redactor([], True, salt=b"s" * 32)
    issued = red.learn("host", "node-7.example.internal")
    assert issued is not None and issued != "node-7.example.internal"
    assert red.learn("host", issued) == issued  # a second pass changes nothing
    real = "dgx-0a1b2c3d"  # a DCGM Hostname label that happens to look like a pseudonym
    assert red.field("host", real) != real
    assert real not in red.text(f"GPU 0 on {real}")

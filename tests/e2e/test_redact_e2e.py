"""Private data stays private (issue 12 §4): real runs, every file of the run directory.

One ``--redact`` run against a hostile server whose ``/v1/models``, ``/version``, error
messages, error events and server-log lines are full of paths, addresses, host names and
GPU ids, with the simulated engine's DCGM exporters (GPU UUIDs, ``Hostname`` labels, PCI
ids) and server logs, an API key and a prompt file under a private path. The test collects
every private value the run saw — planted, served by the DCGM exporters, the machine's own
name, the temporary paths and ports — and looks for each in every file of the run
directory, raw and JSON-decoded (escaping must not hide one). Then: the pseudonyms hold
across two runs, and an API key the server splits across two stream chunks, at every
position, leaves no recognisable part of itself in any file.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from soak.after.report import plotly_bundle
from soak.cli.demo import SimHandle
from tests.e2e.conftest import only_run_dir, record, run_soaktop, wait_for_phase
from tests.hostile_server import _chunk, good_stream, hostile_server

pytestmark = pytest.mark.timeout(240)

KEY = "sk-soaktop-e2e-7f3a9c1d5b2e8f40"
MODEL = "/srv/models/team-secret/llama-7b"
PATH = "/home/zqalice/vllm-build"
IP = "10.9.8.7"
FQDN = "gpu-node-17.internal.corp"
UUID = "GPU-5f0e1d2c-3b4a-5968-7766-554433221100"
PCI = "00000000:AB:00.0"
PLANTED = [PATH, IP, FQDN, UUID, PCI, MODEL, "team-secret", "zqalice"]


def _hostile_script() -> dict[str, Any]:
    where = f"{PATH}/engine.py on {FQDN} ({IP}:8000), {UUID} at {PCI}, node sim-node-1"
    error_event = "data: " + json.dumps({"error": {"message": f"worker died: {where}"}}) + "\n\n"
    return {
        "model": MODEL,
        "routes": {
            "/v1/models": {
                "json": {
                    "object": "list",
                    "data": [
                        {
                            "id": MODEL,
                            "object": "model",
                            "root": f"{MODEL}/weights",
                            "owned_by": "x",
                            "max_model_len": 4096,
                        }
                    ],
                }
            },
            "/version": {"json": {"version": f"0.9.9 built in {where}"}},
        },
        "completion": {
            "sequence": [
                {"stream": good_stream(tokens=("ok", f" from {FQDN} {IP} {PATH}"))},
                {"status": 500, "json": {"error": {"message": f"CUDA error: {where}"}}},
                {"stream": [error_event]},
            ]
        },
    }


def _dcgm_labels(sim: SimHandle) -> set[str]:
    """Every UUID, Hostname and pci_bus_id label the simulated DCGM exporters serve."""
    out: set[str] = set()
    for r in sim.ready["replicas"]:
        text = httpx.get(r["dcgm_url"], timeout=10).text
        out |= set(re.findall(r'(?:UUID|Hostname|pci_bus_id)="([^"]+)"', text))
    assert any(v.startswith("GPU-") for v in out) and any("sim-node" in v for v in out)
    return out


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield str(k)
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def _contents(run_dir: Path) -> dict[str, str]:
    """Every file: its raw text, plus every string of its JSON decoded (a value written
    with escapes is found as the text it is)."""
    out = {}
    for f in sorted(run_dir.rglob("*")):
        if not f.is_file():
            continue
        raw = f.read_bytes().decode("utf-8", "replace")
        if f.name == "report.html":  # plotly.js itself (soaktop's static code) is no run data
            raw = raw.replace(plotly_bundle(), "")
        decoded: list[str] = []
        docs = [raw] if f.suffix == ".json" else raw.splitlines() if f.suffix == ".jsonl" else []
        for doc in docs:
            try:
                value = json.loads(doc)
            except ValueError:
                continue
            decoded += _strings(value)
            for s in _strings(value):  # a body kept as text may be JSON itself (SSE lines)
                for line in s.splitlines():
                    if line.startswith("data: {"):
                        decoded += _strings(json.loads(line[6:]))
        out[str(f.relative_to(run_dir))] = raw + "\n" + "\n".join(decoded)
    return out


def _leaks(run_dir: Path, private: set[str], words: set[str], ports: set[str]) -> list[str]:
    """Every private value found: substrings; host names as whole words; ports after a
    colon (``:45883``, not the JSON ``"t":45883.2``)."""
    found = []
    for name, text in _contents(run_dir).items():
        low = text.lower()
        found += [f"{name}: {v!r}" for v in private if v.lower() in low]
        found += [
            f"{name}: {w!r}"
            for w in words
            if re.search(rf"(?<![\w.-]){re.escape(w)}(?![\w-])", text, re.IGNORECASE)
        ]
        found += [
            f"{name}: port {p}" for p in ports if re.search(rf'(?<!["\d]):{p}(?![\d.])', text)
        ]
    return found


@pytest.fixture(scope="module")
def redacted_run(sim: SimHandle, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The hostile ``--redact`` run, its report, and every private value it saw."""
    tmp = tmp_path_factory.mktemp("zqalice-private")
    xdg = tmp / "xdg"
    prompts = tmp / "zqalice-prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"question {i}"}) + "\n" for i in range(8)))
    log = tmp / "zqalice-logs" / "hostile.log"
    log.parent.mkdir()
    log.write_text(f"INFO started in {PATH} on {FQDN}\n")
    out = tmp / "runs"
    env = os.environ | {"SOAKTOP_E2E_KEY": KEY, "XDG_CONFIG_HOME": str(xdg)}
    with hostile_server(_hostile_script()) as url:
        args = ["run", "--endpoint", url, "--model", MODEL, "--out", str(out), "--headless"]
        args += ["--redact", "--api-key-env", "SOAKTOP_E2E_KEY", "--prompts", str(prompts)]
        args += ["--gates", "smoke", "--probe-evidence", "all", "--no-nvml", "--max-tokens", "8"]
        args += ["--concurrency", "2", "--duration", "4", "--interval", "1"]
        args += ["--server-log", str(log), "--server-log", sim.ready["replicas"][0]["log"]]
        for r in sim.ready["replicas"]:
            args += ["--dcgm", r["dcgm_url"]]
        p = subprocess.Popen(
            [sys.executable, "-m", "soak", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env | {"PYTHONUNBUFFERED": "1"},
        )
        try:
            run_dir = wait_for_phase(out, "load", timeout=60)
            with log.open("a") as fh:  # lines the fault watch and the evidence excerpt see
                fh.write(f"ERROR NVRM: Xid (PCI:0000:ab:00): 79, pid=77, {FQDN} {IP} {PATH}\n")
                fh.write(f"ERROR CUDA error: an illegal memory access in {PATH} on {UUID}\n")
                fh.write(f"INFO {run_dir.name}/after/smoke/1 from {IP}:4242 in {PATH}\n")
            text, _ = p.communicate(timeout=150)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert p.returncode is not None and p.returncode in (0, 1), text
    code, report = run_soaktop("report", str(run_dir), timeout=120)
    assert code == 0 and (run_dir / "report.html").is_file(), report
    hostile = url.removeprefix("http://")
    private = {KEY, *PLANTED, url, hostile, str(tmp), str(prompts), str(log), str(out)}
    private |= {str(Path.home()) + "/", str(run_dir)}
    for r in sim.ready["replicas"]:
        private |= {r["url"], r["dcgm_url"], r["log"], r["url"].removeprefix("http://")}
        private.add(r["dcgm_url"].removeprefix("http://").split("/")[0])
    ports = {u.rsplit(":", 1)[1].split("/")[0] for u in private if u.startswith("http")}
    private |= _dcgm_labels(sim)
    words = {socket.gethostname(), socket.gethostname().split(".")[0]}
    return {
        "run_dir": run_dir,
        "private": private,
        "words": words,
        "ports": ports,
        "text": text,
        "xdg": xdg,
    }


def test_redact_leaves_nothing_private_in_any_file(redacted_run: dict[str, Any]) -> None:
    run_dir = redacted_run["run_dir"]
    names = set(_contents(run_dir))
    for must in ("record.json", "identity.json", "config.json", "summary.csv", "runner.log"):
        assert must in names
    for journal in ("events", "requests", "probes", "telemetry", "snapshots"):
        assert f"{journal}.jsonl" in names
    assert "report.html" in names and any(n.startswith("evidence/") for n in names)
    found = _leaks(run_dir, redacted_run["private"], redacted_run["words"], redacted_run["ports"])
    assert found == []
    assert KEY not in redacted_run["text"]


def test_redacted_values_became_pseudonyms_where_they_were(redacted_run: dict[str, Any]) -> None:
    """The run saw every planted value, and kept something comparable in its place."""
    run_dir = redacted_run["run_dir"]
    rec = record(run_dir)
    gpus = rec["identity"]["gpus"]
    assert len(gpus) == 4 and len({g["uuid"] for g in gpus}) == 4
    assert all(re.fullmatch(r"gpu-[0-9a-f]{8}", g["uuid"]) for g in gpus)
    assert len({g["host"] for g in gpus}) == 2  # two simulated nodes, two pseudonyms
    assert re.fullmatch(r"host-[0-9a-f]{8}", rec["identity"]["host"]["hostname"])
    assert rec["identity"]["model"].endswith("/llama-7b")  # the served name is kept
    assert rec["run_id"].startswith("llama-7b__")
    version = rec["identity"]["endpoints"][0]["version"]
    for shape in ("path-", "host-", "ip-", "gpu-", "pci-"):
        assert shape in version, version
    # sim-node-1 named by /version before the GPU watch ran: the same pseudonym as DCGM's
    assert any(g["host"] in version for g in gpus)
    failures = [json.loads(x) for x in (run_dir / "requests.jsonl").read_text().splitlines()]
    details = [f["detail"] for f in failures if f.get("detail")]
    assert details and all("path-" in d and "ip-" in d for d in details), details[:3]
    events = (run_dir / "events.jsonl").read_text()
    assert '"kind":"fault"' in events  # the log lines were seen (their words were not kept)
    evidence = json.loads((run_dir / "evidence" / "after-smoke-1.json").read_text())
    (excerpt,) = [x for x in evidence["server_logs"] if x["matching_request_id"]]
    assert (
        "path-" in excerpt["matching_request_id"][0] and "ip-" in excerpt["matching_request_id"][0]
    )


def test_pseudonyms_are_stable_across_runs_of_one_machine(
    sim: SimHandle, redacted_run: dict[str, Any], tmp_path: Path
) -> None:
    out = tmp_path / "runs"
    args = ["run", "--model", sim.model, "--out", str(out), "--headless", "--redact"]
    args += ["--no-gates", "--no-nvml", "--concurrency", "2", "--max-requests", "4"]
    for r in sim.ready["replicas"]:
        args += ["--endpoint", r["url"], "--dcgm", r["dcgm_url"]]
    env = os.environ | {"XDG_CONFIG_HOME": str(redacted_run["xdg"])}
    p = subprocess.run(
        [sys.executable, "-m", "soak", *args], capture_output=True, text=True, env=env, timeout=120
    )
    assert p.returncode == 0, p.stdout + p.stderr
    second = record(only_run_dir(out))["identity"]
    first = record(redacted_run["run_dir"])["identity"]

    def key(g: dict[str, Any]) -> tuple[int, int]:
        return (g["url_index"], g["index"])

    assert {key(g): g["uuid"] for g in first["gpus"]} == {key(g): g["uuid"] for g in second["gpus"]}
    assert {key(g): g["host"] for g in first["gpus"]} == {key(g): g["host"] for g in second["gpus"]}
    assert first["host"]["hostname"] == second["host"]["hostname"]
    # another machine (another salt) gets other pseudonyms for the same GPUs
    env["XDG_CONFIG_HOME"] = str(tmp_path / "other-machine")
    out2 = tmp_path / "runs2"
    args[args.index(str(out))] = str(out2)
    p = subprocess.run(
        [sys.executable, "-m", "soak", *args], capture_output=True, text=True, env=env, timeout=120
    )
    assert p.returncode == 0, p.stdout + p.stderr
    third = record(only_run_dir(out2))["identity"]
    assert not {g["uuid"] for g in third["gpus"]} & {g["uuid"] for g in first["gpus"]}


def _split_key_stream() -> list[str]:
    """One stream that echoes the key once per split position k: ``key[:k]``, ``key[k:]``."""
    out = [_chunk("@@MODEL@@", {"role": "assistant", "content": ""})]
    for k in range(1, len(KEY)):
        out += [
            _chunk("@@MODEL@@", {"content": f" k{k}=@@KEY[0:{k}]@@"}),
            _chunk("@@MODEL@@", {"content": f"@@KEY[{k}:]@@;"}),
        ]
    return out + good_stream(tokens=(" done",))[2:]  # finish, usage, [DONE]


@pytest.mark.parametrize("redact", [False, True], ids=["plain", "redact"])
def test_a_key_split_across_chunks_at_every_position_never_reaches_disk(
    tmp_path: Path, redact: bool
) -> None:
    error_event = (
        "data: " + json.dumps({"error": {"message": "bad key @@KEY[0:9]@@@@KEY[9:]@@"}}) + "\n\n"
    )
    script = {
        "completion": {
            "sequence": [
                {"stream": _split_key_stream()},
                {"status": 401, "json": {"error": {"message": "key @@KEY[:]@@ refused"}}},
                {"stream": [error_event]},
            ]
        }
    }
    out = tmp_path / "runs"
    with hostile_server(script) as url:
        args = ["run", "--endpoint", url, "--model", "hostile", "--out", str(out), "--headless"]
        args += ["--api-key-env", "SOAKTOP_E2E_KEY", "--gates", "smoke,stream-tools"]
        args += ["--probe-evidence", "all", "--no-nvml", "--concurrency", "2"]
        args += ["--max-requests", "9", "--force-load"] + (["--redact"] if redact else [])
        env = os.environ | {"SOAKTOP_E2E_KEY": KEY, "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
        p = subprocess.run(
            [sys.executable, "-m", "soak", *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=150,
        )
    assert p.returncode in (0, 1), p.stdout + p.stderr
    run_dir = only_run_dir(out)
    # the key was echoed, split, into kept evidence: the test is not empty
    evidence = [json.loads(f.read_text()) for f in (run_dir / "evidence").glob("*.json")]
    bodies = [x["response"]["body"] for doc in evidence for x in doc["exchanges"]]
    split = [b for b in bodies if " k1=" in b]
    assert split, "no evidence kept the split-key stream"
    for k in (1, len(KEY) // 2, len(KEY) - 1):
        assert all(f"k{k}=<secret>;" in "".join(_assembled(b)) for b in split)
    details = [json.loads(x).get("detail") or "" for x in (run_dir / "requests.jsonl").open()]
    # the server's words about the key were kept, the key masked (by the client or here)
    assert any("refused" in d and ("<secret>" in d or "***" in d) for d in details), details
    contents = _contents(run_dir)
    for name, text in contents.items():
        assert KEY not in text, name
        for i in range(len(KEY) - 7):
            assert KEY[i : i + 8] not in text, (name, KEY[i : i + 8])
    assert KEY not in p.stdout + p.stderr


def _assembled(body: str) -> list[str]:
    out = []
    for line in body.splitlines():
        if line.startswith("data: {"):
            for choice in json.loads(line[6:]).get("choices", []):
                out.append(choice.get("delta", {}).get("content") or "")
    return out

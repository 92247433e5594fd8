"""Server text is data, never terminal control (issue 12 §1), end to end.

One short run against the hostile server, with terminal escapes (``HOSTILE``: an OSC
that retitles the window, a CSI that clears the screen, a C1 CSI, BEL and a spreadsheet
formula) in every field a server controls: the served model id, ``owned_by``, ``/version``,
``/metrics`` label values, HTTP 500 ``error.message``, ``error`` events inside 200
streams, the gates' JSON answers and the server log's fault lines. Then every way the
run reaches an operator is checked: the headless CLI's stdout and stderr, ``summary.csv``,
``compare``, ``runs`` (text and JSON), ``verify``, ``view`` without a terminal, and the Textual
monitor in a real 80×24 tmux pane (title and screen untouched, the escape shown as
``\\x1b``). The journals must still hold the exact text, so nothing is lost for diagnosis.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from soak.record.journal import read_jsonl
from tests.e2e.conftest import only_run_dir, record
from tests.hostile_server import HOSTILE, good_stream, hostile_server
from tests.tui.helpers import tmux_keys, tmux_title, tmux_wait_for

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
MODEL = "hostile" + HOSTILE
"""The served model id itself carries the escapes (``--model`` must name it exactly)."""
LOG_LINE = f"ERROR 01-01 00:00:00 CUDA error: an illegal memory access was encountered {HOSTILE}"
VISIBLE = "\\x1b]0;PWNED-TITLE\\x07\\x1b[2J\\x9b31m"
"""How ``HOSTILE`` reads once made display-safe."""
RUN_TIMEOUT_S = 120


def _answer(content: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-hostile",
        "object": "chat.completion",
        "created": 1,
        "model": MODEL,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6},
    }


PROBE_ANSWER = json.dumps({"answer": HOSTILE})
"""What the gates' JSON probes get back: valid JSON holding the escapes."""

SCRIPT: dict[str, Any] = {
    "model": MODEL,
    "routes": {
        "/v1/models": {
            "json": {
                "object": "list",
                "data": [
                    {
                        "id": MODEL,
                        "object": "model",
                        "owned_by": HOSTILE,
                        "root": HOSTILE,
                        "max_model_len": 4096,
                    }
                ],
            }
        },
        "/version": {"json": {"version": "0.1" + HOSTILE}},
        "/metrics": {
            "text": "# TYPE vllm:cache_config_info gauge\n"
            f'vllm:cache_config_info{{block_size="16",num_gpu_blocks="100",'
            f'hostile="{HOSTILE}"}} 1.0\n'
            "# TYPE vllm:num_requests_running gauge\n"
            f'vllm:num_requests_running{{model_name="{HOSTILE}"}} 0.0\n'
        },
    },
    "completion": {
        "sequence": [
            # the chunks name a plain model: the placeholder would put raw escapes into
            # the stream's JSON, which is malformed SSE rather than a hostile string
            {"stream": good_stream("hostile"), "json": _answer(PROBE_ANSWER)},
            {
                "status": 500,
                "json": {"error": {"message": HOSTILE, "type": "InternalServerError", "code": 500}},
            },
            {"stream": good_stream("hostile"), "json": _answer(PROBE_ANSWER)},
            {
                "stream": [
                    "data: "
                    + json.dumps({"error": {"message": HOSTILE, "type": "x", "code": 500}})
                    + "\n\n"
                ],
                "json": _answer(PROBE_ANSWER),
            },
        ]
    },
}


@dataclass(frozen=True)
class HostileRun:
    """The finished run and what its CLI printed."""

    out: Path
    run_dir: Path
    returncode: int
    output: bytes
    """stdout and stderr of ``soaktop run``, as bytes."""


def _append_log(path: Path, stop: threading.Event) -> None:
    # The log is followed from its end (the run's own lines only): keep writing.
    while not stop.is_set():
        with path.open("a", encoding="utf-8") as fh:
            fh.write(LOG_LINE + "\n")
        stop.wait(0.3)


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostileRun]:
    """A 3 s load with the json gates (forced past their failure) against the server."""
    tmp = tmp_path_factory.mktemp("hostile-terminal")
    out, log = tmp / "runs", tmp / "server.log"
    stop = threading.Event()
    with hostile_server(SCRIPT) as url:
        writer = threading.Thread(target=_append_log, args=(log, stop), daemon=True)
        writer.start()
        try:
            p = subprocess.run(
                [
                    *(sys.executable, "-m", "soak", "run", "--endpoint", url, "--model", MODEL),
                    *("--out", str(out), "--headless", "--interval", "1", "--no-nvml"),
                    *("--gates", "json", "--force-load", "--probe-concurrency", "8"),
                    *("--concurrency", "4", "--duration", "3", "--drain-timeout", "5"),
                    *("--canary-interval", "0", "--server-log", str(log)),
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=os.environ | {"PYTHONUNBUFFERED": "1"},
                timeout=RUN_TIMEOUT_S,
                check=False,
            )
        finally:
            stop.set()
            writer.join(5)
    yield HostileRun(out=out, run_dir=only_run_dir(out), returncode=p.returncode, output=p.stdout)


def assert_inert(data: bytes, where: str) -> str:
    """No ESC, BEL or C1 control (raw byte or UTF-8 character) and no bidi override in
    ``data``; returns it decoded. The bytes must be UTF-8: a lone 0x9b byte is a C1 CSI."""
    text = data.decode("utf-8")  # strict: a raw C1 byte is not UTF-8
    bad = sorted(
        {
            f"U+{ord(c):04X}"
            for c in text
            if c in "\x1b\x07\x7f" or "\x80" <= c <= "\x9f" or "\u202a" <= c <= "\u202e"
        }
    )
    # repr: the failure message must not replay the escapes on the tester's terminal
    assert not bad, f"{where} emits control characters {bad}: {text[-2000:]!r}"
    return text


def _strings(obj: Any) -> Iterator[str]:
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _strings(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _strings(v)


def _holds(obj: Any, exact: str) -> bool:
    return any(exact in s for s in _strings(obj))


def _soaktop(*args: str, timeout: float = 60) -> tuple[int, bytes]:
    p = subprocess.run(
        [sys.executable, "-m", "soak", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        timeout=timeout,
        check=False,
    )
    return p.returncode, p.stdout


def test_the_headless_cli_shows_escapes_and_never_emits_them(hostile_run: HostileRun) -> None:
    text = assert_inert(hostile_run.output, "soaktop run --headless")
    assert hostile_run.returncode == 1, text[-3000:]  # the fault line and the gates fail it
    # The hostile words did reach the operator, visibly: the event lines and the verdict.
    assert f"HTTP 500: {VISIBLE}" in text
    assert f"illegal memory access was encountered {VISIBLE}" in text
    assert "FAILED  hostile-0-PWNED-TITLE" in text  # the run id is a slug of the model


def test_summary_csv_is_inert(hostile_run: HostileRun) -> None:
    text = assert_inert((hostile_run.run_dir / "summary.csv").read_bytes(), "summary.csv")
    assert VISIBLE in text  # the reasons quote the server, escaped


def test_the_journals_keep_the_exact_text(hostile_run: HostileRun) -> None:
    run_dir = hostile_run.run_dir
    for name in ("events.jsonl", "requests.jsonl", "record.json", "identity.json"):
        assert b"\x1b" not in (run_dir / name).read_bytes(), f"{name}: ESC not JSON-escaped"
    requests = list(read_jsonl(run_dir / "requests.jsonl"))
    details = {r.get("failure"): r.get("detail") or "" for r in requests}
    assert HOSTILE in details["http_5xx"]  # HTTP 500 error.message
    assert HOSTILE in details["error_event"]  # an error event inside a 200 stream
    events = list(read_jsonl(run_dir / "events.jsonl"))
    assert any(e["kind"] == "fault" and e["data"].get("line") == LOG_LINE for e in events)
    ident = json.loads((run_dir / "identity.json").read_text())
    assert ident["model"] == MODEL
    endpoint = ident["endpoints"][0]
    assert endpoint["version"] == "0.1" + HOSTILE
    assert endpoint["cache_config"]["hostile"] == HOSTILE  # a /metrics label value
    rec = record(run_dir)
    assert _holds(rec["reasons"], LOG_LINE)
    evidence = [json.loads(p.read_text()) for p in sorted((run_dir / "evidence").glob("*.json"))]
    assert evidence
    bodies = [x["response"]["body"] for e in evidence for x in e["exchanges"] if x.get("response")]
    assert PROBE_ANSWER in {_content(b) for b in bodies}  # the probe's answer, exactly


def _content(body: Any) -> str | None:
    try:
        content: str | None = json.loads(body)["choices"][0]["message"]["content"]
        return content
    except (ValueError, KeyError, IndexError, TypeError):
        return None


def test_the_reading_commands_are_inert(hostile_run: HostileRun) -> None:
    run_dir, out = str(hostile_run.run_dir), str(hostile_run.out)
    for args in (("compare", run_dir), ("runs", out), ("verify", run_dir)):
        rc, data = _soaktop(*args)
        text = assert_inert(data, "soaktop " + args[0])
        assert rc == 0, text
    # Without a terminal, view prints the verdict: the reasons quote the server, escaped.
    rc, data = _soaktop("view", run_dir)
    text = assert_inert(data, "soaktop view")
    assert rc == 0, text
    assert f"encountered {VISIBLE}" in text
    # JSON keeps the exact strings: only their spelling is \u-escaped.
    rec = record(hostile_run.run_dir)
    rc, data = _soaktop("compare", run_dir, "--json")
    assert rc == 0
    table = json.loads(assert_inert(data, "soaktop compare --json"))
    assert b"\\u009b" in data and _holds(table, MODEL)  # the model id, exactly
    assert _holds(table, LOG_LINE)
    rc, data = _soaktop("runs", out, "--json")
    assert rc == 0
    line = json.loads(assert_inert(data, "soaktop runs --json"))
    assert line["first_reason"] == rec["reasons"][0]["message"]


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_the_monitor_in_a_real_terminal_is_untouched(hostile_run: HostileRun) -> None:
    """``soaktop view`` in an 80×24 tmux pane: events pane, then an event's details."""
    session = f"soaktop-hostile-{os.getpid()}"
    # The pane titles itself first: tmux honours OSC 0 here, so a title the monitor let
    # through would show.
    command = (
        "printf '\\033]0;before-soaktop\\007'; "
        f"cd {shlex.quote(str(ROOT))} && LANG=C.UTF-8 {shlex.quote(sys.executable)} -m tui.entry "
        f"view {shlex.quote(str(hostile_run.run_dir))}; sleep 60"
    )
    subprocess.run(
        ["tmux", "new-session", "-d", "-x", "80", "-y", "24", "-s", session, command], check=True
    )
    try:
        tmux_wait_for(session, lambda s: "REPLAY" in s and "7 events" in s, 30)
        assert tmux_title(session) == "before-soaktop"
        tmux_keys(session, "7")
        events = tmux_wait_for(session, lambda s: "━7 events" in s, 10)
        rows = events.splitlines()
        first = next(i for i, r in enumerate(rows) if r.startswith("failures:")) + 1
        hostile = next(i for i, r in enumerate(rows) if "availability — HTTP 500" in r)
        # Down highlights the first row, each further Down the next one.
        tmux_keys(session, *(["Down"] * (hostile - first + 1)))
        time.sleep(0.5)
        tmux_keys(session, "Enter")
        detail = tmux_wait_for(session, lambda s: "Event: gate" in s, 10)
        assert "HTTP 500" in detail
        assert VISIBLE in detail  # the escape is shown, as text
        assert "soaktop  REPLAY" in detail.splitlines()[0]  # the screen was not cleared
        assert "q Quit" in detail.splitlines()[-1]
        assert tmux_title(session) == "before-soaktop"  # the title was not set
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], check=False)

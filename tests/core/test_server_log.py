"""Server log source: fault classification (pure), file following and command following."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import pytest

from probes.server_log import MAX_LINE_CHARS, CommandFollower, LogFollower, classify

pytestmark = pytest.mark.timeout(30)

CORE = "(EngineCore_DP0 pid=4567) ERROR 11-29 23:15:00"
API = "(APIServer pid=4501) ERROR 11-29 23:15:00"

# Line shapes as vLLM 0.32, the kernel, NCCL and torch write them (ENGINE_FACTS.md,
# REAL_VLLM_CPU.md); the summary words an operator reads in the event pane.
FAULTS = [
    (
        f"{CORE} [dump_input.py:79] torch.AcceleratorError: CUDA error: an illegal memory "
        "access was encountered",
        "cuda_illegal_memory_access",
        "critical",
        "CUDA illegal memory access",
    ),
    (
        "RuntimeError: CUDA error: an illegal memory access was encountered",
        "cuda_illegal_memory_access",
        "critical",
        "CUDA illegal memory access",
    ),
    (
        f"{CORE} [core.py:710] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
        "2.00 GiB. GPU 0 has a total capacity of 79.15 GiB of which 1.06 GiB is free.",
        "cuda_oom",
        "critical",
        "CUDA out of memory (tried to allocate 2.00 GiB) on GPU 0",
    ),
    (
        "torch.cuda.OutOfMemoryError: CUDA out of memory.",
        "cuda_oom",
        "critical",
        "CUDA out of memory",
    ),
    (
        "RuntimeError: CUDA error: device-side assert triggered",
        "cuda_error",
        "critical",
        "CUDA error: device-side assert triggered",
    ),
    (
        "[ 8812.204312] NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, "
        "GPU has fallen off the bus.",
        "xid",
        "critical",
        "Xid 79 on PCI:0000:3b:00: GPU fell off the bus",
    ),
    (
        "Nov 29 23:15:00 node1 kernel: NVRM: Xid (PCI:0000:9b:00): 119, pid=4567, "
        "name=VLLM::EngineCore0, Timeout after 6s of waiting for RPC response from GPU0 GSP!",
        "xid",
        "critical",
        "Xid 119 on PCI:0000:9b:00: GSP timeout (GPU reset needed)",
    ),
    (
        "[ 8812.204312] NVRM: Xid (PCI:0000:9b:00): 31, pid=4567, name=VLLM::EngineCore0, "
        "Ch 00000008, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted",
        "xid",
        "error",
        "Xid 31 on PCI:0000:9b:00: GPU memory page fault (illegal memory access)",
    ),
    (
        f"{CORE} [core.py:710] torch.distributed.DistBackendError: NCCL error in: "
        "../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, unhandled cuda error "
        "(run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5",
        "nccl_error",
        "critical",
        "NCCL error",
    ),
    (
        "ncclInternalError: Internal check failed.",
        "nccl_error",
        "critical",
        "NCCL error (ncclInternalError)",
    ),
    (
        "node1:4567:4890 [0] NCCL WARN NET/IB : Got completion from peer 10.0.0.2<58712> "
        "with status=12 opcode=0 len=0 vendor err 129 (Send)",
        "nccl_error",
        "critical",
        "NCCL warning: NET/IB : Got completion from peer 10.0.0.2<58712> with statu",
    ),
    (
        "[rank0]:[E1129 23:15:00.123 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught "
        "collective operation timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE) ran for 600000 "
        "milliseconds before timing out.",
        "nccl_error",
        "critical",
        "NCCL collective operation timed out",
    ),
    (
        f"{CORE} [core.py:710] EngineCore encountered a fatal error.",
        "engine_dead",
        "critical",
        "engine core hit a fatal error",
    ),
    (
        f"{API} [core_client.py:564] Engine core proc EngineCore_DP0 died unexpectedly, "
        "shutting down client.",
        "engine_dead",
        "critical",
        "engine core EngineCore_DP0 died unexpectedly",
    ),
    (
        f"{API} [async_llm.py:480] AsyncLLM output_handler failed.",
        "engine_dead",
        "critical",
        "engine output handler failed (engine dead)",
    ),
    (
        f"{API} [async_llm.py:480] vllm.v1.engine.exceptions.EngineDeadError: EngineCore "
        "encountered an issue. See stack trace (above) for the root cause.",
        "engine_dead",
        "critical",
        "engine dead",
    ),
    (
        f"{CORE} [multiproc_executor.py:149] Worker proc VllmWorker-0 died unexpectedly, "
        "shutting down executor.",
        "engine_dead",
        "critical",
        "worker VllmWorker-0 died",
    ),
    (
        f"{CORE} [multiproc_executor.py:527] WorkerProc hit an exception.",
        "engine_dead",
        "critical",
        "worker process hit an exception",
    ),
    (
        "RuntimeError: Engine process failed to start. See stack trace for the root cause.",
        "engine_dead",
        "critical",
        "engine failed to start",
    ),
    (
        "RuntimeError: Engine core initialization failed. See root cause above. "
        "Failed core proc(s): {}",
        "engine_dead",
        "critical",
        "engine failed to start",
    ),
    (
        f"{CORE} [core.py:710] RuntimeError: CPU Generator does not use offset",
        "engine_error",
        "critical",
        "engine crashed: CPU Generator does not use offset (seeded request)",
    ),
    (
        f"{CORE} [core.py:710] Traceback (most recent call last):",
        "traceback",
        "error",
        "Python traceback",
    ),
    ("Traceback (most recent call last):", "traceback", "error", "Python traceback"),
]


@pytest.mark.parametrize(("line", "kind", "severity", "summary"), FAULTS)
def test_fault_lines_are_classified(line: str, kind: str, severity: str, summary: str) -> None:
    fault = classify(line + "\n")
    assert fault is not None, line
    assert (fault.kind, fault.severity, fault.summary) == (kind, severity, summary)
    assert fault.line == line  # stripped


ORDINARY = [
    # uvicorn access lines: the status is the load client's business, not a log fault
    '(APIServer pid=4501) INFO:     127.0.0.1:51234 - "POST /v1/chat/completions HTTP/1.1" '
    "500 Internal Server Error",
    'INFO:     127.0.0.1:51234 - "GET /health HTTP/1.1" 503 Service Unavailable',
    "(APIServer pid=4501) INFO 11-29 23:15:00 [loggers.py:123] Engine 000: Avg prompt "
    "throughput: 812.4 tokens/s, Avg generation throughput: 95.1 tokens/s, Running: 8 reqs, "
    "Waiting: 24 reqs, GPU KV cache usage: 96.0%, Prefix cache hit rate: 0.0%",
    # --enable-log-requests: a prompt may quote anything, a traceback included
    "(APIServer pid=4501) INFO 11-29 23:15:00 [logger.py:39] Received request chatcmpl-1: "
    "prompt: 'Traceback (most recent call last):\\n RuntimeError: CUDA error: an illegal "
    "memory access was encountered'",
    "(EngineCore_DP0 pid=4567) INFO 11-29 23:14:40 [gpu_model_runner.py:2602] Graph capturing "
    "finished in 12 secs, took 0.52 GiB; CUDA graphs enabled",
    "(APIServer pid=4501) ERROR 11-29 23:15:00 [serving_chat.py:1030] Error in chat "
    "completion stream generator.",
    "(APIServer pid=4501) WARNING 11-29 23:15:00 [api_server.py:1] Request failed validation: "
    "max_tokens must be at least 1",
    # NCCL's warnings about optional plugins on a healthy start, and its INFO chatter
    "node1:4567:4567 [0] NCCL WARN NET/Plugin: Could not find: libnccl-net.so. Using internal "
    "network plugin.",
    "node1:4567:4567 [0] NCCL WARN Failed to open libibverbs.so[.1]",
    "node1:4567:4567 [0] NCCL INFO NET/Plugin: Failed to find ncclNetPlugin_v8 symbol.",
    "",
    "   ",
]


@pytest.mark.parametrize("line", ORDINARY)
def test_ordinary_lines_are_not_faults(line: str) -> None:
    assert classify(line) is None


def test_fault_line_is_bounded() -> None:
    line = "Traceback (most recent call last):" + " x" * 5000
    fault = classify(line)
    assert fault is not None and fault.kind == "traceback"
    assert len(fault.line) == MAX_LINE_CHARS and fault.line.endswith("…")


# --- LogFollower ---------------------------------------------------------------------------


def append(path: Path, text: str) -> None:
    with path.open("a", encoding="utf-8") as f:
        f.write(text)


def test_follower_starts_at_end_and_returns_appended_lines(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.write_text("old 1\nold 2\n")
    f = LogFollower(log)
    assert f.poll() == []
    append(log, "new 1\nnew 2\n")
    assert f.poll() == ["new 1", "new 2"]
    assert f.poll() == []
    f.close()
    append(log, "after close\n")
    assert f.poll() == []


def test_follower_from_start(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.write_text("old 1\r\nold 2\n")
    f = LogFollower(log, start_at_end=False)
    assert f.poll() == ["old 1", "old 2"]


def test_partial_line_waits_for_its_newline(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.write_text("")
    f = LogFollower(log)
    append(log, "complete\nEngineCore encountered ")
    assert f.poll() == ["complete"]
    assert f.poll() == []
    append(log, "a fatal error.\n")
    line = f.poll()
    assert line == ["EngineCore encountered a fatal error."]
    assert classify(line[0]) is not None


def test_truncation_restarts_at_the_start(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.write_text("a long first line before the truncation\n")
    f = LogFollower(log)
    log.write_text("")  # truncate in place (copytruncate rotation)
    append(log, "x\n")
    assert f.poll() == ["x"]
    assert f.reopened == 1
    append(log, "y\n")
    assert f.poll() == ["y"]


def test_rename_and_recreate_rotation(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.write_text("")
    f = LogFollower(log)
    append(log, "1\n")
    assert f.poll() == ["1"]
    append(log, "2\n")  # written before the rotation, not yet read
    log.rename(tmp_path / "vllm.log.1")
    log.write_text("3\n")
    assert f.poll() == ["2", "3"]  # the old file's rest first, then the new file
    assert f.reopened == 1
    append(log, "4\n")
    assert f.poll() == ["4"]


def test_file_removed_then_created_again(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.write_text("")
    f = LogFollower(log)
    log.unlink()
    assert f.poll() == []
    log.write_text("back\n")
    assert f.poll() == ["back"]


def test_file_created_after_the_follower_started(tmp_path: Path) -> None:
    log = tmp_path / "later" / "vllm.log"
    f = LogFollower(log)  # start_at_end: nothing to skip yet
    assert f.poll() == []
    log.parent.mkdir()
    assert f.poll() == []
    log.write_text("first\nsecond\n")
    assert f.poll() == ["first", "second"]


def test_per_poll_byte_bound(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.write_text("")
    f = LogFollower(log, max_bytes_per_poll=100)
    append(log, "".join(f"line {i:04d}\n" for i in range(50)))  # 10 bytes each: 500 bytes
    got = [f.poll() for _ in range(6)]
    assert [len(g) for g in got] == [10, 10, 10, 10, 10, 0]
    assert [line for g in got for line in g] == [f"line {i:04d}" for i in range(50)]


def test_byte_bound_across_rotation(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.write_text("")
    f = LogFollower(log, max_bytes_per_poll=30)
    append(log, "a" * 9 + "\n" + "b" * 9 + "\n" + "c" * 9 + "\n" + "d" * 9 + "\n")
    log.rename(tmp_path / "vllm.log.1")
    log.write_text("e" * 9 + "\n")
    assert f.poll() == ["a" * 9, "b" * 9, "c" * 9]
    assert f.poll() == ["d" * 9, "e" * 9]


def test_a_line_without_newline_is_cut_not_held_forever(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.write_text("")
    f = LogFollower(log, max_line_bytes=1000)
    append(log, "z" * 2500)
    assert f.poll() == ["z" * 1000, "z" * 1000]
    append(log, "\n")
    assert f.poll() == ["z" * 500]


# --- CommandFollower -----------------------------------------------------------------------


def live_members(pgid: int) -> list[int]:
    """Pids in the process group that still run. Zombies do not count: an orphan's is
    reaped by init whenever init gets to it (here, up to ~2 s later)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()  # after "(comm)": state, ppid, pgrp, ...
        if int(fields[2]) == pgid and fields[0] != "Z":
            pids.append(int(entry.name))
    return pids


async def group_gone(pgid: int, within_s: float = 1.0) -> bool:
    deadline = time.monotonic() + within_s
    while live_members(pgid):
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.02)
    return True


async def test_command_lines_stderr_merged_and_exit_code() -> None:
    cmd = CommandFollower(["sh", "-c", "echo a; echo b >&2; sleep 0.2; printf c; exit 3"])
    await cmd.start()
    got = [line async for line in cmd.lines()]
    assert got == ["a", "b", "c"]  # the last line had no newline
    assert cmd.ended and cmd.returncode == 3 and cmd.error is None
    assert cmd.exit_message == "server log command 'sh' exited with code 3"


async def test_command_poll_drains_what_arrived() -> None:
    cmd = CommandFollower(["sh", "-c", "echo a; echo b >&2; sleep 0.2; echo c"])
    await cmd.start()
    assert await cmd.wait() == 0
    assert cmd.poll() == ["a", "b", "c"]
    assert cmd.poll() == []
    assert cmd.exit_message == "server log command 'sh' exited with code 0"


async def test_command_that_cannot_start_ends_with_a_reason() -> None:
    cmd = CommandFollower(["/nonexistent/docker", "logs", "-f", "vllm"])
    await cmd.start()
    assert cmd.ended and cmd.returncode is None
    assert cmd.exit_message is not None and "could not start" in cmd.exit_message
    assert [line async for line in cmd.lines()] == []


async def test_close_stops_a_long_command_and_its_children() -> None:
    # sh stays the parent of sleep (two commands), so the group matters
    cmd = CommandFollower(["sh", "-c", "echo up; sleep 30; echo never"])
    await cmd.start()
    assert cmd.pid is not None
    async for line in cmd.lines():
        assert line == "up"
        break
    assert not cmd.ended
    t0 = time.monotonic()
    await cmd.close()
    assert time.monotonic() - t0 < 1.5
    assert cmd.ended and cmd.returncode == -signal.SIGTERM
    assert await group_gone(cmd.pid)  # sh and its child, sleep
    assert cmd.exit_message == "server log command 'sh' was killed by signal 15 on close"


async def test_close_kills_a_command_that_ignores_sigterm() -> None:
    cmd = CommandFollower(["sh", "-c", "trap '' TERM; echo up; sleep 30"])
    await cmd.start()
    async for _ in cmd.lines():
        break
    t0 = time.monotonic()
    await cmd.close(grace_s=0.3)
    assert time.monotonic() - t0 < 2.0
    assert cmd.returncode == -signal.SIGKILL
    assert cmd.pid is not None
    assert await group_gone(cmd.pid)


async def test_lines_wait_for_output() -> None:
    cmd = CommandFollower(["sh", "-c", "sleep 0.2; echo late"])
    await cmd.start()
    assert cmd.poll() == []
    got = await asyncio.wait_for(anext(cmd.lines()), 5)
    assert got == "late"
    await cmd.close()

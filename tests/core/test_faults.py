"""The record's one timeline of faults, relative to the load's start."""

from typing import Any

from soak.record.faults import faults_from_events, when


def test_when_says_how_far_into_the_load():
    assert when(1037.4, 15.0) == "at load+00:17:02"
    assert when(11.0, 15.0) == "at load-00:00:04"
    assert when(3725.0, 0.0) == "at load+01:02:05"
    assert when(16.34, None) == "at 16.3 s"


def _ev(
    kind: str, t: float, message: str, severity: str = "critical", **data: Any
) -> dict[str, Any]:
    return {
        "t": t,
        "wall": "",
        "kind": kind,
        "severity": severity,
        "message": message,
        "data": data,
    }


def test_faults_from_every_source_in_one_list_with_load_relative_times():
    events = [
        _ev("phase", 5.0, "load", "info", phase="load"),
        # GPU sources say when they read the value (t_s), which wins over the event's t
        _ev("fault", 16.4, "GPU 1: Xid 31", source="dcgm", gpu=1, xid=31, fault="xid", t_s=16.34),
        _ev(
            "fault",
            17.3,
            "endpoint 1 log: CUDA illegal memory access",
            replica=1,
            fault="cuda_illegal_memory_access",
        ),
        _ev("health", 18.0, "endpoint 1 /health: connection refused", "error", endpoint=1),
        _ev("health", 30.0, "endpoint 1 /health: ok again", "info", endpoint=1),
        _ev("restart", 31.0, "endpoint 1 restarted", endpoint=1, t_s=31.0),
        _ev(
            "fault",
            32.0,
            "GPU 0: Xid 45 (ignored)",
            "warning",
            source="nvml",
            gpu=0,
            xid=45,
            fault="xid",
            ignored=True,
        ),
    ]
    faults = faults_from_events(events, load_start_s=5.0)
    assert [(f["source"], f["kind"], f["time_s"]) for f in faults] == [
        ("gpu (dcgm)", "xid", 11.34),
        ("server log", "cuda_illegal_memory_access", 12.3),
        ("health", "endpoint_down", 13.0),
        ("engine metrics", "restart", 26.0),
        ("gpu (nvml)", "xid", 27.0),
    ]
    assert faults[0] == {
        "time_s": 11.34,
        "t_s": 16.34,
        "source": "gpu (dcgm)",
        "kind": "xid",
        "severity": "critical",
        "detail": "GPU 1: Xid 31",
        "gpu": 1,
        "xid": 31,
        "incident": 1,  # schema 1.3: the Xid and the CUDA error it caused are one fault
    }
    assert [f["incident"] for f in faults] == [1, 1, 2, 3, 4]
    assert faults[1]["replica"] == 1 and faults[-1]["ignored"] is True
    # no load ran: times stay since the run's start only
    assert faults_from_events(events, None)[0]["time_s"] is None

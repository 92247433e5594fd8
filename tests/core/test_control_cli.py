"""``soaktop control RUN_DIR --rate R | --concurrency N``: appends a ``set`` line for a
live runner, refuses everything else with a message naming the field and the value."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from soak.cli.main import main

LiveDir = tuple[Path, dict[str, object]]


@pytest.fixture
def live_dir(tmp_path: Path) -> Iterator[tuple[Path, dict[str, object]]]:
    """A run directory whose runner.pid names a live process that looks like a runner
    (its command line holds ``soak.run.runner``, which is what the check reads)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", "soak.run.runner"]
    )
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    config: dict[str, object] = {"arrival": "poisson", "rate": 20.0}
    (run_dir / "runner.pid").write_text(f"{proc.pid}\n")
    (run_dir / "config.json").write_text(json.dumps(config))
    yield run_dir, config
    proc.kill()
    proc.wait()


def _control(run_dir: Path, *args: str) -> int:
    return main(["control", str(run_dir), *args])


def _lines(run_dir: Path) -> list[dict[str, object]]:
    path = run_dir / "control.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def test_rate_is_appended_for_a_live_open_loop(
    live_dir: LiveDir, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir, _ = live_dir
    assert _control(run_dir, "--rate", "30", "--note", "scout") == 0
    assert _lines(run_dir) == [{"cmd": "set", "rate": 30.0, "note": "scout"}]
    assert "rate 30" in capsys.readouterr().out


def test_concurrency_for_a_closed_loop(live_dir: LiveDir) -> None:
    run_dir, _ = live_dir
    (run_dir / "config.json").write_text(json.dumps({"arrival": "closed", "concurrency": 32}))
    assert _control(run_dir, "--concurrency", "48") == 0
    assert _lines(run_dir) == [{"cmd": "set", "concurrency": 48, "note": ""}]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--rate", "0"], "--rate: 0.0 is not allowed; a rate above 0 and at most 100000"),
        (["--rate", "nan"], "--rate: nan is not allowed"),
        (["--concurrency", "8"], "this run is an open loop (--arrival poisson); use --rate R"),
    ],
)
def test_bad_targets_are_refused_by_name(
    live_dir: LiveDir, capsys: pytest.CaptureFixture[str], args: list[str], words: str
) -> None:
    run_dir, _ = live_dir
    assert _control(run_dir, *args) == 2
    assert words in capsys.readouterr().err
    assert _lines(run_dir) == []


def test_a_rate_for_a_closed_loop_is_refused(
    live_dir: LiveDir, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir, _ = live_dir
    (run_dir / "config.json").write_text(json.dumps({"arrival": "closed"}))
    assert _control(run_dir, "--rate", "30") == 2
    assert "closed loop (--arrival closed); use --concurrency N" in capsys.readouterr().err
    (run_dir / "config.json").write_text(json.dumps({"arrival": "closed"}))
    assert _control(run_dir, "--concurrency", "0") == 2
    assert "--concurrency: 0 is not allowed; a whole number from 1 to 100,000" in (
        capsys.readouterr().err
    )


def test_both_at_once_is_a_usage_error(
    live_dir: LiveDir, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir, _ = live_dir
    with pytest.raises(SystemExit) as e:
        _control(run_dir, "--rate", "30", "--concurrency", "4")
    assert e.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err
    assert _lines(run_dir) == []


def test_a_run_that_is_over_is_refused(
    live_dir: LiveDir, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    run_dir, _ = live_dir
    (run_dir / "record.json").write_text("{}")
    assert _control(run_dir, "--rate", "30") == 2
    assert "is finished (its record.json is written)" in capsys.readouterr().err
    (run_dir / "record.json").unlink()
    (run_dir / "runner.pid").write_text("1\n")  # init: alive, but no soaktop runner
    assert _control(run_dir, "--rate", "30") == 2
    assert "is not running" in capsys.readouterr().err
    assert _lines(run_dir) == []
    assert _control(tmp_path / "nowhere", "--rate", "30") == 2
    assert "does not exist" in capsys.readouterr().err

"""Session-wide test options.

``--no-real-engine`` (or ``SOAKTOP_SKIP_REAL_ENGINE=1``) skips the tests marked
``real_engine`` — the tier that starts a real vLLM on the CPU (tests/real_engine). They run
by default; a skip is always reported with its reason (``make test`` passes ``-rs``) and in
the session header, never silent.

Under ``CI=true`` a test skipped because a tool it needs is missing (Chromium, tmux, Ray,
a built ``llama-server``: a reason saying "not installed" or "not built") fails instead:
CI installs every one of them, so such a skip there means the set-up broke, and a green
run would hide the checks it never ran.
"""

from __future__ import annotations

import os
import re
from collections.abc import Generator

import pytest

SKIP_ENV = "SOAKTOP_SKIP_REAL_ENGINE"
MISSING_TOOL = re.compile(r"\bnot (installed|built)\b", re.IGNORECASE)
"""A skip reason that says a tool the suite needs is absent."""


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, None]:
    """Under CI, a skip for a missing tool is a failure (see the module's docstring)."""
    outcome = yield
    report = outcome.get_result()
    if not (report.skipped and _in_ci()) or not isinstance(report.longrepr, tuple):
        return
    reason = str(report.longrepr[2])
    if MISSING_TOOL.search(reason):
        report.outcome = "failed"
        report.longrepr = f"CI=true and this test was skipped for a missing tool: {reason}"


@pytest.fixture(autouse=True)
def _no_terminal_size_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test sees the terminal size soaktop falls back to, wherever pytest runs.

    pytest-xdist's workers (``make check``) run with ``COLUMNS=80 LINES=24`` set, and a
    developer's shell may export them too; tables sized by ``shutil.get_terminal_size``
    (``soaktop runs``) would then be cut where a serial run under pytest's capture
    (no terminal: the 160-column fallback) is not. A test about the width sets it itself.
    """
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("LINES", raising=False)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--no-real-engine",
        action="store_true",
        default=False,
        help=f"skip the real vLLM tier (tests marked real_engine); same as {SKIP_ENV}=1",
    )


def _skip_reason(config: pytest.Config) -> str | None:
    if config.getoption("--no-real-engine"):
        return "real vLLM tier skipped by --no-real-engine"
    if os.environ.get(SKIP_ENV, "").strip() not in ("", "0"):
        return f"real vLLM tier skipped by {SKIP_ENV}={os.environ[SKIP_ENV]}"
    return None


def pytest_report_header(config: pytest.Config) -> str:
    reason = _skip_reason(config)
    return f"real-engine tier: {'OFF — ' + reason if reason else 'on (real vLLM on the CPU)'}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = _skip_reason(config)
    if reason is None:
        return
    skip = pytest.mark.skip(reason=reason)
    for item in items:
        if item.get_closest_marker("real_engine") is not None:
            item.add_marker(skip)

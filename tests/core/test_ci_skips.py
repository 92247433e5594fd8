"""Under CI, a test skipped for a missing tool fails (tests/conftest.py); elsewhere it skips.

A green CI run that skipped the browser, tmux, Ray or llama-server checks would claim
checks it never ran (issue 18 §5)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

CONFTEST = Path(__file__).resolve().parents[1] / "conftest.py"
TESTS = """
import pytest

@pytest.mark.skipif(True, reason="headless Chromium not installed (apt-get install -y chromium)")
def test_needs_a_browser():
    pass

def test_not_for_this_platform():
    pytest.skip("FIONREAD on Linux")
"""


@pytest.fixture
def suite(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(CONFTEST.read_text())
    pytester.makepyfile(test_tools=TESTS)
    return pytester


def test_a_missing_tool_fails_under_ci(
    suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CI", "true")
    result = suite.runpytest_subprocess("-rs", "-p", "no:cacheprovider")
    result.assert_outcomes(skipped=1, errors=1)
    result.stdout.fnmatch_lines(["*CI=true and this test was skipped for a missing tool*"])
    assert result.ret != 0


def test_a_missing_tool_skips_with_its_reason_elsewhere(
    suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CI", raising=False)
    result = suite.runpytest_subprocess("-rs", "-p", "no:cacheprovider")
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines(["*headless Chromium not installed*"])
    assert result.ret == 0

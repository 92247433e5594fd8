"""A short soak against a real vLLM: what a user reads in the run directory."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import journal, only_run_dir, record, run_soaktop
from tests.real_engine.conftest import assert_healthy_soak_verdict, logged_requests, soak_args

pytestmark = [pytest.mark.real_engine, pytest.mark.timeout(600)]

MAX_TOKENS = 64


@pytest.mark.parametrize("workers", [8, 32])
def test_short_soak(vllm_logged, tmp_path, workers):
    srv = vllm_logged
    out = tmp_path / "runs"
    rc, text = run_soaktop(
        *soak_args(
            srv,
            out,
            "--concurrency",
            str(workers),
            "--duration",
            "20",
            "--max-tokens",
            str(MAX_TOKENS),
            "--ignore-eos",
        ),
        timeout=300,
    )
    run_dir = only_run_dir(out)
    rec = record(run_dir)
    lines = journal(run_dir)
    load = rec["load"]
    # PASSED, or a verdict that the record explains consistently with the journal.
    try:
        assert_healthy_soak_verdict(rc, rec, lines)
    except AssertionError as e:
        raise AssertionError(f"{e}\nexit {rc}: {rec['reasons']}\n{text[-3000:]}") from None

    assert load["workers_started"] == load["requested_concurrency"] == workers
    assert load["barrier_released"] is True
    ok = [r for r in lines if r["ok"]]
    assert load["completed"] == len(ok) > 0
    assert all(r["output_tokens"] == MAX_TOKENS for r in ok), {r["output_tokens"] for r in ok}
    assert all(r["finish"] == "length" for r in ok)
    assert load["output_tokens"] == MAX_TOKENS * len(ok)

    ident = rec["identity"]
    assert ident["engine"] == "vllm" and ident["model_served"] is True
    ep = ident["endpoints"][0]
    assert ep["version"].startswith("0.32"), ep["version"]
    assert ep["token_slots"] > 0

    # The server's counters grew by exactly what the client's journal holds.
    recon = rec["reconciliation"]
    assert recon["matched"] is True, recon
    assert recon["load"]["generation_tokens"]["server"] == MAX_TOKENS * len(ok)
    engine = rec["telemetry"]["engines"][0]
    assert engine["engine"] == "vllm" and 0 < engine["running_max"] <= workers

    rc_v, out_v = run_soaktop("verify", str(run_dir))
    assert rc_v == 0, out_v

    # What reached the server: every journaled request, under the id soaktop sent, with no
    # per-request seed (a seed under load crashes the CPU engine, see test_engine_death).
    logged = logged_requests(srv.log_text())
    missing = [r["id"] for r in lines if r["id"] not in logged]
    assert not missing, f"{len(missing)} request ids not in {srv.log_path}: {missing[:3]}"
    for r in lines:
        params = logged[r["id"]]
        assert params["seed"] == "None", (r["id"], params)
        assert params["max_tokens"] == str(MAX_TOKENS) and params["ignore_eos"] == "True"

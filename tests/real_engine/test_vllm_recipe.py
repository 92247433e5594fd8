"""The recipe a real vLLM states (issue 15 §1), and the sampling flags it receives.

The tier's servers run with ``VLLM_SERVER_DEV_MODE=1`` (``vllm_server.SERVER_ENV``), so
``/server_info`` answers; the cache facts come from ``vllm:cache_config_info`` as well.
"""

from __future__ import annotations

import pytest

from tests.e2e.conftest import journal, only_run_dir, record, run_soaktop
from tests.real_engine.conftest import logged_requests, soak_args

pytestmark = [pytest.mark.real_engine, pytest.mark.timeout(600)]


def test_identity_states_the_recipe_and_sampling_reaches_the_engine(vllm_logged, tmp_path):
    srv = vllm_logged
    out = tmp_path / "runs"
    extra = ["--max-requests", "3", "--concurrency", "1", "--max-tokens", "8"]
    extra += ["--temperature", "0.5", "--top-p", "0.9", "--top-k", "20"]
    extra += ["--repetition-penalty", "1.05", "--recipe", "revision=test-rev"]
    rc, text = run_soaktop(*soak_args(srv, out, *extra), timeout=300)
    run_dir = only_run_dir(out)
    rec = record(run_dir)
    assert rec["load"]["completed"] == 3, (rc, rec["reasons"], text[-2000:])
    ident = rec["identity"]
    (ep,) = ident["endpoints"]
    assert ep["recipe_sources"] == ["/metrics vllm:cache_config_info", "/server_info"]
    facts = ep["recipe"]
    assert facts["max_model_len"] == "2048"  # the tier's --max-model-len
    assert facts["dtype"] == "float32"
    assert facts["model_root"] == ep["models"][0]["root"]
    assert facts["max_num_seqs"].isdigit() and facts["tensor_parallel_size"] == "1"
    assert int(facts["token_slots"]) == ep["token_slots"] > 0
    assert 0 < float(facts["gpu_memory_utilization"]) <= 1
    assert ident["recipe"]["declared"] == {"revision": "test-rev"}
    logged = logged_requests(srv.log_text())
    for r in journal(run_dir):
        params = logged[r["id"]]
        assert params["temperature"] == "0.5" and params["top_p"] == "0.9", params
        assert params["top_k"] == "20" and params["repetition_penalty"] == "1.05", params
        assert params["seed"] == "None", params

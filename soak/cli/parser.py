"""The ``soaktop`` argument parser: every subcommand, flag and ``--help`` text.

The flags shared by ``run`` and ``demo`` map one to one onto
:class:`soak.run.config.RunConfig` fields; their help is the field's docstring and its
range in words (:func:`soak.run.config_words.allowed`), so ``--help``, the error messages
and the README say the same. The command handlers are in :mod:`soak.cli.main`.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from soak import __version__
from soak.record.recipe import parse_declared
from soak.run.config import RunConfig
from soak.run.config_words import allowed


def _recipe_item(text: str) -> tuple[str, str]:
    """``revision=abc123`` → its key and value; a usage error naming the item and what is
    allowed otherwise."""
    try:
        ((key, value),) = parse_declared([text]).items()
    except ValueError as e:
        why = str(e)
        raise argparse.ArgumentTypeError(
            why if why.startswith("--recipe") else f"--recipe {_short(text)}: {why}"
        ) from None
    return key, value


# CLI flag → RunConfig field, for the flags shared by `run` and `demo`.
_COMMON_FLAGS: dict[str, dict[str, Any]] = {
    "--concurrency": {"type": int, "dest": "concurrency"},
    "--arrival": {"dest": "arrival", "metavar": "closed|constant|poisson|gamma|trace:FILE"},
    "--rate": {"type": float, "dest": "rate", "metavar": "R"},
    "--burstiness": {"type": float, "dest": "burstiness", "metavar": "CV"},
    "--max-in-flight": {"type": int, "dest": "max_in_flight", "metavar": "N"},
    "--arrival-seed": {"type": int, "dest": "arrival_seed", "metavar": "N"},
    "--time-scale": {"type": float, "dest": "time_scale", "metavar": "X"},
    "--stages": {"dest": "stages", "metavar": "D:T,..."},
    "--sweep": {"dest": "sweep", "metavar": "rate=R,...|concurrency=N,..."},
    "--step-duration": {"type": float, "dest": "step_duration_s", "metavar": "S"},
    "--settle": {"type": float, "dest": "settle_s", "metavar": "S"},
    "--slo": {"dest": "slo", "metavar": "ttft<2s,..."},
    "--duration": {"type": float, "dest": "duration_s", "metavar": "S"},
    "--max-requests": {"type": int, "dest": "max_requests"},
    "--max-tokens": {"type": int, "dest": "max_tokens"},
    "--ca-cert": {"type": Path, "dest": "ca_cert", "metavar": "PEM"},
    "--client-cert": {"type": Path, "dest": "client_cert", "metavar": "PEM"},
    "--client-key": {"type": Path, "dest": "client_key", "metavar": "PEM"},
    "--max-tokens-field": {
        "dest": "max_tokens_field",
        "choices": ["max_tokens", "max_completion_tokens"],
    },
    "--ignore-eos": {"action": "store_const", "const": True, "dest": "ignore_eos"},
    "--no-sanity": {"action": "store_const", "const": False, "dest": "sanity_checks"},
    "--prompts": {"type": Path, "dest": "prompts", "metavar": "FILE"},
    "--synthetic-input-tokens": {"type": int, "dest": "synthetic_input_tokens", "metavar": "N"},
    "--mix": {"type": Path, "dest": "mix", "metavar": "FILE"},
    "--turns": {"type": int, "dest": "turns", "metavar": "K"},
    "--think-time": {"dest": "think_time_s", "metavar": "S"},
    "--shards": {"dest": "shards", "metavar": "N"},  # a text: N or "auto"
    "--ray": {"dest": "ray", "metavar": "HOST:PORT"},
    "--pool-seed": {"type": int, "dest": "pool_seed"},
    "--label": {"dest": "label"},
    "--purpose": {"dest": "purpose"},
    "--out": {"type": Path, "dest": "out", "metavar": "DIR"},
    "--drain-timeout": {"type": float, "dest": "drain_timeout_s", "metavar": "S"},
    "--max-failures": {"type": int, "dest": "max_failures"},
    "--percentile-method": {"dest": "percentile_method", "choices": ["nearest-rank", "linear"]},
    "--interval": {"type": float, "dest": "interval_s", "metavar": "S"},
    "--headless": {"action": "store_const", "const": True, "dest": "headless"},
    "--metrics-port": {"type": int, "dest": "metrics_port", "metavar": "PORT"},
    "--metrics-host": {"dest": "metrics_host", "metavar": "ADDR"},
    "--redact": {"action": "store_const", "const": True, "dest": "redact"},
    "--gates": {
        "type": lambda v: [s.strip() for s in v.split(",") if s.strip()],
        "dest": "gates",
        "metavar": "SUITE,...",
    },
    "--no-gates": {"action": "store_const", "const": [], "dest": "gates"},
    "--suite": {"type": Path, "action": "append", "dest": "suite_files", "metavar": "FILE"},
    "--force-load": {"action": "store_const", "const": True, "dest": "force_load"},
    "--probe-retries": {"type": int, "dest": "probe_retries", "metavar": "N"},
    "--probe-concurrency": {"type": int, "dest": "probe_concurrency", "metavar": "N"},
    "--probe-timeout": {"type": float, "dest": "probe_timeout_s", "metavar": "S"},
    "--probe-expected": {"action": "store_const", "const": True, "dest": "probe_expected"},
    "--probe-evidence": {"dest": "probe_evidence", "choices": ["failures", "all"]},
    "--canary-interval": {"type": float, "dest": "canary_interval_s", "metavar": "S"},
    "--canary-tasks": {"type": int, "dest": "canary_tasks", "metavar": "N"},
    "--threshold": {"action": "append", "dest": "thresholds", "metavar": "EXPR"},
    "--server-log": {"type": Path, "action": "append", "dest": "server_log", "metavar": "PATH"},
    "--server-log-cmd": {"action": "append", "dest": "server_log_cmd", "metavar": "CMD"},
    "--dcgm": {"action": "append", "dest": "dcgm", "metavar": "URL"},
    "--no-nvml": {"action": "store_const", "const": False, "dest": "nvml"},
    "--reconcile": {"dest": "reconcile", "choices": ["report", "strict"]},
    "--matrix": {"dest": "matrix", "metavar": "SPEC"},
    "--reasoning": {"dest": "reasoning_effort", "metavar": "LEVEL"},
    "--ignore-xid": {
        "type": lambda v: _int_list(v, "Xid codes such as 45,43"),
        "action": "extend",
        "dest": "ignore_xid",
        "metavar": "N[,N]",
    },
    "--server-pid": {"type": int, "action": "append", "dest": "server_pid", "metavar": "PID"},
    "--telemetry-interval": {"type": float, "dest": "telemetry_interval_s", "metavar": "S"},
    "--require-telemetry": {"dest": "require_telemetry", "metavar": "KIND,..."},
    "--max-client-cpu": {"type": float, "dest": "max_client_cpu_percent", "metavar": "PCT"},
    "--max-client-behind": {"type": float, "dest": "max_client_behind", "metavar": "SHARE"},
    "--max-loop-lag": {"type": float, "dest": "max_loop_lag_s", "metavar": "S"},
    "--window": {"type": int, "dest": "series_window_s", "metavar": "S"},
    "--warmup": {"dest": "warmup", "metavar": "S|Nreq"},
    "--soak-policy": {"dest": "soak_policy", "choices": ["default", "none"]},
    "--temperature": {"type": float, "dest": "temperature", "metavar": "T"},
    "--top-p": {"type": float, "dest": "top_p", "metavar": "P"},
    "--top-k": {"type": int, "dest": "top_k", "metavar": "K"},
    "--min-p": {"type": float, "dest": "min_p", "metavar": "P"},
    "--presence-penalty": {"type": float, "dest": "presence_penalty", "metavar": "X"},
    "--frequency-penalty": {"type": float, "dest": "frequency_penalty", "metavar": "X"},
    "--repetition-penalty": {"type": float, "dest": "repetition_penalty", "metavar": "X"},
    "--recipe": {
        "type": _recipe_item,
        "action": "append",
        "dest": "recipe",
        "metavar": "KEY=VALUE",
    },
    "--server-cmd-file": {"type": Path, "dest": "server_cmd_file", "metavar": "FILE"},
}


def _int_list(text: str, what: str) -> list[int]:
    """``45,43`` → [45, 43]; anything else is a usage error naming the value."""
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{_short(text)} is not a list of {what}") from None


def _short(text: str) -> str:
    """The operator's text, quoted and bounded (a 10,000-digit number is not echoed)."""
    return repr(text) if len(text) <= 80 else f"{text[:60]!r}… ({len(text)} characters)"


def _number(kind: type[int] | type[float], what: str) -> Callable[[str], int | float]:
    """An argparse ``type`` that says what is allowed when the text is not a number (the
    range itself is the config's check, which names the field and the bounds)."""
    noun = "a whole number" if kind is int else "a number"

    def parse(text: str) -> int | float:
        try:
            return kind(text)
        except ValueError:  # also Python's 4,300-digit limit on int()
            raise argparse.ArgumentTypeError(
                f"{_short(text)} is not {noun} (allowed: {what})"
            ) from None

    return parse


def _bounded(
    kind: type[int] | type[float], lo: float, hi: float, what: str
) -> Callable[[str], int | float]:
    """An argparse ``type`` for a flag that is not a config field (display, demo)."""
    parse = _number(kind, what)

    def check(text: str) -> int | float:
        v = parse(text)
        if not (math.isfinite(v) and lo <= v <= hi):
            raise argparse.ArgumentTypeError(f"{_short(text)} is out of range (allowed: {what})")
        return v

    return check


# Display flags: the monitor's, never part of the run's configuration.
_DISPLAY_FLAGS: dict[str, dict[str, Any]] = {
    "--theme": {
        "help": "monitor theme: dark, light, high-contrast, ansi or a user theme "
        "(default: $SOAKTOP_THEME or dark)"
    },
    "--ascii": {
        "action": "store_const",
        "const": True,
        "help": "no Unicode box, bar or chart glyphs (default: auto from the locale)",
    },
    "--refresh": {
        "type": _bounded(float, 0.1, 60, "a number of seconds from 0.1 to 60"),
        "dest": "refresh_s",
        "metavar": "S",
        "help": "monitor refresh interval, 0.1 to 60 s (raise it on slow links; default 0.5)",
    },
}


def _field_help(dest: str) -> str | None:
    f = RunConfig.model_fields.get(dest)
    if f is None:
        return None
    if f.annotation is bool:
        return f.description
    return f"{f.description} Allowed: {allowed(dest)}."


_FLAG_HELP = {
    "--no-gates": "run no contract gates (same as --gates '')",
    "--no-nvml": "do not read this host's GPUs through NVML",
    "--recipe": f"{_field_help('recipe')} Repeat for several; each overrides that key of "
    "the config file's [recipe] table.",
}


def _add_common(p: argparse.ArgumentParser) -> None:
    for flag, kw in _COMMON_FLAGS.items():
        if kw.get("type") in (int, float):
            kw = kw | {"type": _number(kw["type"], allowed(kw["dest"]))}
        p.add_argument(flag, default=None, help=_FLAG_HELP.get(flag, _field_help(kw["dest"])), **kw)
    _add_display(p)


_RUN_FLAGS = {
    "endpoints": "--endpoint",
    "model": "--model",
    "api": "--api",
    "engine": "--engine",
    "api_key_env": "--api-key-env",
    "headers": "--header",
}


def cli_flags() -> dict[str, str]:
    """Config field → the flag that sets it, so a configuration error names the flag."""
    out = dict(_RUN_FLAGS)
    for flag, kw in _COMMON_FLAGS.items():
        out.setdefault(kw["dest"], flag)
    return out


def _add_display(p: argparse.ArgumentParser) -> None:
    for flag, kw in _DISPLAY_FLAGS.items():
        p.add_argument(flag, default=None, **kw)


def _add_demo(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``soaktop demo``: the run flags and the simulated engine's own."""
    demo = sub.add_parser("demo", help="soak the built-in simulated engine")
    demo.add_argument(
        "--scenario",
        default="healthy",
        choices=sorted(_scenarios()),
        help="fault scenario of the simulated engine",
    )
    demo.add_argument(
        "--scenario-at",
        type=_bounded(float, 0, 86400, "seconds from 0 to 86400"),
        metavar="S",
        help="seconds into the load at which the scenario strikes or begins (default: "
        "slow-leak and throughput-decay 30, garbage-after 40, at most half the load; "
        "the others half the load)",
    )
    demo.add_argument(
        "--seed",
        type=_bounded(int, 0, 2**31 - 1, "a whole number from 0 to 2147483647"),
        help="seed of the simulated engine's answers and noise (default 0)",
    )
    demo.add_argument(
        "--replicas",
        type=_bounded(int, 1, 64, "a whole number from 1 to 64"),
        default=2,
        help="replicas of the simulated engine, 1 to 64 (default 2)",
    )
    demo.add_argument(
        "--gpus-per-replica",
        type=_bounded(int, 1, 16, "a whole number from 1 to 16"),
        default=4,
        help="simulated GPUs per replica, 1 to 16 (default 4)",
    )
    _add_common(demo)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (also the CLI reference in the README)."""
    ap = argparse.ArgumentParser(
        prog="soaktop", description="Soak monitor for LLM serving engines."
    )
    ap.add_argument("--version", action="version", version=f"soaktop {__version__}")
    sub = ap.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="soak an OpenAI-compatible endpoint")
    run.add_argument(
        "--endpoint",
        action="append",
        dest="endpoints",
        metavar="URL",
        help=f"{_field_help('endpoints')} Repeat for several replicas.",
    )
    run.add_argument("--model", help=_field_help("model"))
    run.add_argument("--api", choices=["chat", "completions", "responses"], help=_field_help("api"))
    run.add_argument("--engine", help=_field_help("engine"))
    run.add_argument(
        "--api-key-env", dest="api_key_env", metavar="VAR", help=_field_help("api_key_env")
    )
    run.add_argument(
        "--header",
        action="append",
        dest="headers",
        metavar="'NAME: VALUE'",
        help=f"{_field_help('headers')} Repeat for several; 'NAME: env:VAR' keeps a secret "
        "off the command line.",
    )
    run.add_argument(
        "--config",
        type=Path,
        metavar="TOML",
        help="TOML file with a [run] table (CLI > SOAKTOP_* env > file > defaults)",
    )
    _add_common(run)

    _add_demo(sub)

    # Listed for --help only: main() hands `sim ...` to the simulated engine's own parser.
    sub.add_parser("sim", help="run the simulated engine (see: soaktop sim --help)")

    attach = sub.add_parser("attach", help="re-open the monitor of a run that goes on")
    attach.add_argument("run_dir", type=Path)
    _add_display(attach)
    view = sub.add_parser("view", help="replay a finished run in the monitor")
    view.add_argument("run_dir", type=Path)
    _add_display(view)

    from soak.cli.decide import add_parser as add_decide

    add_decide(sub)
    from soak.cli.reports import add_parsers as add_report_parsers

    add_report_parsers(sub)
    from soak.cli.scout import add_parser as add_scout  # after `run`: it takes run's flags

    add_scout(sub)
    from soak.cli.outputs import add_parsers as add_outputs  # after `scout`: run's only

    add_outputs(sub)
    from soak.cli.serve import add_parser as add_serve  # after `scout`: run's --serve is not its

    add_serve(sub)
    from soak.cli.control import add_parser as add_control

    add_control(sub)

    verify = sub.add_parser("verify", help="recompute a record from its journals")
    verify.add_argument("run_dir", type=Path)
    recover = sub.add_parser("recover", help="write the record of a runner that died")
    recover.add_argument("run_dir", type=Path)
    return ap


def _scenarios() -> dict[str, str]:
    from soak.cli.demo import SCENARIOS

    return SCENARIOS


def cli_values(ns: argparse.Namespace) -> dict[str, Any]:
    """The config fields the command line gave (``None``: not given), by field name."""
    keys = {kw["dest"] for kw in _COMMON_FLAGS.values()} | {
        "endpoints",
        "model",
        "api",
        "engine",
        "api_key_env",
        "headers",
    }
    values = {k: getattr(ns, k) for k in keys if hasattr(ns, k)}
    if values.get("recipe") is not None:  # --recipe items, in order: a later key wins
        values["recipe"] = dict(values["recipe"])
    return values

"""``soaktop scout``: a whole A/B/A from one command.

::

    soaktop scout --arm original="./switch.sh orig" --arm candidate="./switch.sh cand" \\
        --endpoint URL --model M --matrix "input=6000,25000 concurrency=1,4 reps=3 requests=4" \\
        [every run flag] [--order aba|ababa|random:K --seed N] [--min-gain 10%] \\
        [--min-wins N|all] [--allow-restoration-drift] [--switch-timeout 600] \\
        [--arm-recipe ARM:KEY=VALUE] [--arm-server-cmd-file ARM:FILE] [--json]

For every step of the order (:mod:`soak.cli.scout_plan`): switch the servers to the arm
and wait until they serve the model (:mod:`soak.run.scout_switch`), check who they are
(:mod:`soak.cli.scout_checks`: a restored original must be the original, before its
load), then run the matrix — a normal ``soaktop run`` in its own runner process, followed
in the monitor or by status lines — into ``<out>/<scout id>/<n>-<arm>/``. At the end each
bracketing triple is decided with ``soaktop decide``'s rule and the scout writes
``scout.json``, ``decision.md`` and prints the decision (:mod:`soak.cli.scout_result`).

One :class:`RunConfig` is built from the flags, once; each arm's run is a copy that
differs only in its label, its output folder and its declared recipe, so every arm runs
the same matrix, gates, sampling and thresholds.

A run that aborts, or whose runner cannot start, stops the scout (what ran is kept and
summarised); a FAILED or INVALID run does not (``decide`` caveats it), so a candidate
that broke the server is still followed by the switch back to the original. Ctrl-C stops
the current run cleanly (its record is written) or the current switch, then the scout
writes its summary. Exit codes: 0 a decision was made (promote or retain), 2 refused or
a usage error (nothing ran), 1 an arm could not run.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from soak.cli.scout_plan import ScoutPlan, ScoutPlanError, Step, build_plan
from soak.cli.scout_result import (
    EXIT_ARM_FAILED,
    EXIT_REFUSED,
    ArmFacts,
    ScoutSummary,
    StepResult,
    combine,
    decide_triple,
    now_iso,
    render_scout,
)
from soak.record.models import EXIT_USAGE, Identity, RunRecord, Status
from soak.record.redact import Redactor
from soak.run.config import ConfigError, RunConfig
from soak.run.config_words import format_validation_error
from soak.safe_text import safe_json, safe_line


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``scout`` with every flag of ``run`` (registered before it) and its own."""
    from soak.cli.decide import parse_gain, parse_wins
    from soak.cli.scout_plan import DEFAULT_SWITCH_TIMEOUT_S

    p = sub.add_parser(
        "scout",
        parents=[sub.choices["run"]],  # the same run flags, so every arm runs alike
        add_help=False,  # run's -h is inherited (and prints this parser's help)
        help="a whole A/B/A: switch the server to each arm, run the matrix, decide",
        description=(
            "Run the original, the candidate and the original restored (or an interleaved "
            "order), switching the servers with each arm's command, with the same matrix, "
            "gates and thresholds; check that the restored original is the original; then "
            "decide as soaktop decide does. Exit 0 when a decision was made, 2 when it was "
            "refused (or for a usage error), 1 when an arm could not run."
        ),
    )
    p.add_argument(
        "--arm",
        action="append",
        metavar="NAME=COMMAND",
        help="an arm and the shell command that switches the servers to it; twice: the "
        "original first, the candidate second",
    )
    p.add_argument(
        "--order",
        default="aba",
        help="a = original, b = candidate: aba (default), ababa, abaaba, … (every b between "
        "two a), or random:K with --seed N",
    )
    p.add_argument("--seed", type=int, metavar="N", help="draws a --order random:K order")
    p.add_argument(
        "--min-gain",
        type=parse_gain,
        default=0.10,
        metavar="PCT",
        help="as soaktop decide: how much lower the candidate's median E2E must be than "
        "each control (default 10%%)",
    )
    p.add_argument(
        "--min-wins", type=parse_wins, default=1, metavar="N|all", help="as soaktop decide"
    )
    p.add_argument(
        "--allow-restoration-drift",
        action="store_true",
        help="go on when a restored original does not match the original (decide then "
        "caveats it and does not promote)",
    )
    p.add_argument(
        "--switch-timeout",
        type=float,
        default=DEFAULT_SWITCH_TIMEOUT_S,
        metavar="S",
        help="how long one switch command plus the wait for /health and the model may "
        f"take (default {DEFAULT_SWITCH_TIMEOUT_S:g})",
    )
    p.add_argument(
        "--arm-recipe",
        action="append",
        default=[],
        metavar="ARM:KEY=VALUE",
        help="a recipe fact declared for one arm only (e.g. candidate:kv_cache_dtype=fp8)",
    )
    p.add_argument(
        "--arm-server-cmd-file",
        action="append",
        default=[],
        metavar="ARM:FILE",
        help="one arm's exact launch command (attached scrubbed to its runs' identity, "
        "instead of --server-cmd-file)",
    )
    p.add_argument(
        "--json", action="store_true", help="print scout.json (run progress goes to stderr)"
    )
    p.set_defaults(handler=cmd_scout)


def _arm_configs(
    base: RunConfig, plan: ScoutPlan, label_given: bool, scout_dir: Path
) -> dict[int, RunConfig]:
    """Each step's configuration: the base with the arm's label, folder and recipe."""
    out: dict[int, RunConfig] = {}
    dumped = base.model_dump()
    for step in plan.steps():
        label = f"{base.label[: 63 - len(step.arm)]}-{step.arm}" if label_given else step.arm
        update: dict[str, Any] = {
            "label": label,
            "out": scout_dir / f"{step.n}-{step.arm}",
            "recipe": base.recipe | plan.arm(step.arm).recipe,
            "server_cmd_file": plan.arm(step.arm).server_cmd_file or base.server_cmd_file,
        }
        try:
            out[step.n] = RunConfig.model_validate(dumped | update)
        except ValidationError as e:  # the field, the value and what is allowed, in words
            origins = {"server_cmd_file": "--arm-server-cmd-file / --server-cmd-file"}
            raise ConfigError(
                f"arm {step.arm}: {format_validation_error(e, origins=origins)}"
            ) from None
    return out


def _load_base(ns: argparse.Namespace) -> RunConfig:
    from soak.cli.parser import cli_flags, cli_values
    from soak.record.matrix import parse_matrix
    from soak.run.config_load import load_config

    cfg = load_config(cli_values(ns), toml_path=ns.config, cli_flags=cli_flags())
    if not cfg.matrix:
        raise ConfigError(
            "--matrix is required: a scout runs the matrix profile in every arm "
            '(e.g. --matrix "input=6000,25000 concurrency=1,4 reps=3 requests=4")'
        )
    cells = len(parse_matrix(cfg.matrix).cells())
    if ns.min_wins is not None and ns.min_wins > cells:
        raise ConfigError(f"--min-wins {ns.min_wins}: the matrix has only {cells} cells")
    return cfg


def cmd_scout(ns: argparse.Namespace) -> int:
    """``soaktop scout``."""
    try:
        base = _load_base(ns)
        plan = build_plan(
            ns.arm,
            order=ns.order,
            seed=ns.seed,
            min_gain=ns.min_gain,
            min_wins=ns.min_wins,
            arm_recipe=ns.arm_recipe,
            arm_server_cmd_file=ns.arm_server_cmd_file,
            allow_restoration_drift=ns.allow_restoration_drift,
            switch_timeout_s=ns.switch_timeout,
        )
        _arm_configs(base, plan, ns.label is not None, base.out / "x")  # checked, not made
    except (ConfigError, ScoutPlanError) as e:
        print(f"soaktop scout: configuration error:\n{e}", file=sys.stderr)
        return EXIT_USAGE
    from loadgen import tls

    try:  # the switches' readiness waits and probes verify as the runs do (--ca-cert)
        tls.configure(tls.TlsFiles.of(base))
    except tls.TlsError as e:
        print(f"soaktop scout: {e}", file=sys.stderr)
        return EXIT_USAGE
    red = _redactor(base)
    try:
        scout_dir, summary = _start(base, plan, red)
    except OSError as e:
        print(f"soaktop scout: cannot create the scout's directory in {base.out}: {e}",
              file=sys.stderr)  # fmt: skip
        return EXIT_USAGE
    configs = _arm_configs(base, plan, ns.label is not None, scout_dir)
    with _progress_to_stderr(ns.json):
        print(f"soaktop scout: {summary.scout_id}\n         dir {scout_dir}", flush=True)
        Scout(ns, plan, configs, summary, scout_dir, red).run()
    if ns.json:
        print(safe_json(summary.json_bytes(red).decode()), end="")
    else:
        print(render_scout(summary, markdown=False), end="")
        print(f"scout directory: {safe_line(scout_dir)}")
    return int(summary.exit_code if summary.exit_code is not None else EXIT_ARM_FAILED)


def _redactor(cfg: RunConfig) -> Redactor:
    """What every file of the scout passes through: the API key always, and with
    ``--redact`` every private value, pseudonymised as the runs do (the machine's salt)."""
    from soak.run.redaction import load_salt, run_redactor

    salt = load_salt()[0] if cfg.redact else None
    return run_redactor(cfg, _secrets(cfg), salt)


def _start(base: RunConfig, plan: ScoutPlan, red: Redactor) -> tuple[Path, ScoutSummary]:
    """Create the scout's directory and its first ``scout.json``."""
    from datetime import UTC, datetime

    from soak.run.redaction import run_id_model
    from soak.run.runid import create_run_dir
    from soak.run.scout_switch import scrub_secrets

    stamp = datetime.now(UTC).strftime("%m%d-%H%M%S")
    shown = run_id_model(red, base.model)
    name = "".join(c if c.isalnum() or c in "._-" else "-" for c in shown)[:64]
    scout_dir, scout_id = create_run_dir(
        base.out, f"scout__{name}__{plan.original.name}-vs-{plan.candidate.name}__{stamp}"
    )
    summary = ScoutSummary(
        scout_id=scout_id,
        scout_dir=str(scout_dir),
        started_at=now_iso(),
        arms=[
            ArmFacts(name=a.name, command=scrub_secrets(a.command, _secrets(base)), recipe=a.recipe)
            for a in (plan.original, plan.candidate)
        ],
        order=plan.order,
        order_asked=plan.order_asked,
        seed=plan.seed,
        matrix=base.matrix or "",
        min_gain_pct=100 * plan.min_gain,
        min_wins=plan.min_wins,
        allow_restoration_drift=plan.allow_restoration_drift,
        switch_timeout_s=plan.switch_timeout_s,
    )
    summary.write(scout_dir, red)
    return scout_dir, summary


def _secrets(cfg: RunConfig) -> list[str]:
    """The secrets among the run's headers (``loadgen.headers.secret_values``)."""
    from loadgen.headers import secret_values

    return secret_values(cfg.headers, _headers(cfg))


def _headers(cfg: RunConfig) -> dict[str, str]:
    """The headers the runs send (``--header`` and ``--api-key-env``): the switch's
    readiness wait and identity probe send them too, as the engine may require them."""
    from loadgen.headers import run_headers

    return run_headers(cfg.headers, cfg.api_key_env, os.environ)


@contextlib.contextmanager
def _progress_to_stderr(enabled: bool) -> Iterator[None]:
    """With ``--json`` stdout holds only the JSON: the runs' status lines (printed to
    file descriptor 1 by the followers) go to stderr meanwhile."""
    if not enabled:
        yield
        return
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


class _Interrupted(Exception):
    """A signal arrived between runs (during a switch or a wait)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)


def _raise_interrupt(signum: int, _frame: object) -> None:
    raise _Interrupted(signum)


class Scout:
    """One scout's steps, in order; the summary is rewritten after each."""

    def __init__(
        self,
        ns: argparse.Namespace,
        plan: ScoutPlan,
        configs: dict[int, RunConfig],
        summary: ScoutSummary,
        scout_dir: Path,
        red: Redactor,
    ) -> None:
        self.ns, self.plan, self.configs = ns, plan, configs
        self.summary, self.scout_dir, self.red = summary, scout_dir, red
        self.reference: Identity | None = None
        """The first original's servers, probed right after its switch."""
        self.records: dict[int, RunRecord] = {}
        self.dirs: dict[int, str] = {}

    def run(self) -> None:
        """Every step until one stops the scout, then the decision."""
        refused = False
        for step in self.plan.steps():
            result = StepResult(n=step.n, arm=step.arm, role=step.role)
            self.summary.steps.append(result)
            self._step(step, result)
            self.summary.write(self.scout_dir, self.red)
            if result.problem is not None:
                print(f"soaktop scout: stopped at step {step.n} ({step.arm}): "
                      f"{safe_line(result.problem)}", file=sys.stderr, flush=True)  # fmt: skip
                refused = bool(result.restoration_mismatches)
                break
        self._decide(refused)

    def _step(self, step: Step, result: StepResult) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, _raise_interrupt)
        try:
            if not self._switch(step, result):
                return
            self._run(step, result)
        except _Interrupted as e:
            result.problem = f"interrupted ({e}) before the run; what ran is kept"
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                signal.signal(
                    sig, signal.SIG_DFL if sig != signal.SIGINT else signal.default_int_handler
                )

    def _switch(self, step: Step, result: StepResult) -> bool:
        """Switch to the step's arm and check who the servers are; False: stop."""
        from soak.cli.scout_checks import (
            candidate_unchanged,
            probed_identity,
            restoration_before_load,
        )
        from soak.record.recipe import recipe_facts
        from soak.run.scout_switch import SwitchError, switch_to

        cfg = self.configs[step.n]
        log = self.scout_dir / f"switch-{step.n}-{step.arm}.log"
        result.switch_log = log.name
        print(f"soaktop scout: step {step.n}: switching to {step.arm} ({step.role})", flush=True)
        try:
            done = switch_to(
                self.plan.arm(step.arm).command,
                log,
                endpoints=cfg.endpoints,
                model=cfg.model,
                headers=_headers(cfg),
                engine=cfg.engine,
                timeout_s=self.plan.switch_timeout_s,
                clean=self.red.file_text,
                title=f"step {step.n}: switch to {step.arm} ({step.role})",
            )
        except SwitchError as e:
            result.problem = str(e)
            return False
        result.switch_command_s, result.ready_s = done.command_s, done.ready_s
        ident = probed_identity(cfg.model, done.endpoints, cfg.recipe)
        result.stated = recipe_facts(ident)
        if step.role == "original" or self.reference is None:
            self.reference = ident
            result.identity_check = "the reference: the original's servers as first switched"
        elif step.role == "restored":
            check = restoration_before_load(self.reference, ident)
            result.identity_check = check.summary()
            result.restoration_checked = check.checked
            result.restoration_mismatches = check.mismatches
            result.restoration_unchecked = check.unchecked
            if not check.matched and not self.plan.allow_restoration_drift:
                result.problem = (
                    "the restored original is not the original (refused before its load; "
                    "--allow-restoration-drift goes on): " + "; ".join(check.mismatches)
                )
                return False
            if not check.matched:
                result.warnings.append(
                    "restoration drifted (allowed): " + "; ".join(check.mismatches)
                )
        elif (why := candidate_unchanged(self.reference, ident)) is not None:
            result.warnings.append(why)
        for w in result.warnings:
            print(f"soaktop scout: warning: {safe_line(w)}", file=sys.stderr, flush=True)
        if result.identity_check and step.role == "restored":
            print(f"soaktop scout: {safe_line(result.identity_check)}", flush=True)
        return True

    def _run(self, step: Step, result: StepResult) -> None:
        """The arm's matrix run, followed to its end."""
        from soak.cli.main import frontend_for, launch
        from soak.record.run_dir import RunDirError, load_run_record

        cfg = self.configs[step.n]
        rc, run_dir = launch(cfg, detach_on_hup=False, ui=frontend_for(self.ns, cfg.headless))
        result.exit_code = rc
        if run_dir is None:
            result.problem = f"the runner did not start (exit {rc}); nothing was run"
            return
        result.run_dir, result.run_id = self._relative(run_dir), run_dir.name
        try:
            rec = load_run_record(run_dir)
        except RunDirError as e:
            result.problem = f"the run left no readable record: {e}"
            return
        result.status = rec.status.value
        if rec.status is Status.ABORTED:
            why = rec.reasons[0].message if rec.reasons else "no reason recorded"
            result.problem = f"the run was aborted: {why}"
            return
        self.records[step.n], self.dirs[step.n] = rec, self._relative(run_dir)

    def _relative(self, path: Path) -> str:
        """``path`` as scout.json holds it: relative to the scout directory (which can then
        be moved whole), or as given when it lies elsewhere."""
        try:
            return str(path.resolve().relative_to(self.scout_dir.resolve()))
        except ValueError:
            return str(path)

    def _decide(self, refused: bool) -> None:
        """Decide every complete triple; the scout's decision; scout.json, decision.md."""
        triples = self.plan.triples()
        self.summary.triples = [
            decide_triple(self.plan, t, self.records, self.dirs)
            for t in triples
            if all(n in self.records for n in (t.before, t.candidate, t.restored))
        ]
        decision, outcome, code = combine(self.summary.triples, len(triples))
        stopped = next((s for s in self.summary.steps if s.problem), None)
        if refused and stopped is not None:
            decision, code = "refused", EXIT_REFUSED
            outcome = f"refused at step {stopped.n} ({stopped.arm}): {stopped.problem}"
        elif stopped is not None and decision != "refused":
            decision, code = "incomplete", EXIT_ARM_FAILED
            outcome = (
                f"incomplete: step {stopped.n} ({stopped.arm}) could not run: {stopped.problem}"
            )
            if stopped.role == "candidate":
                outcome += (
                    f"; the servers may still be on the candidate: switch back with "
                    f"{self.summary.arms[0].command!r}"
                )
        self.summary.decision, self.summary.outcome, self.summary.exit_code = (
            decision,
            outcome,
            code,
        )
        self.summary.ended_at = now_iso()
        self.summary.write(self.scout_dir, self.red)
        from soak.record.models import write_atomic

        md = self.red.file_text(render_scout(self.summary, markdown=True))
        write_atomic(self.scout_dir / "decision.md", md.encode())

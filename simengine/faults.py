"""Fault rules, named scenarios and the book that decides which request a fault hits.

A rule matches a request by its ``X-Request-Id`` (soaktop sends one on every request,
shaped ``<run_id>/<phase>/<kind>/<n>``) with an fnmatch glob, and/or fires at a time
counted from the first request of the ``load`` phase (the simulator does not know the
load window, so that request is its only clock). One :class:`FaultBook` is shared by all
replicas of a process, so a ``count`` is global: ``count: 1`` hits exactly one request.

Actions come in three groups:

- availability faults of one request: ``http_500``, ``http_503``, and the mid-stream
  ``stall``, ``reset``, ``error_event`` and ``malformed``;
- contract faults of one request (:data:`CONTRACT_ACTIONS`): the answer arrives with HTTP
  200 and consistent usage, but breaks the structured-output or tool-call contract:
  ``json_control_char``, ``json_invalid``, ``tool_wrong_function``, ``tool_bad_arguments``;
- replica/GPU faults: ``xid`` and ``engine_death``.
"""

from __future__ import annotations

import fnmatch
import time
from collections.abc import Callable
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from simengine.contract import JSON_FAULTS, TOOL_FAULTS

FaultAction = Literal[
    "http_500",
    "http_503",
    "stall",
    "reset",
    "error_event",
    "malformed",
    "json_control_char",
    "json_invalid",
    "tool_wrong_function",
    "tool_bad_arguments",
    "xid",
    "engine_death",
]

#: Actions that change what one answer says, decided when its output is planned:
#: ``json_control_char`` puts a raw control character inside a string of the JSON content;
#: ``json_invalid`` cuts the JSON content off mid-value and still finishes with "stop";
#: ``tool_wrong_function`` calls another of the request's tools (a made-up one when it has
#: only one); ``tool_bad_arguments`` sends arguments that parse but break the parameters
#: schema (a required key missing).
CONTRACT_ACTIONS = JSON_FAULTS | TOOL_FAULTS

#: Actions that change one request's response (the others act on a replica or a GPU).
REQUEST_ACTIONS = (
    frozenset({"http_500", "http_503", "stall", "reset", "error_event", "malformed"})
    | CONTRACT_ACTIONS
)

SCENARIO_NOTES = {
    "healthy": "no faults",
    "post-load-500": "HTTP 500 on the first after-load JSON probe",
    "broken-contracts": "HTTP 200 answers that break the contract in every probe phase: a "
    "raw control character in JSON task 3, JSON cut short in task 11, tool task 2 with a "
    "required argument missing",
    "xid-mid-run": "Xid 31 on GPU 1 of replica 1, --scenario-at s into load",
    "engine-death": "replica 1's engine dies --scenario-at s into load",
    "slow-leak": "from --scenario-at s into load (default 30): KV blocks leak (0.4 %/s of "
    "the cache, never given back), the process holds 4 MB/s more memory (up to 512 MB), "
    "FB_USED follows, and each prefill waits 5 ms longer per second (TTFT creeps up)",
    "throughput-decay": "from --scenario-at s into load (default 30): every decode step "
    "takes 1.5 %/s longer (up to 4x): ITL grows, output tok/s falls",
    "garbage-after": "from --scenario-at s into load (default 40): 90 % of plain-text "
    "answers degenerate with HTTP 200 and honest usage: a looping phrase, runaway "
    "whitespace or a tiny output",
}
"""What each named scenario does (shown by ``python -m simengine --help``). The curves
of slow-leak, throughput-decay and garbage-after, and the noise of ``--noise``, are in
:mod:`simengine.endurance`."""
SCENARIOS = tuple(SCENARIO_NOTES)

SCENARIO_ONSET_S = {
    "xid-mid-run": 30.0,
    "engine-death": 30.0,
    "slow-leak": 30.0,
    "throughput-decay": 30.0,
    "garbage-after": 40.0,
}
"""Each timed scenario's onset, in seconds after the first load request, when
``--scenario-at`` is not given."""
ENDURANCE_SCENARIOS = frozenset({"slow-leak", "throughput-decay", "garbage-after"})
"""Scenarios that degrade slowly from their onset instead of firing a fault rule."""


def probe_globs(suite: str, n: int, phase: str = "*") -> list[str]:
    """Globs for probe task ``n`` of a suite, its canary rounds and retries included.

    soaktop's probe ids are ``<run>/<phase>/<suite>/<n>``, ``<n>.<round>`` in canary
    rounds and ``<n>.r<k>`` for retries; ``*/json/3`` alone would miss those, and
    ``*/json/3*`` would also hit task 31.
    """
    base = f"*/{phase}/{suite}/{n}"
    return [base, base + ".*"]


class FaultRule(BaseModel):
    """One fault to inject. Give ``match``, ``at_s`` or both."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    match: str | None = None
    """fnmatch glob on the X-Request-Id header, e.g. ``*/after/json/7`` or ``*/load/*``."""
    at_s: float | None = Field(default=None, ge=0)
    """Seconds after the first ``load``-phase request. Replica/GPU actions fire then, once;
    request actions are armed then and hit the next matching requests."""
    action: FaultAction
    """What happens: an HTTP error, a mid-stream fault, a broken JSON or tool-call answer,
    an Xid on a GPU, or engine death."""
    after_tokens: int = Field(default=0, ge=0)
    """Mid-stream actions (stall, reset, error_event, malformed) strike after this many
    output tokens were sent."""
    stall_s: float = Field(default=30.0, ge=0)
    """How long a stall sends no bytes."""
    xid: int = 31
    """Xid number for the ``xid`` action (31: GPU memory page fault, illegal memory access)."""
    gpu: int = Field(default=0, ge=0)
    """Replica-local GPU index for the ``xid`` action."""
    replica: int | None = Field(default=None, ge=0)
    """Replica the rule applies to. Request rules: None = any replica. Time-only replica/GPU
    actions: None = replica 0. An index past the last replica falls back to replica 0."""
    count: int | None = Field(default=1, ge=0)
    """How many times the rule may fire in this process; 0 or None = without limit."""


def scenario_rules(name: str, at_s: float) -> list[FaultRule]:
    """The rules of a named scenario (``healthy`` has none)."""
    if name == "healthy" or name in ENDURANCE_SCENARIOS:
        return []  # the endurance scenarios act through simengine.endurance, not rules
    if name == "post-load-500":
        # The first after-load JSON probe gets an HTTP 500: one availability failure that
        # must fail the run even after a clean load.
        return [FaultRule(match="*/after/json/*", action="http_500", count=1)]
    if name == "broken-contracts":
        # HTTP 200 answers that break the contract, in every probe phase and every
        # canary round or retry: a raw control character in JSON task 3 (what real
        # xgrammar let through), JSON cut short in task 11, bad arguments in tool task 2.
        hits: list[tuple[str, int, FaultAction]] = [
            ("json", 3, "json_control_char"),
            ("json", 11, "json_invalid"),
            ("tools", 2, "tool_bad_arguments"),
        ]
        return [
            FaultRule(match=glob, action=action, count=0)
            for suite, n, action in hits
            for glob in probe_globs(suite, n)
        ]
    if name == "xid-mid-run":
        return [FaultRule(at_s=at_s, action="xid", xid=31, gpu=1, replica=1)]
    if name == "engine-death":
        return [FaultRule(at_s=at_s, action="engine_death", replica=1)]
    raise ValueError(f"unknown scenario {name!r}; choose one of {', '.join(SCENARIOS)}")


def request_phase(request_id: str | None) -> str | None:
    """The phase segment of a soaktop X-Request-Id (``<run_id>/<phase>/<kind>/<n>``)."""
    if not request_id:
        return None
    parts = request_id.split("/")
    return parts[-3] if len(parts) >= 4 else None


class _RuleState:
    __slots__ = ("fired", "rule", "timed_done")

    def __init__(self, rule: FaultRule) -> None:
        self.rule = rule
        self.fired = 0
        self.timed_done = False

    def exhausted(self) -> bool:
        limit = self.rule.count
        return bool(limit) and self.fired >= (limit or 0)


#: Called for a replica/GPU action: (action rule, replica index, why) -> None.
ReplicaActionHook = Callable[[FaultRule, int, str], None]


class FaultBook:
    """Shared fault state: which rules are left, and when the load phase began."""

    def __init__(self, rules: list[FaultRule], n_replicas: int, keep_clock: bool = False) -> None:
        """``keep_clock``: start the load clock even without a timed rule (the endurance
        scenarios and the noise run on it)."""
        self._states = [_RuleState(r) for r in rules]
        self._n_replicas = n_replicas
        self._has_match = any(r.match is not None for r in rules)
        self._has_timed = keep_clock or any(r.at_s is not None for r in rules)
        self.load_started_at: float | None = None
        self._hook: ReplicaActionHook | None = None

    @property
    def rules(self) -> list[FaultRule]:
        """All rules, in the order given."""
        return [s.rule for s in self._states]

    def set_replica_hook(self, hook: ReplicaActionHook) -> None:
        """Register the callback that carries out xid / engine_death on a replica."""
        self._hook = hook

    def target_replica(self, rule: FaultRule, default: int) -> tuple[int, str]:
        """The replica a replica/GPU action hits, and a note when it had to fall back."""
        want = default if rule.replica is None else rule.replica
        if want >= self._n_replicas:
            return 0, (
                f"rule targets replica {want} but only {self._n_replicas} replica(s) run; "
                "using replica 0"
            )
        return want, ""

    def note_request(self, request_id: str | None) -> None:
        """Start the fault clock at the first ``load``-phase request."""
        if self.load_started_at is None and self._has_timed and request_phase(request_id) == "load":
            self.load_started_at = time.monotonic()

    def elapsed_since_load(self) -> float | None:
        """Seconds since the first load request, or None before it."""
        if self.load_started_at is None:
            return None
        return time.monotonic() - self.load_started_at

    def match_request(self, request_id: str | None, replica: int) -> FaultRule | None:
        """The request action (if any) that hits this request; consumes one ``count``.

        Replica/GPU actions matched by a request fire through the hook right here and do
        not alter the request itself.
        """
        if not self._has_match and not self._has_timed:
            return None
        self.note_request(request_id)
        elapsed = self.elapsed_since_load()
        hit: FaultRule | None = None
        for st in self._states:
            rule = st.rule
            if st.exhausted():
                continue
            if rule.match is None and (rule.action not in REQUEST_ACTIONS):
                continue  # time-only replica actions fire from tick()
            if rule.match is not None and not fnmatch.fnmatchcase(request_id or "", rule.match):
                continue
            if rule.at_s is not None and (elapsed is None or elapsed < rule.at_s):
                continue
            if rule.replica is not None and rule.action in REQUEST_ACTIONS:
                target, _ = self.target_replica(rule, 0)
                if target != replica:
                    continue
            st.fired += 1
            if rule.action in REQUEST_ACTIONS:
                if hit is None:
                    hit = rule
                else:
                    st.fired -= 1  # one request action per request; keep it for the next
            elif self._hook is not None:
                target, note = self.target_replica(rule, replica)
                self._hook(rule, target, note or f"matched request {request_id}")
        return hit

    def tick(self) -> None:
        """Fire due time-only replica/GPU actions (call about every 100-250 ms)."""
        elapsed = self.elapsed_since_load()
        if elapsed is None or self._hook is None:
            return
        for st in self._states:
            rule = st.rule
            if rule.at_s is None or rule.match is not None or rule.action in REQUEST_ACTIONS:
                continue
            if st.timed_done or elapsed < rule.at_s:
                continue
            st.timed_done = True
            st.fired += 1
            target, note = self.target_replica(rule, 0)
            self._hook(rule, target, note or f"at {rule.at_s:g} s into load")

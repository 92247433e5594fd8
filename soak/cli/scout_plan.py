"""The plan of ``soaktop scout``: two arms, the order they run in, the decision's rule.

A scout measures a candidate against the original it would replace. Every candidate run
must be **bracketed**: an original run right before it and one right after it (seed 004:
"Each experiment ran original → candidate → restored original"), so a drift of the
machine between the two controls shows up as their disagreement instead of as the
candidate's gain. The order is written with ``a`` for the original and ``b`` for the
candidate:

- ``aba`` (the default): one bracketing triple;
- an explicit interleaving such as ``ababa`` (two triples sharing the middle original) or
  ``abaaba`` (two triples, each with its own controls): it must start and end with ``a``
  and never put two ``b`` side by side;
- ``random:K`` with ``--seed N``: K candidate runs; between two consecutive triples the
  seed draws whether they share one original run (``…b a b…``) or each get their own
  (``…b a a b…``), so no fixed rhythm of the machine lines up with the candidate. The
  seed only ever adds or shares original runs: it cannot move a candidate run out of its
  brackets, and the same seed gives the same order.

The decision is made per triple (the original run before, the candidate, the original
run after) with ``soaktop decide``'s rule, then combined conservatively: promote only
when every triple promotes; a triple that cannot be decided (a refusal) makes the scout a
refusal; otherwise the original is retained.

Everything here is checked before anything runs: a bad value is a
:class:`ScoutPlanError` naming the flag and the value.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from soak.record.recipe import check_declared

ARM_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,31}$")
"""An arm's name: part of its run's label and directory (letters, digits, ``_.-``)."""
MAX_COMMAND = 4096
"""A switch command's length limit (a command line, not a script: point at a script)."""
MAX_CANDIDATE_RUNS = 10
"""At most this many candidate runs in one scout (21 runs at the most)."""
DEFAULT_SWITCH_TIMEOUT_S = 600.0
"""How long a switch command plus the wait for the endpoints may take by default."""

Role = Literal["original", "candidate", "restored"]
"""What a step measures: the first original run (the reference every later original is
checked against), a candidate run, or any later original run (the original switched back
to: the restored original)."""


class ScoutPlanError(ValueError):
    """A scout that cannot be run as asked; the message names the flag and the value."""


class Arm(BaseModel):
    """One arm: a name and the shell command that switches the server to it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=ARM_NAME.pattern)
    """The operator's name for the arm (``original``, ``candidate``, ``mtp3``, …)."""
    command: str = Field(min_length=1, max_length=MAX_COMMAND)
    """The shell command (``/bin/sh -c``) that switches every endpoint to this arm."""
    recipe: dict[str, str] = Field(default_factory=dict)
    """Facts declared for this arm only (``--arm-recipe ARM:KEY=VALUE``), over the run's
    ``--recipe``."""
    server_cmd_file: Path | None = None
    """This arm's launch command (``--arm-server-cmd-file ARM:FILE``), instead of the
    run's ``--server-cmd-file``: attached to the arm's identity, scrubbed, and hashed."""


class Step(BaseModel):
    """One run of the scout, in order."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    n: int = Field(ge=1)
    """1-based position in the order (the run's directory is ``<n>-<arm>``)."""
    arm: str
    role: Role


class Triple(BaseModel):
    """A candidate run and the original runs that bracket it (step numbers)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    before: int
    candidate: int
    restored: int


class ScoutPlan(BaseModel):
    """What ``soaktop scout`` will do, decided before anything runs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    original: Arm
    candidate: Arm
    order: str = Field(pattern=r"^a(?:b?a)*$")
    """The order in ``a``/``b`` letters (``aba``, ``ababa``, ``abaaba``)."""
    order_asked: str
    """``--order`` as given (``aba``, ``random:3``)."""
    seed: int | None = None
    """``--seed``: what drew a ``random:K`` order (None for an explicit order)."""
    min_gain: float = Field(gt=0, lt=1)
    min_wins: int | None = Field(ge=1)
    """Cells that must win (None: every cell)."""
    allow_restoration_drift: bool = False
    switch_timeout_s: float = Field(gt=0, le=86_400)

    def steps(self) -> list[Step]:
        """Every run in order, with its arm and role."""
        out: list[Step] = []
        for i, letter in enumerate(self.order, start=1):
            if letter == "b":
                out.append(Step(n=i, arm=self.candidate.name, role="candidate"))
            else:
                role: Role = "original" if i == 1 else "restored"
                out.append(Step(n=i, arm=self.original.name, role=role))
        return out

    def triples(self) -> list[Triple]:
        """Each candidate run with the original runs right before and after it."""
        # 0-based index i of a candidate run is step n = i + 1; its brackets are n ± 1
        return [
            Triple(before=i, candidate=i + 1, restored=i + 2)
            for i, letter in enumerate(self.order)
            if letter == "b"
        ]

    def arm(self, name: str) -> Arm:
        """The arm called ``name``."""
        return self.original if name == self.original.name else self.candidate


def parse_arm(text: str) -> tuple[str, str]:
    """``original=./switch.sh orig`` → (name, command)."""
    name, sep, command = text.partition("=")
    name, command = name.strip(), command.strip()
    if not sep or not name or not command:
        raise ScoutPlanError(
            f"--arm {_short(text)}: expected NAME=COMMAND (e.g. --arm original='./switch.sh orig')"
        )
    if not ARM_NAME.match(name):
        raise ScoutPlanError(
            f"--arm {_short(text)}: the name {_short(name)} must start with a letter and hold "
            "only letters, digits, '_', '.', '-' (at most 32 characters)"
        )
    if len(command) > MAX_COMMAND or any(ord(c) < 32 and c != "\t" for c in command):
        raise ScoutPlanError(
            f"--arm {name}: the command must be one line of at most {MAX_COMMAND} characters "
            "(point it at a script for more)"
        )
    return name, command


def parse_order(text: str, seed: int | None) -> str:
    """``--order`` (and ``--seed``) → the order in letters; ScoutPlanError says why not."""
    raw = text.strip().lower()
    if raw.startswith("random:"):
        return _random_order(text, raw.removeprefix("random:"), seed)
    if seed is not None:
        raise ScoutPlanError(
            f"--seed {seed}: only --order random:K draws an order; the explicit order "
            f"{_short(text)} has nothing to draw"
        )
    letters = re.sub(r"[\s/,>-]+", "", raw)
    if not letters or set(letters) - {"a", "b"}:
        raise ScoutPlanError(
            f"--order {_short(text)}: write the runs as a (original) and b (candidate), "
            "e.g. aba or ababa, or random:K with --seed N"
        )
    if "b" not in letters:
        raise ScoutPlanError(f"--order {_short(text)}: no candidate run (b)")
    if letters[0] != "a" or letters[-1] != "a" or "bb" in letters:
        where = (
            "it starts with the candidate"
            if letters[0] == "b"
            else "it ends with the candidate"
            if letters[-1] == "b"
            else "two candidate runs are side by side"
        )
        raise ScoutPlanError(
            f"--order {_short(text)}: every candidate run (b) needs an original run (a) right "
            f"before and right after it, and {where} (allowed: aba, ababa, abaaba, …)"
        )
    if letters.count("b") > MAX_CANDIDATE_RUNS:
        raise ScoutPlanError(
            f"--order {_short(text)}: at most {MAX_CANDIDATE_RUNS} candidate runs in one scout"
        )
    return letters


def _random_order(text: str, count: str, seed: int | None) -> str:
    """``random:K``: K bracketed candidate runs; the seed draws shared or separate
    originals between consecutive triples."""
    try:
        k = int(count)
    except ValueError:
        raise ScoutPlanError(
            f"--order {_short(text)}: random:K takes a whole number K of candidate runs"
        ) from None
    if not 1 <= k <= MAX_CANDIDATE_RUNS:
        raise ScoutPlanError(
            f"--order {_short(text)}: K must be from 1 to {MAX_CANDIDATE_RUNS} candidate runs"
        )
    if seed is None:
        raise ScoutPlanError(f"--order {_short(text)} needs --seed N (what draws the order)")
    rng = random.Random(seed)
    order = "aba"
    for _ in range(k - 1):
        order += "ba" if rng.random() < 0.5 else "aba"
    return order


def parse_arm_recipe(items: Sequence[str], arms: Sequence[str]) -> dict[str, dict[str, str]]:
    """``["candidate:kv_cache_dtype=fp8"]`` → {arm: {key: value}}."""
    out: dict[str, dict[str, str]] = {a: {} for a in arms}
    for item in items:
        arm, sep, fact = item.partition(":")
        key, eq, value = fact.partition("=")
        if not sep or not eq:
            raise ScoutPlanError(
                f"--arm-recipe {_short(item)}: expected ARM:KEY=VALUE "
                "(e.g. candidate:kv_cache_dtype=fp8)"
            )
        if arm.strip() not in out:
            raise ScoutPlanError(
                f"--arm-recipe {_short(item)}: no arm named {_short(arm.strip())} "
                f"(the arms: {', '.join(arms)})"
            )
        try:
            check_declared(key.strip(), value.strip())
        except ValueError as e:
            raise ScoutPlanError(f"--arm-recipe {_short(item)}: {e}") from None
        out[arm.strip()][key.strip()] = value.strip()
    return out


def parse_arm_files(items: Sequence[str], arms: Sequence[str]) -> dict[str, Path]:
    """``["candidate:./cand.cmd"]`` → {arm: path} (each arm at most once)."""
    out: dict[str, Path] = {}
    for item in items:
        arm, sep, path = item.partition(":")
        arm = arm.strip()
        if not sep or not path.strip():
            raise ScoutPlanError(
                f"--arm-server-cmd-file {_short(item)}: expected ARM:FILE "
                "(e.g. candidate:./launch-candidate.sh)"
            )
        if arm not in arms:
            raise ScoutPlanError(
                f"--arm-server-cmd-file {_short(item)}: no arm named {_short(arm)} "
                f"(the arms: {', '.join(arms)})"
            )
        if arm in out:
            raise ScoutPlanError(f"--arm-server-cmd-file: arm {arm} is given twice")
        out[arm] = Path(path.strip())
    return out


def build_plan(
    arms: Sequence[str] | None,
    *,
    order: str = "aba",
    seed: int | None = None,
    min_gain: float = 0.10,
    min_wins: int | None = 1,
    arm_recipe: Sequence[str] = (),
    arm_server_cmd_file: Sequence[str] = (),
    allow_restoration_drift: bool = False,
    switch_timeout_s: float = DEFAULT_SWITCH_TIMEOUT_S,
) -> ScoutPlan:
    """The plan from the command line's values; :class:`ScoutPlanError` names what is
    wrong (exactly two ``--arm``, different names, a bracketed order, …)."""
    given = list(arms or [])
    if len(given) != 2:
        raise ScoutPlanError(
            f"--arm: a scout has exactly two arms, the original first and the candidate "
            f"second (got {len(given)}): --arm original='./switch.sh orig' "
            "--arm candidate='./switch.sh cand'"
        )
    (a_name, a_cmd), (b_name, b_cmd) = (parse_arm(t) for t in given)
    if a_name == b_name:
        raise ScoutPlanError(f"--arm: both arms are named {a_name!r}; give each its own name")
    if not (0 < switch_timeout_s <= 86_400):
        raise ScoutPlanError(
            f"--switch-timeout {switch_timeout_s:g}: allowed from more than 0 to 86400 seconds"
        )
    recipes = parse_arm_recipe(arm_recipe, [a_name, b_name])
    files = parse_arm_files(arm_server_cmd_file, [a_name, b_name])
    letters = parse_order(order, seed)
    return ScoutPlan(
        original=Arm(
            name=a_name, command=a_cmd, recipe=recipes[a_name], server_cmd_file=files.get(a_name)
        ),
        candidate=Arm(
            name=b_name, command=b_cmd, recipe=recipes[b_name], server_cmd_file=files.get(b_name)
        ),
        order=letters,
        order_asked=order,
        seed=seed,
        min_gain=min_gain,
        min_wins=min_wins,
        allow_restoration_drift=allow_restoration_drift,
        switch_timeout_s=switch_timeout_s,
    )


def _short(text: str) -> str:
    """The operator's text, quoted and bounded."""
    return repr(text) if len(text) <= 80 else f"{text[:60]!r}… ({len(text)} characters)"

"""A mixed load's run-time parts, from the checked mix (:mod:`soak.run.config_mix`): each
class's body, its answer contract and its prompt pool, and the run's
:class:`~loadgen.mix.MixSource`. All of it is built before the barrier (files read,
synthetic prompts calibrated), never on the measuring loop.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from loadgen.answer_contract import AnswerContract
from loadgen.mix import MixSource, WorkloadClass
from loadgen.prompts import BodyBuilder, PromptPool, load_file, synthetic
from soak.run.config import RunConfig
from soak.run.config_mix import MixClass
from soak.run.identity import count_tokens as server_tokens


def contract_of(c: MixClass) -> AnswerContract | None:
    """What every answer of class ``c`` must be (None: no contract)."""
    rf = c.response_format
    if rf is not None and rf.get("type") == "json_schema":
        return AnswerContract.json_schema(rf["json_schema"]["schema"])
    if rf is not None and rf.get("type") == "json_object":
        return AnswerContract.json_object()
    choice = c.tool_choice
    if c.tools is not None and (choice == "required" or isinstance(choice, dict)):
        return AnswerContract.tool_call(c.tools, choice)
    return None


def mix_contracts(cfg: RunConfig) -> dict[str, AnswerContract]:
    """The run's answer contracts by class name (empty without a mix)."""
    if cfg.mix is None:
        return {}
    return {c.name: k for c in cfg.mix.classes if (k := contract_of(c)) is not None}


def class_bodies(cfg: RunConfig, c: MixClass) -> BodyBuilder:
    """Class ``c``'s request body: the run's shape, with the class's own fields."""
    reasoning = c.reasoning or cfg.reasoning_effort
    extra = list(cfg.sampling_extra())
    if reasoning:
        extra.append(("reasoning_effort", reasoning))
    for key in ("response_format", "tools", "tool_choice"):
        if (value := getattr(c, key)) is not None:
            extra.append((key, value))
    return BodyBuilder(
        model=cfg.model,
        api=cfg.api,
        max_tokens=c.max_tokens or cfg.max_tokens,
        ignore_eos=cfg.ignore_eos,
        temperature=cfg.temperature,
        extra=tuple(extra),
        max_tokens_field=cfg.max_tokens_field,
    )


async def class_pools(cfg: RunConfig, headers: dict[str, str]) -> dict[str, PromptPool]:
    """The pools of the classes that have their own prompts (a file, or synthetic prompts
    calibrated with the first endpoint's ``/tokenize``), built before the load; a class
    with neither sends from the run's pool. Empty without a mix."""
    out: dict[str, PromptPool] = {}
    if cfg.mix is None:
        return out

    async def count_tokens(text: str) -> int | None:
        return await server_tokens(cfg.endpoints[0], cfg.model, text, headers)

    for c in cfg.mix.classes:
        if c.prompts is not None:
            out[c.name] = load_file(Path(c.prompts), seed=cfg.pool_seed, limit=cfg.pool_size)
        elif c.synthetic_input_tokens is not None:
            out[c.name] = await synthetic(
                count=cfg.pool_size,
                target_tokens=c.synthetic_input_tokens,
                seed=cfg.pool_seed,
                unique_prefix=not cfg.shared_prefix,
                count_tokens=count_tokens,
            )
    return out


def mix_source(cfg: RunConfig, pool: PromptPool, pools: Mapping[str, PromptPool]) -> MixSource:
    """The run's :class:`MixSource` (``pools``: :func:`class_pools`'; ``pool``: the run's)."""
    assert cfg.mix is not None
    classes = [
        WorkloadClass(
            c.name, c.weight, pools.get(c.name, pool), class_bodies(cfg, c), contract_of(c)
        )
        for c in cfg.mix.classes
    ]
    return MixSource(classes, cfg.pool_seed)

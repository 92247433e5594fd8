"""One probe: send a suite task's request(s), judge the answer, classify the outcome.

Outcomes (DESIGN.md §5): ``pass``; ``contract`` — the server answered but broke the
contract (bad JSON, schema mismatch, wrong tool, or it refused the request with a 400 —
except a prompt too long for the model's context, which is the suite's size);
``availability`` — the server did not answer properly (5xx, 429, no complete answer
within the probe timeout, connection refused, a cut stream, an error event inside a 200
stream, a garbled or undecodable response); ``client`` — soaktop or its configuration
(401/403/404, a prompt longer than the model's context, an answer larger than soaktop
keeps, a bug building the request).

Every HTTP exchange is kept (request body, status, headers, body or raw stream text) so a
failed probe can be written to ``evidence/`` (the records: :mod:`probes.probe_record`). The
answer is judged on its whole body (up to ``FULL_BODY_LIMIT``); only the evidence copy is
cut at ``BODY_LIMIT``. Probes use httpx: they are few, and not on the load's hot path.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import httpx
import orjson

from probes.contract import check_json_content, check_tool_calls
from probes.probe_record import Exchange, Outcome
from probes.sse_events import StreamAssembly, parse_sse_events
from probes.suite import Suite, Task

FULL_BODY_LIMIT = 64 << 20
"""Bytes of a response kept to judge it; a longer answer ends the probe as ``client``
(soaktop's own limit, not the server's fault)."""

_UNDECODABLE = "undecodable response body"
_CANCELLED = "cancelled before the answer was complete"

_FILLER = (
    "The quarterly maintenance log lists routine checks of pumps, valves and sensors. "
    "Each entry notes the date, the technician and whether a part was replaced. "
)


@dataclass
class ProbeOptions:
    """How probes are sent."""

    model: str
    check_expected: bool = False
    """Check tasks' expected values (capable models only; random weights never match)."""
    timeout_s: float = 120.0
    """Longest time one probe may take, all its exchanges together (the HTTP client's own
    timeout only bounds each read)."""
    max_model_len: int | None = None
    """The served model's context length (``/v1/models``): a needle that cannot fit is
    the suite's configuration, not a server failure."""


class _Failed(Exception):
    """Ends a probe early with an outcome and a reason."""

    def __init__(self, outcome: Outcome, reason: str) -> None:
        super().__init__(reason)
        self.outcome = outcome
        self.reason = reason


def _http_outcome(status: int) -> Outcome:
    if status >= 500 or status in (408, 429):
        return "availability"
    if status in (401, 403, 404):
        return "client"  # a wrong key, model name or route: soaktop's configuration
    return "contract"  # the server refused a request the contract says it accepts


def _context_length_refusal(status: int, message: str) -> bool:
    """A 400 saying the prompt (or prompt + max_tokens) does not fit the model's context:
    the suite's size, not a broken contract."""
    lower = message.lower()
    return status == 400 and "context length" in lower  # also "maximum context length"


def _error_text(text: str) -> str:
    """The message of an OpenAI/vLLM error body, or the start of the body."""
    try:
        obj = orjson.loads(text)
    except orjson.JSONDecodeError:
        return text[:200]
    err = obj.get("error") if isinstance(obj, dict) else None
    if isinstance(err, dict):
        return str(err.get("message", ""))[:200]
    if isinstance(obj, dict) and "message" in obj:
        return str(obj["message"])[:200]
    return text[:200]


def _messages(task: Task, prompt: str | None = None) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = []
    if task.system:
        msgs.append({"role": "system", "content": task.system})
    msgs.append({"role": "user", "content": task.prompt if prompt is None else prompt})
    return msgs


def needle_prompt(task: Task) -> str:
    """Filler text of about ``context_tokens`` tokens with the needle at ``depth``.

    About four characters per token; the actual prompt tokens come back in ``usage`` and
    are recorded with the result.
    """
    assert task.needle and task.context_tokens
    chars = task.context_tokens * 4
    filler = (_FILLER * (chars // len(_FILLER) + 1))[:chars]
    cut = filler.rfind(". ", 0, int(len(filler) * task.depth)) + 2 if task.depth > 0 else 0
    hay = filler[:cut] + task.needle_text.format(needle=task.needle) + " " + filler[cut:]
    question = task.prompt or "What is the secret code in the text above? Answer with it only."
    return f"{hay}\n\n{question}"


class ProbeSender:
    """Sends probes over one httpx client."""

    def __init__(self, client: httpx.AsyncClient, options: ProbeOptions) -> None:
        self.client = client
        self.options = options

    def _body(self, suite: Suite, task: Task, stream: bool) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.options.model, "stream": stream}
        body |= {k: v for k, v in suite.defaults.items() if k not in ("model", "stream", "seed")}
        if task.max_tokens is not None:
            body["max_tokens"] = task.max_tokens
        if stream:
            body["stream_options"] = {"include_usage": True}
        return body

    async def _send(
        self, base: str, rid: str, body: dict[str, Any], exchanges: list[Exchange]
    ) -> Exchange:
        ex = Exchange(url=f"{base}/v1/chat/completions", request_id=rid, body=body)
        exchanges.append(ex)
        t0 = time.perf_counter()
        kept = bytearray()
        limit = FULL_BODY_LIMIT
        try:
            async with self.client.stream(
                "POST", ex.url, json=body, headers={"X-Request-Id": rid}
            ) as r:
                ex.status = r.status_code
                ex.headers = {k: v for k, v in r.headers.items() if k.lower() != "set-cookie"}
                async for chunk in r.aiter_bytes():
                    room = limit - len(kept)
                    kept += chunk[: max(room, 0)]
                    if len(chunk) > room:
                        ex.oversize = True  # stop reading: closing the stream ends it
                        break
        except httpx.TimeoutException as e:
            ex.error = f"timeout{self._timeout_words(e)} ({type(e).__name__})"
        except httpx.TransportError as e:
            ex.error = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
        except httpx.DecodingError as e:  # a bad Content-Encoding: the server's answer
            ex.error = f"{_UNDECODABLE}: {e}" if str(e) else _UNDECODABLE
        except asyncio.CancelledError:  # the probe timeout (or the run stopping)
            ex.error = _CANCELLED
            raise
        finally:
            ex.latency_s = time.perf_counter() - t0
            ex.text = kept.decode("utf-8", errors="replace")
        return ex

    def _timeout_words(self, e: httpx.TimeoutException) -> str:
        """`` after N s`` with the client's timeout that fired (per connect, read, ...)."""
        name = {
            httpx.ConnectTimeout: "connect",
            httpx.ReadTimeout: "read",
            httpx.WriteTimeout: "write",
            httpx.PoolTimeout: "pool",
        }.get(type(e))
        t = getattr(self.client.timeout, name) if name is not None else None
        return f" after {t:g} s" if isinstance(t, int | float) else ""

    @staticmethod
    def _raise_for(ex: Exchange) -> None:
        if ex.oversize:
            raise _Failed(
                "client",
                f"answer larger than soaktop keeps ({_size(FULL_BODY_LIMIT)}; HTTP {ex.status}): "
                "not judged",
            )
        if ex.error is not None:
            if ex.error.startswith(_UNDECODABLE):
                raise _Failed("availability", ex.error[:300])
            cut = ex.status is not None
            raise _Failed(
                "availability", f"{'stream cut' if cut else 'no answer'}: {ex.error}"[:300]
            )
        assert ex.status is not None
        if ex.status != 200:
            message = _error_text(ex.text)
            if _context_length_refusal(ex.status, message):
                raise _Failed(
                    "client",
                    f"HTTP {ex.status}: {message} (the prompt does not fit the model's "
                    "context: the suite's size, not a server fault)",
                )
            outcome = _http_outcome(ex.status)
            raise _Failed(outcome, f"HTTP {ex.status}: {message}")

    def _json_answer(self, ex: Exchange) -> dict[str, Any]:
        """The non-streamed answer's first choice message (and usage)."""
        self._raise_for(ex)
        obj: Any = None
        choice: Any = None
        try:
            obj = orjson.loads(ex.text)
            choice = obj["choices"][0]
            message = choice["message"]
        except (orjson.JSONDecodeError, KeyError, IndexError, TypeError):
            message = None
        if not isinstance(message, dict) or not isinstance(obj.get("usage") or {}, dict):
            raise _Failed("availability", f"malformed response body: {ex.text[:120]!r}")
        content = message.get("content")
        if content is not None and not isinstance(content, str):
            raise _Failed("availability", f"malformed response: content is {content!r:.60}")
        calls = message.get("tool_calls")
        if calls is not None and not (
            isinstance(calls, list) and all(isinstance(c, dict) for c in calls)
        ):
            raise _Failed("availability", f"malformed response: tool_calls is {calls!r:.60}")
        ex.usage = obj.get("usage") if isinstance(obj.get("usage"), dict) else None
        return {"message": message, "finish_reason": choice.get("finish_reason")}

    def _stream_answer(self, ex: Exchange) -> StreamAssembly:
        self._raise_for(ex)
        asm = parse_sse_events(ex.text)
        ex.usage = asm.usage
        if asm.error is not None:
            raise _Failed("availability", f"error event inside the HTTP 200 stream: {asm.error}")
        if asm.malformed is not None:
            raise _Failed("availability", f"malformed stream: {asm.malformed}")
        if not asm.done:
            raise _Failed("availability", "stream ended without [DONE]")
        return asm

    async def run(
        self, suite: Suite, task: Task, base: str, rid: str
    ) -> tuple[Outcome, str, str | None, list[Exchange]]:
        """Send the task; (outcome, reason, finish_reason, exchanges).

        The whole probe (all its exchanges) must end within ``options.timeout_s``;
        otherwise it is ``availability`` ("no complete answer within N s"), with the
        exchanges so far (the one in flight included) kept for evidence."""
        exchanges: list[Exchange] = []
        deadline = asyncio.timeout(self.options.timeout_s)
        try:
            async with deadline:
                finish = await self._dispatch(suite, task, base, rid, exchanges)
        except _Failed as f:
            return f.outcome, f.reason, None, exchanges
        except TimeoutError as e:
            if not deadline.expired():
                return (
                    "client",
                    f"soaktop could not run the probe: TimeoutError: {e}",
                    None,
                    exchanges,
                )
            within = f"no complete answer within {self.options.timeout_s:g} s"
            last = exchanges[-1] if exchanges else None
            if last is not None and last.error == _CANCELLED:
                last.error = f"probe timeout: {within}"
            cut = last is not None and last.status is not None
            return (
                "availability",
                f"{'stream cut' if cut else 'no answer'}: timeout, {within}",
                None,
                exchanges,
            )
        except Exception as e:  # a bug in soaktop or in a user suite: never an engine fault
            return (
                "client",
                f"soaktop could not run the probe: {type(e).__name__}: {e}",
                None,
                (exchanges),
            )
        return "pass", "", finish, exchanges

    async def _dispatch(
        self, suite: Suite, task: Task, base: str, rid: str, exchanges: list[Exchange]
    ) -> str | None:
        kind = suite.kind
        if kind == "json":
            return await self._json(suite, task, base, rid, exchanges)
        if kind in ("tools", "stream-tools"):
            return (await self._tools(suite, task, base, rid, exchanges, kind == "stream-tools"))[0]
        if kind == "tool-result":
            return await self._tool_result(suite, task, base, rid, exchanges)
        if kind == "smoke":
            return await self._text(suite, task, base, rid, exchanges, _messages(task), None)
        if kind == "needle":
            limit = self.options.max_model_len
            need = (task.context_tokens or 0) + int(
                task.max_tokens or suite.defaults.get("max_tokens") or 0
            )
            if limit is not None and need > limit:
                raise _Failed(
                    "client",
                    f"needle context {task.context_tokens} + max_tokens does not fit the "
                    f"model's max_model_len {limit}; lower context_tokens in the suite",
                )
            # The fit check above estimates tokens; the server's count decides, and its
            # context-length refusal is a client outcome (``_raise_for``, every kind).
            msgs = _messages(task, needle_prompt(task))
            return await self._text(suite, task, base, rid, exchanges, msgs, task.needle)
        raise _Failed("client", f"unknown probe kind {kind!r}")

    async def _json(
        self, suite: Suite, task: Task, base: str, rid: str, exchanges: list[Exchange]
    ) -> str | None:
        assert task.schema_ is not None
        body = self._body(suite, task, stream=False) | {
            "messages": _messages(task),
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": task.id, "schema": task.schema_, "strict": True},
            },
        }
        ans = self._json_answer(await self._send(base, rid, body, exchanges))
        finish = ans["finish_reason"]
        expect = task.expect if self.options.check_expected else None
        why = check_json_content(ans["message"].get("content"), task.schema_, expect)
        if why and finish == "length":
            why = f"output cut at max_tokens (finish_reason length); {why}"
        if why:
            raise _Failed("contract", why)
        return str(finish) if finish is not None else None

    async def _tools(
        self,
        suite: Suite,
        task: Task,
        base: str,
        rid: str,
        exchanges: list[Exchange],
        stream: bool,
    ) -> tuple[str | None, list[dict[str, Any]]]:
        assert task.expect_function is not None
        body = self._body(suite, task, stream=stream) | {
            "messages": _messages(task),
            "tools": task.tools,
            "tool_choice": task.tool_choice,
            "parallel_tool_calls": False,
        }
        ex = await self._send(base, rid, body, exchanges)
        if stream:
            asm = self._stream_answer(ex)
            calls, finish = asm.tool_calls(), asm.finish_reason
        else:
            ans = self._json_answer(ex)
            calls, finish = ans["message"].get("tool_calls") or [], ans["finish_reason"]
        expect = task.expect_arguments if self.options.check_expected else None
        if why := check_tool_calls(calls, task.tools, task.expect_function, expect):
            if finish == "length":
                why = f"output cut at max_tokens (finish_reason length); {why}"
            raise _Failed("contract", why)
        return (str(finish) if finish is not None else None), calls

    async def _tool_result(
        self, suite: Suite, task: Task, base: str, rid: str, exchanges: list[Exchange]
    ) -> str | None:
        try:
            _, calls = await self._tools(suite, task, base, f"{rid}.call", exchanges, False)
        except _Failed as f:
            raise _Failed(f.outcome, f"step 1 (tool call): {f.reason}") from None
        call = calls[0]
        result = task.tool_result if task.tool_result is not None else {"ok": True}
        msgs = [
            *_messages(task),
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {
                "role": "tool",
                "tool_call_id": call.get("id") or "call_0",
                "content": result if isinstance(result, str) else orjson.dumps(result).decode(),
            },
        ]
        body = self._body(suite, task, stream=False) | {
            "messages": msgs,
            "tools": task.tools,
            "tool_choice": "none",
        }
        try:
            ans = self._json_answer(await self._send(base, f"{rid}.answer", body, exchanges))
        except _Failed as f:
            raise _Failed(f.outcome, f"step 2 (answer to the tool result): {f.reason}") from None
        message = ans["message"]
        if message.get("tool_calls"):
            raise _Failed("contract", "step 2: called a tool again although tool_choice was none")
        if not (message.get("content") or "").strip():
            raise _Failed("contract", "step 2: empty answer to the tool result")
        finish = ans["finish_reason"]
        return str(finish) if finish is not None else None

    async def _text(
        self,
        suite: Suite,
        task: Task,
        base: str,
        rid: str,
        exchanges: list[Exchange],
        messages: list[dict[str, Any]],
        must_contain: str | None,
    ) -> str | None:
        body = self._body(suite, task, stream=True) | {"messages": messages}
        asm = self._stream_answer(await self._send(base, rid, body, exchanges))
        text = asm.content or asm.reasoning
        if not text.strip():
            raise _Failed("contract", "empty output")
        if asm.usage is None:
            raise _Failed("contract", "no usage block in the stream (include_usage was asked)")
        if must_contain is not None and must_contain not in asm.content:
            raise _Failed(
                "contract", f"the answer does not contain the needle: {asm.content[:120]!r}"
            )
        return asm.finish_reason


def _size(n: int) -> str:
    """Bytes in MiB or KiB."""
    return f"{n / (1 << 20):g} MiB" if n >= 1 << 20 else f"{n / 1024:g} KiB"


def accounting(exchanges: list[Exchange]) -> dict[str, int]:
    """Requests sent, completed with usage, and their tokens (for reconciliation)."""
    done = [e for e in exchanges if e.status == 200 and e.error is None and e.usage]
    return {
        "requests": len(exchanges),
        "completed": len(done),
        "prompt_tokens": sum(int(e.usage.get("prompt_tokens") or 0) for e in done if e.usage),
        "completion_tokens": sum(
            int(e.usage.get("completion_tokens") or 0) for e in done if e.usage
        ),
    }

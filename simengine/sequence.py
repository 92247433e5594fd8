"""One request inside the engine: its plan, progress, KV blocks and the client's transport."""

from __future__ import annotations

import asyncio
import socket
import struct
import time

from simengine import wire
from simengine.faults import FaultRule
from simengine.responses import ResponsesTemplate
from simengine.textgen import Plan


class Sequence:
    """A request as the scheduler sees it. ``done`` resolves once, when it ends."""

    __slots__ = (
        "arrival",
        "blocks",
        "done",
        "error",
        "fault",
        "fault_at",
        "first_token_t",
        "frags",
        "generated",
        "include_usage",
        "last_loop_t",
        "malformed",
        "outcome",
        "plan",
        "prefill_pending",
        "prefix_hit",
        "prompt_counted",
        "prompt_tokens",
        "rid",
        "scheduled_t",
        "stall_until",
        "stream",
        "template",
        "transport",
    )

    def __init__(
        self,
        *,
        rid: str,
        plan: Plan,
        prompt_tokens: int,
        template: wire.StreamTemplate | ResponsesTemplate,
        transport: asyncio.BaseTransport | None,
        stream: bool,
        include_usage: bool = False,
        frags: list[bytes] | None = None,
        prefix_hit: int = 0,
        fault: FaultRule | None = None,
    ) -> None:
        self.rid = rid
        self.plan = plan
        self.prompt_tokens = prompt_tokens
        self.prefix_hit = prefix_hit
        self.template = template
        self.transport: asyncio.WriteTransport | None = transport  # type: ignore[assignment]
        self.stream = stream
        self.include_usage = include_usage
        self.frags = frags
        self.fault = fault
        # Strike before this token index; clamped so a short answer still gets its fault.
        if fault is not None and fault.action in (
            "stall",
            "reset",
            "error_event",
            "malformed",
        ):
            self.fault_at = min(fault.after_tokens, max(len(plan) - 1, 0))
        else:
            self.fault_at = -1
        self.generated = 0
        self.blocks = 0
        self.prefill_pending = False
        self.prompt_counted = False
        self.stall_until = 0.0
        self.malformed = False
        self.arrival = time.monotonic()
        self.scheduled_t = 0.0
        self.first_token_t = 0.0
        self.last_loop_t = 0.0
        self.outcome = ""
        self.error: tuple[str, int] | None = None
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def client_gone(self) -> bool:
        """True once the client's connection is closed or closing."""
        tr = self.transport
        return tr is None or tr.is_closing()

    def resolve(self) -> None:
        """Wake the handler waiting on this request (once)."""
        if not self.done.done():
            self.done.set_result(None)

    def fail(self, message: str) -> None:
        """End with an HTTP 500: an error event in a started stream, else an error body."""
        tr = self.transport
        if self.stream and tr is not None and not tr.is_closing():
            tr.write(wire.sse_error(message, "InternalServerError", 500))
        self.error = (message, 500)
        self.outcome = "error"
        self.resolve()

    def strike(self, now: float) -> str:
        """Do this request's mid-stream fault on the wire.

        Returns "" when the request goes on (stall, malformed), "error" when it ended with
        an error (error_event), "abort" when the connection was reset.
        """
        rule = self.fault
        self.fault_at = -1
        if rule is None:
            return ""
        tr = self.transport
        open_stream = self.stream and tr is not None and not tr.is_closing()
        if rule.action == "stall":
            self.stall_until = now + rule.stall_s
            return ""
        if rule.action == "malformed":
            if open_stream and tr is not None:
                tr.write(wire.frame(b'data: {"id":\n\n'))
            else:
                self.malformed = True
            return ""
        if rule.action == "reset":
            if tr is not None and not tr.is_closing():
                sock = tr.get_extra_info("socket")
                if sock is not None:
                    # Linger 0: close with RST, as a crashed proxy or kernel would.
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                tr.abort()
            return "abort"
        self.fail("Internal server error")
        return "error"

    def stream_tail(self, finish: str, completion_tokens: int) -> bytes:
        """The stream's framed end: chat's finish chunk, usage chunk when asked for and
        ``[DONE]``, or the Responses API's ``response.completed``."""
        return self.template.tail(finish, self.prompt_tokens, completion_tokens, self.include_usage)

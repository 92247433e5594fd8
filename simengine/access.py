"""What a simulated replica asks of a client before it answers: TLS (``--tls-cert`` and
``--tls-key``, and with ``--tls-client-ca`` a client certificate signed by that CA, i.e.
mutual TLS) and required headers (``--require-header "Name: value"``, as a gateway that
wants a tenant header or a key would). Only the API port; the DCGM exporter stays plain.
"""

from __future__ import annotations

import ssl
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.typedefs import Middleware

from simengine import wire
from simengine.config import SimConfig

__all__ = ["header_middleware", "server_context"]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def server_context(cfg: SimConfig) -> ssl.SSLContext | None:
    """The API port's server SSLContext (None: plain HTTP)."""
    if cfg.tls_cert is None:
        return None
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cfg.tls_cert, cfg.tls_key)
    if cfg.tls_client_ca is not None:
        ctx.load_verify_locations(cafile=cfg.tls_client_ca)
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def header_middleware(cfg: SimConfig) -> Middleware | None:
    """A middleware answering 401 (vLLM's ``--api-key`` body) to a request that lacks a
    required header or carries another value; None when none is required."""
    wanted = []
    for spec in cfg.require_headers:
        name, _, value = spec.partition(":")
        wanted.append((name.strip(), value.strip()))
    if not wanted:
        return None

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        for name, value in wanted:
            if request.headers.get(name) != value:
                return web.Response(
                    status=401,
                    body=wire.error_body(f"missing or wrong {name} header", "Unauthorized", 401),
                    content_type="application/json",
                )
        return await handler(request)

    return check

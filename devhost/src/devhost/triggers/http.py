"""httpTrigger on a local aiohttp server, with the host's routing rules.

Routes live under the route prefix (``api`` unless host.json's ``extensions.http.routePrefix``
says otherwise). Templates take ``{name}``, optional ``{name?}`` and the ``int``/``alpha``/``guid``
constraints. Function keys are checked as on Azure (``devhost.function_keys``): a request to
a ``function`` or ``admin`` function without a valid key is answered 401 and the function
does not run; ``anonymous`` functions are open. A route that starts with ``admin`` is refused
at start, as the host refuses it. An unhandled exception becomes a 500 without the exception
text, so nothing internal leaks to a caller; the log has the details. The request's
``traceparent`` header is the invocation's trace parent (C9).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import azure.functions as func
from aiohttp import web

from devhost.function_keys import FunctionKeys, presented_key
from devhost.indexing import IndexedFunction
from devhost.invocation import FunctionInvoker
from devhost.telemetry import carrier_of_headers

log = logging.getLogger("devhost.http")

_CONSTRAINTS = {
    "int": r"-?\d+",
    "alpha": r"[A-Za-z]+",
    "guid": r"[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}",
}
RESERVED_ROUTE_PREFIX = "admin"
"""The host keeps ``admin`` for its own API and will not index an HTTP function whose route
(or, without one, whose name) starts with it."""
_PARAMETER = re.compile(r"\{(\*?)([A-Za-z_][A-Za-z0-9_]*)(?::([a-z]+))?(\?)?\}")


@dataclass(frozen=True)
class HttpRoute:
    function: IndexedFunction
    pattern: re.Pattern[str]
    methods: frozenset[str]

    @classmethod
    def of(cls, function: IndexedFunction, prefix: str) -> HttpRoute:
        template = str(function.trigger.get("route") or function.name).strip("/")
        if template.lower().startswith(RESERVED_ROUTE_PREFIX):
            raise ValueError(
                f"function {function.name!r}: route {template!r} conflicts with the host's "
                f"built-in routes: Azure Functions refuses a route or function name that starts "
                f"with {RESERVED_ROUTE_PREFIX!r}, whatever the route prefix"
            )
        full = "/".join(part for part in (prefix.strip("/"), template) if part)
        methods = frozenset(m.upper() for m in function.trigger.get("methods") or ())
        return cls(function, re.compile(_template_to_regex(full, function.name)), methods)

    def match(self, method: str, path: str) -> dict[str, str] | None:
        if self.methods and method.upper() not in self.methods:
            return None
        found = self.pattern.fullmatch(path.strip("/"))
        if found is None:
            return None
        return {k: v for k, v in found.groupdict().items() if v is not None}


def _template_to_regex(template: str, function_name: str) -> str:
    regex, position = "", 0
    for parameter in _PARAMETER.finditer(template):
        regex += re.escape(template[position : parameter.start()])
        catch_all, name, constraint, optional = parameter.groups()
        if constraint and constraint not in _CONSTRAINTS:
            raise ValueError(
                f"function {function_name!r}: route constraint {constraint!r} is not supported "
                f"(supported: {', '.join(sorted(_CONSTRAINTS))})"
            )
        body = ".*" if catch_all else _CONSTRAINTS.get(constraint or "", r"[^/]+")
        group = f"(?P<{name}>{body})"
        if optional:
            # An optional trailing segment also drops the slash before it.
            if regex.endswith("/"):
                regex = regex[:-1] + f"(?:/{group})?"
            else:
                regex += f"{group}?"
        else:
            regex += group
        position = parameter.end()
    return regex + re.escape(template[position:])


class HttpTriggerServer:
    def __init__(
        self,
        functions: Sequence[IndexedFunction],
        invoker: FunctionInvoker,
        *,
        keys: FunctionKeys,
        route_prefix: str = "api",
        extra_routes: Sequence[web.RouteDef] = (),
    ) -> None:
        self._routes = [HttpRoute.of(f, route_prefix) for f in functions]
        self._invoker = invoker
        self._keys = keys
        self._app = web.Application()
        self._app.add_routes(extra_routes)
        self._app.router.add_route("*", "/{tail:.*}", self._dispatch)
        self._runner: web.AppRunner | None = None
        self.port = 0

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self._runner = web.AppRunner(self._app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        self.port = int(self._runner.addresses[0][1])

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        for route in self._routes:
            route_params = route.match(request.method, request.path)
            if route_params is not None:
                level = str(route.function.trigger.get("authLevel") or "function")
                if not self._keys.allows(level, presented_key(request.headers, request.query)):
                    return web.Response(status=401)
                return await self._invoke(route, route_params, request)
        return web.Response(status=404, text="no function matches this route")

    async def _invoke(
        self, route: HttpRoute, route_params: dict[str, str], request: web.Request
    ) -> web.StreamResponse:
        http_request = func.HttpRequest(
            method=request.method,
            url=str(request.url),
            headers=dict(request.headers),
            params=dict(request.query),
            route_params=route_params,
            body=await request.read(),
        )
        argument = str(route.function.trigger["name"])
        try:
            result = await self._invoker.invoke(
                route.function, {argument: http_request}, carrier_of_headers(request.headers)
            )
        except Exception:
            return web.Response(status=500, text="the function failed; see the devhost log")
        return _to_response(result, route.function.name)


def _to_response(result: Any, function_name: str) -> web.Response:
    if result is None:
        return web.Response(status=204)
    if isinstance(result, func.HttpResponse):
        headers = {k: v for k, v in result.headers.items() if k.lower() != "content-length"}
        if result.mimetype and "content-type" not in {k.lower() for k in headers}:
            content_type = result.mimetype
            if result.charset:
                content_type += f"; charset={result.charset}"
            headers["Content-Type"] = content_type
        return web.Response(status=result.status_code, headers=headers, body=result.get_body())
    if isinstance(result, str | bytes):
        return web.Response(status=200, body=result.encode() if isinstance(result, str) else result)
    log.error("function=%s returned %s, not an HttpResponse", function_name, type(result).__name__)
    return web.Response(status=500, text="the function returned an unsupported value")

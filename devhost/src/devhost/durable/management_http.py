"""The Durable extension's HTTP management API, emulated on the engine.

Functions get a ``df.DurableOrchestrationClient`` from the durableClient binding: the host
hands them a JSON string of URLs (``client_binding_json``), and the unchanged SDK makes
aiohttp calls to those URLs.  This server answers them on 127.0.0.1 (ephemeral port):

* ``POST   {rpc}orchestrators/{name}[/{instanceId}][?version=]`` start_new
* ``POST   {rpc}instances/{id}/raiseEvent/{event}``            raise_event
* ``GET    {rpc}instances/{id}?showHistory=&showHistoryOutput=&showInput=`` get_status
  (the history in the extension's summary, ``status.summarised``)
* ``GET    {rpc}instances/?runtimeStatus=&createdTimeFrom=&createdTimeTo=&instanceIdPrefix=``
* ``POST   {rpc}instances/{id}/terminate?reason=``             terminate
* ``DELETE {rpc}instances/{id}``                               purge_instance_history

``{rpc}`` is ``/durabletask/``, the extension's loopback endpoint the SDK calls. The same
routes answer under the public webhook prefix ``/runtime/webhooks/durabletask/`` that
``create_check_status_response`` links to: as on Azure, the host serves those on its HTTP
port too (``webhook_routes``), behind the extension's system key, and the binding's
management URLs point there with that key (``client_binding_json``).
Status codes follow the extension, because the SDK maps them to its exceptions. The
``traceparent`` / ``tracestate`` headers the SDK sends with start_new are kept with the
instance as the parent of its episodes and activities (C9).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from devhost.durable.engine import DurableEngine
from devhost.durable.history import parse_timestamp
from devhost.durable.registry import UnknownFunctionError
from devhost.durable.status import DurableClientError, RuntimeStatus
from devhost.function_keys import KEY_QUERY, FunctionKeys, presented_key
from devhost.telemetry import carrier_of_headers

RPC_PREFIX = "/durabletask/"
WEBHOOK_PREFIX = "/runtime/webhooks/durabletask/"
DEFAULT_TASK_HUB = "DevHostHub"
_INSTANCE_ID_PLACEHOLDER = "INSTANCEID"
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class ManagementApi:
    """An aiohttp server exposing one engine through the extension's management API."""

    def __init__(
        self, engine: DurableEngine, task_hub: str = DEFAULT_TASK_HUB, host: str = "127.0.0.1"
    ) -> None:
        self.engine = engine
        self.task_hub = task_hub
        self.host = host
        self._runner: web.AppRunner | None = None
        self._port: int | None = None
        self._webhooks_key: str | None = None
        self._webhooks_base_url: str | None = None
        self._binding: str | None = None
        self.unavailable = False
        """While set, every call answers 503, as the extension does while its storage
        backend (the Durable Task Scheduler, Azure Storage) cannot be reached: a test of an
        app's behaviour during a backend outage sets it."""

    @property
    def base_url(self) -> str:
        if self._port is None:
            raise RuntimeError("the management API is not started")
        return f"http://{self.host}:{self._port}"

    async def start(self) -> None:
        """Listen on an ephemeral port of ``host``."""
        app = web.Application()
        for prefix in (RPC_PREFIX, WEBHOOK_PREFIX):
            app.add_routes(self._routes(prefix, lambda handler: handler))
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, 0)
        await site.start()
        self._port = int(self._runner.addresses[0][1])

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
            self._port = None
            self._binding = None

    def webhook_routes(self, keys: FunctionKeys) -> list[web.RouteDef]:
        """The webhook routes for the host's HTTP server: each answers 401 unless the request
        carries the Durable extension's key or the master key (``code`` or the header).
        Once that server listens, ``serve_webhooks_at`` points the management URLs there."""

        def guarded(handler: Handler) -> Handler:
            async def check_key(request: web.Request) -> web.StreamResponse:
                if not keys.allows_durable_webhooks(presented_key(request.headers, request.query)):
                    return web.Response(status=401)
                return await handler(request)

            return check_key

        return self._routes(WEBHOOK_PREFIX, guarded)

    def _routes(self, prefix: str, wrap: Callable[[Handler], Handler]) -> list[web.RouteDef]:
        wrap = self._while_available(wrap)
        return [
            web.post(prefix + "orchestrators/{name}", wrap(self._start_new)),
            web.post(prefix + "orchestrators/{name}/{instance_id}", wrap(self._start_new)),
            web.post(
                prefix + "instances/{instance_id}/raiseEvent/{event}", wrap(self._raise_event)
            ),
            web.post(prefix + "instances/{instance_id}/terminate", wrap(self._terminate)),
            web.get(prefix + "instances/", wrap(self._query)),
            web.get(prefix + "instances", wrap(self._query)),
            web.get(prefix + "instances/{instance_id}", wrap(self._get_status)),
            web.delete(prefix + "instances/{instance_id}", wrap(self._purge)),
        ]

    def _while_available(self, wrap: Callable[[Handler], Handler]) -> Callable[[Handler], Handler]:
        def wrapped(handler: Handler) -> Handler:
            async def unless_unavailable(request: web.Request) -> web.StreamResponse:
                if self.unavailable:
                    return _message(503, "the task hub's storage backend cannot be reached")
                return await handler(request)

            return wrap(unless_unavailable)

        return wrapped

    def serve_webhooks_at(self, http_base_url: str, key: str) -> None:
        """The host's HTTP server serves ``webhook_routes`` at `http_base_url`
        (``http://127.0.0.1:7071``): the management URLs point there, carrying `key`."""
        self._webhooks_base_url = http_base_url
        self._webhooks_key = key
        self._binding = None

    def client_binding_json(self) -> str:
        """The durableClient binding value the host passes to functions: the SDK calls the
        loopback endpoint (``rpcBaseUrl``); the management URLs it hands out point at the
        host's HTTP port with the extension's key once ``serve_webhooks_at`` said where,
        else at this server's own port."""
        if self._binding is None:
            self._binding = self._new_client_binding_json()
        return self._binding

    def _new_client_binding_json(self) -> str:
        webhooks = (self._webhooks_base_url or self.base_url) + WEBHOOK_PREFIX.rstrip("/")
        query = f"?taskHub={self.task_hub}&connection=Storage"
        if self._webhooks_base_url is not None:
            query += f"&{KEY_QUERY}={self._webhooks_key}"
        instance = f"{webhooks}/instances/{_INSTANCE_ID_PLACEHOLDER}"
        return json.dumps(
            {
                "taskHubName": self.task_hub,
                "creationUrls": {
                    "createNewInstancePostUri": f"{webhooks}/orchestrators/{{functionName}}"
                    f"[/{{instanceId}}]{query}",
                    "createAndWaitOnNewInstancePostUri": f"{webhooks}/orchestrators/"
                    f"{{functionName}}[/{{instanceId}}]{query}&timeout={{timeoutInSeconds}}"
                    "&pollingInterval={intervalInSeconds}",
                },
                "managementUrls": {
                    "id": _INSTANCE_ID_PLACEHOLDER,
                    "statusQueryGetUri": f"{instance}{query}",
                    "sendEventPostUri": f"{instance}/raiseEvent/{{eventName}}{query}",
                    "terminatePostUri": f"{instance}/terminate?reason={{text}}&{query[1:]}",
                    "rewindPostUri": f"{instance}/rewind?reason={{text}}&{query[1:]}",
                    "purgeHistoryDeleteUri": f"{instance}{query}",
                    "restartPostUri": f"{instance}/restart{query}",
                },
                "baseUrl": webhooks,
                "requiredQueryStringParameters": "",
                "rpcBaseUrl": self.base_url + RPC_PREFIX,
                "httpBaseUrl": webhooks,
            }
        )

    # -- handlers ----------------------------------------------------------------------

    async def _start_new(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        try:
            # The SDK adds ?version= only when start_new was given one; without it the
            # instance gets the host's defaultVersion.
            instance_id = await self.engine.start_new(
                name,
                request.match_info.get("instance_id"),
                await _payload(request),
                version=request.query.get("version"),
                trace_parent=carrier_of_headers(request.headers),
            )
        except (DurableClientError, UnknownFunctionError) as error:
            return web.json_response({"ExceptionMessage": str(error)}, status=400)
        return web.json_response(self._instance_links(instance_id), status=202)

    async def _raise_event(self, request: web.Request) -> web.Response:
        instance_id = request.match_info["instance_id"]
        status = await self.engine.get_status(instance_id, show_input=False)
        if status is None:
            return _message(404, f"No instance with ID '{instance_id}' found.")
        if status.runtime_status.is_terminal:
            return _message(410, f"Instance '{instance_id}' is {status.runtime_status.value}.")
        await self.engine.raise_event(
            instance_id, request.match_info["event"], await _payload(request)
        )
        return web.json_response(None, status=202)

    async def _get_status(self, request: web.Request) -> web.Response:
        instance_id = request.match_info["instance_id"]
        status = await self.engine.get_status(
            instance_id,
            show_history=_flag(request, "showHistory", False),
            show_input=_flag(request, "showInput", True),
        )
        if status is None:
            return _message(404, f"No instance with ID '{instance_id}' found.")
        finished = status.runtime_status.is_terminal
        body = status.to_json(show_history_output=_flag(request, "showHistoryOutput", False))
        return web.json_response(body, status=200 if finished else 202)

    async def _query(self, request: web.Request) -> web.Response:
        statuses_arg = request.query.get("runtimeStatus")
        created_from = request.query.get("createdTimeFrom")
        created_to = request.query.get("createdTimeTo")
        try:
            runtime_statuses = (
                [RuntimeStatus(s) for s in statuses_arg.split(",")] if statuses_arg else None
            )
            time_from = parse_timestamp(created_from) if created_from else None
            time_to = parse_timestamp(created_to) if created_to else None
        except ValueError as error:
            return _message(400, f"invalid query: {error}")
        statuses = await self.engine.get_status_by(runtime_statuses, time_from, time_to)
        prefix = request.query.get("instanceIdPrefix", "")
        return web.json_response(
            [s.to_json() for s in statuses if s.instance_id.startswith(prefix)]
        )

    async def _terminate(self, request: web.Request) -> web.Response:
        instance_id = request.match_info["instance_id"]
        if await self.engine.get_status(instance_id, show_input=False) is None:
            return _message(404, f"No instance with ID '{instance_id}' found.")
        terminated = await self.engine.terminate(instance_id, request.query.get("reason", ""))
        if not terminated:
            return _message(410, f"Instance '{instance_id}' is not running.")
        return web.json_response(None, status=202)

    async def _purge(self, request: web.Request) -> web.Response:
        deleted = await self.engine.purge_instance_history(request.match_info["instance_id"])
        if not deleted:
            return _message(404, "No instance was purged.")
        return web.json_response({"instancesDeleted": deleted})

    def _instance_links(self, instance_id: str) -> dict[str, Any]:
        urls = json.loads(self.client_binding_json())["managementUrls"]
        links = {
            key: value.replace(_INSTANCE_ID_PLACEHOLDER, instance_id) for key, value in urls.items()
        }
        return {**links, "id": instance_id}


async def _payload(request: web.Request) -> Any:
    """Decode a request body.

    The SDK serialises inputs and event data to a JSON string and then posts that string
    as JSON, so a body that decodes to a string holding JSON is decoded once more.
    """
    text = await request.text()
    if not text:
        return None
    value = json.loads(text)
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


def _flag(request: web.Request, name: str, default: bool) -> bool:
    value = request.query.get(name)
    return default if value is None else value.lower() == "true"


def _message(status: int, message: str) -> web.Response:
    return web.json_response(message, status=status)

"""httpTrigger: routing with the host's template rules, methods, responses, failures, and
function keys checked as on Azure (401 without a valid key; anonymous routes open)."""

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import azure.functions as func
import pytest

from devhost.function_keys import FunctionKeys
from devhost.indexing import index_app
from devhost.invocation import FunctionInvoker
from devhost.settings import AppSettings
from devhost.triggers.http import HttpTriggerServer

TIMEOUT = aiohttp.ClientTimeout(total=10)
KEYS = FunctionKeys(function="function-key-1", master="master-key-1")
KEYED = {"x-functions-key": KEYS.function}


def build_app() -> func.FunctionApp:
    app = func.FunctionApp(http_auth_level=func.AuthLevel.FUNCTION)

    @app.route(route="orders/{order_id}", methods=["GET"])
    def get_order(req: func.HttpRequest) -> func.HttpResponse:
        return func.HttpResponse(
            f'{{"order": "{req.route_params["order_id"]}", "q": "{req.params.get("q")}"}}',
            mimetype="application/json",
        )

    @app.route(route="orders/{order_id}/retry", methods=["POST"])
    async def retry(req: func.HttpRequest) -> func.HttpResponse:
        return func.HttpResponse(req.get_body(), status_code=202)

    @app.route(route="items/{n:int}/{tail?}")
    def item(req: func.HttpRequest) -> str:
        return f"{req.route_params['n']}|{req.route_params.get('tail', '-')}"

    @app.route(route="open", auth_level=func.AuthLevel.ANONYMOUS)
    def open_route(req: func.HttpRequest) -> str:
        return "open"

    @app.route(route="host-only", auth_level=func.AuthLevel.ADMIN)
    def host_only(req: func.HttpRequest) -> str:
        return "admin"

    @app.route(route="boom")
    def boom(req: func.HttpRequest) -> func.HttpResponse:
        raise RuntimeError("secret internals")

    return app


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[str]:
    invoker = FunctionInvoker(str(tmp_path), max_threads=2)
    http = HttpTriggerServer(index_app(build_app(), AppSettings({})), invoker, keys=KEYS)
    await http.start()
    yield f"http://127.0.0.1:{http.port}"
    await http.stop()
    invoker.close()


async def test_route_parameters_query_and_json_response(server: str) -> None:
    async with (
        aiohttp.ClientSession(timeout=TIMEOUT, headers=KEYED) as session,
        session.get(f"{server}/api/orders/o-17?q=x") as response,
    ):
        assert response.status == 200
        assert response.content_type == "application/json"
        assert await response.json() == {"order": "o-17", "q": "x"}


async def test_method_filter_and_async_function(server: str) -> None:
    async with aiohttp.ClientSession(timeout=TIMEOUT, headers=KEYED) as session:
        async with session.post(f"{server}/api/orders/o-1/retry", data=b"again") as response:
            assert (response.status, await response.read()) == (202, b"again")
        async with session.delete(f"{server}/api/orders/o-1") as response:
            assert response.status == 404


async def test_constraints_and_optional_segment(server: str) -> None:
    async with aiohttp.ClientSession(timeout=TIMEOUT, headers=KEYED) as session:
        async with session.get(f"{server}/api/items/42/more") as response:
            assert await response.text() == "42|more"
        async with session.get(f"{server}/api/items/42") as response:
            assert await response.text() == "42|-"
        async with session.get(f"{server}/api/items/abc") as response:
            assert response.status == 404


async def test_failure_is_a_500_without_internals(server: str) -> None:
    async with (
        aiohttp.ClientSession(timeout=TIMEOUT, headers=KEYED) as session,
        session.get(f"{server}/api/boom") as response,
    ):
        assert response.status == 500
        assert "secret internals" not in await response.text()


async def test_a_function_level_route_needs_a_function_or_master_key(server: str) -> None:
    async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
        async with session.get(f"{server}/api/orders/o-1") as response:
            assert response.status == 401
        async with session.get(
            f"{server}/api/orders/o-1", headers={"x-functions-key": "wrong"}
        ) as response:
            assert response.status == 401
        async with session.get(f"{server}/api/orders/o-1?code={KEYS.function}") as response:
            assert response.status == 200
        async with session.get(
            f"{server}/api/orders/o-1", headers={"x-functions-key": KEYS.master}
        ) as response:
            assert response.status == 200


async def test_admin_routes_take_the_master_key_only_and_anonymous_ones_none(server: str) -> None:
    async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
        async with session.get(f"{server}/api/open") as response:
            assert (response.status, await response.text()) == (200, "open")
        async with session.get(f"{server}/api/host-only", headers=KEYED) as response:
            assert response.status == 401
        async with session.get(f"{server}/api/host-only?code={KEYS.master}") as response:
            assert (response.status, await response.text()) == (200, "admin")


def test_keys_come_from_settings_or_a_keys_file_made_once(tmp_path: Path) -> None:
    made = FunctionKeys.load(tmp_path, {})
    assert FunctionKeys.read(tmp_path) == made
    assert FunctionKeys.load(tmp_path, {}) == made
    assert (tmp_path / "keys.json").stat().st_mode & 0o077 == 0
    chosen = FunctionKeys.load(tmp_path, {"DEVHOST_FUNCTION_KEY": "mine"})
    assert (chosen.function, chosen.master) == ("mine", made.master)


def test_a_route_starting_with_admin_is_refused_as_the_host_refuses_it(tmp_path: Path) -> None:
    app = func.FunctionApp(http_auth_level=func.AuthLevel.FUNCTION)

    @app.route(route="admin/orders")
    def admin_orders(req: func.HttpRequest) -> str:
        return "never"

    invoker = FunctionInvoker(str(tmp_path), max_threads=1)
    try:
        with pytest.raises(ValueError, match="conflicts with the host's built-in routes"):
            HttpTriggerServer(index_app(app, AppSettings({})), invoker, keys=KEYS)
    finally:
        invoker.close()

"""httpTrigger: routing with the host's template rules, methods, responses, failures."""

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import azure.functions as func
import pytest

from devhost.indexing import index_app
from devhost.invocation import FunctionInvoker
from devhost.settings import AppSettings
from devhost.triggers.http import HttpTriggerServer

TIMEOUT = aiohttp.ClientTimeout(total=10)


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

    @app.route(route="boom")
    def boom(req: func.HttpRequest) -> func.HttpResponse:
        raise RuntimeError("secret internals")

    return app


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[str]:
    invoker = FunctionInvoker(str(tmp_path), max_threads=2)
    http = HttpTriggerServer(index_app(build_app(), AppSettings({})), invoker)
    await http.start()
    yield f"http://127.0.0.1:{http.port}"
    await http.stop()
    invoker.close()


async def test_route_parameters_query_and_json_response(server: str) -> None:
    async with (
        aiohttp.ClientSession(timeout=TIMEOUT) as session,
        session.get(f"{server}/api/orders/o-17?q=x") as response,
    ):
        assert response.status == 200
        assert response.content_type == "application/json"
        assert await response.json() == {"order": "o-17", "q": "x"}


async def test_method_filter_and_async_function(server: str) -> None:
    async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
        async with session.post(f"{server}/api/orders/o-1/retry", data=b"again") as response:
            assert (response.status, await response.read()) == (202, b"again")
        async with session.delete(f"{server}/api/orders/o-1") as response:
            assert response.status == 404


async def test_constraints_and_optional_segment(server: str) -> None:
    async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
        async with session.get(f"{server}/api/items/42/more") as response:
            assert await response.text() == "42|more"
        async with session.get(f"{server}/api/items/42") as response:
            assert await response.text() == "42|-"
        async with session.get(f"{server}/api/items/abc") as response:
            assert response.status == 404


async def test_failure_is_a_500_without_internals(server: str) -> None:
    async with (
        aiohttp.ClientSession(timeout=TIMEOUT) as session,
        session.get(f"{server}/api/boom") as response,
    ):
        assert response.status == 500
        assert "secret internals" not in await response.text()

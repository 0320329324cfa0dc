"""Every bad input gets the API's own error shape and the right status, never a 500: malformed, nested and
oversized JSON, unknown models, bad parameters, max_tokens over the limit, missing or wrong keys, unsupported
parts and parameters, logprobs beyond what an engine gives; and a server that is not safe to start does not."""

from __future__ import annotations

import asyncio
import socket

import pytest

from app.core.errors import InvalidInputError
from app.services.api.catalog import ModelCatalog
from app.services.api.config import PortInUseError, ServerConfig
from app.services.api.server import ApiServer
from app.services.engines.host import EngineHost
from tests.support.api_harness import ApiHarness
from tests.support.gguf_factory import write_tiny_gguf

pytestmark = pytest.mark.timeout(120)

KEY = "sk-test-0123456789"
HI = [{"role": "user", "content": "hi"}]
CHAT = {"model": "tiny-chat", "messages": HI, "max_tokens": 2}
MESSAGE = {"model": "tiny-chat", "messages": HI, "max_tokens": 2}


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    folder = tmp_path_factory.mktemp("api-bad")
    write_tiny_gguf(folder / "tiny-chat.gguf", name="tiny-chat")
    config = ServerConfig(port=0, api_key=KEY, max_body_bytes=64 * 1024, max_tokens_limit=256,
                          cors_origins=("http://allowed.example",))  # fmt: skip
    with ApiHarness(folder, config) as harness:
        yield harness


def openai_error(response, status, param=None):
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    assert error["type"] == ("invalid_request_error" if status < 500 else "server_error")
    if param is not None:
        assert error["param"] == param
    return error


def anthropic_error(response, status, kind):
    assert response.status_code == status, response.text
    body = response.json()
    assert body["type"] == "error" and body["error"]["type"] == kind and body["error"]["message"]
    return body["error"]


@pytest.mark.parametrize(
    ("body", "why"),
    [(b"{not json", "not valid JSON"), (b"[" * 30_000 + b"]" * 30_000, "nested too deeply"),
     (b"[1, 2]", "must be a JSON object"), (b"", "no body")],
)  # fmt: skip
def test_bad_json_is_a_400_in_both_shapes(api, body, why):
    with api.http(KEY) as http:
        headers = {"content-type": "application/json"}
        error = openai_error(http.post("/v1/chat/completions", content=body, headers=headers), 400)
        assert why in error["message"]
        assert why in anthropic_error(http.post("/v1/messages", content=body, headers=headers), 400,
                                      "invalid_request_error")["message"]  # fmt: skip


def test_an_oversized_body_is_refused_before_it_is_read(api):
    big = {**CHAT, "messages": [{"role": "user", "content": "x" * 100_000}]}
    with api.http(KEY) as http:
        error = openai_error(http.post("/v1/chat/completions", json=big), 413)
        assert "65,536 bytes" in error["message"]
        anthropic_error(http.post("/v1/messages", json={**MESSAGE, **big}), 413, "request_too_large")


def test_an_unknown_model_is_a_404_that_lists_the_models(api):
    import anthropic
    import openai

    with pytest.raises(openai.NotFoundError) as caught:
        api.openai(KEY).chat.completions.create(model="no-such-model", messages=HI)
    assert "tiny-chat" in caught.value.message and caught.value.body["code"] == "model_not_found"
    with pytest.raises(anthropic.NotFoundError) as missing:
        api.anthropic(KEY).messages.create(model="no-such-model", max_tokens=2, messages=HI)
    assert missing.value.body["error"]["type"] == "not_found_error"


@pytest.mark.parametrize(
    ("change", "param"),
    [({"temperature": 5}, "temperature"), ({"top_p": "high"}, "top_p"), ({"max_tokens": 0}, "max_tokens"),
     ({"n": 9}, "n"), ({"stop": [""]}, "stop"), ({"seed": 1.5}, "seed"), ({"messages": []}, "messages"),
     ({"messages": [{"role": "wizard", "content": "x"}]}, "messages[0]"),
     ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
      "messages[0].content"),
     ({"logit_bias": {"42": 5}}, "logit_bias"), ({"top_logprobs": 3}, "top_logprobs"),
     ({"logprobs": True, "top_logprobs": 50}, "top_logprobs"), ({"tool_choice": "required"}, "tools"),
     ({"response_format": {"type": "xml"}}, "response_format"), ({"keep_alive": "soon"}, "keep_alive"),
     ({"model": 42}, "model")],
)  # fmt: skip
def test_bad_parameters_are_400_naming_the_parameter(api, change, param):
    with api.http(KEY) as http:
        openai_error(http.post("/v1/chat/completions", json={**CHAT, **change}), 400, param)


def test_max_tokens_over_the_limit_is_refused_in_both_apis(api):
    with api.http(KEY) as http:
        error = openai_error(http.post("/v1/chat/completions", json={**CHAT, "max_tokens": 257}), 400, "max_tokens")
        assert "256" in error["message"]
        openai_error(http.post("/v1/chat/completions", json={**CHAT, "max_completion_tokens": 9999}), 400)
        anthropic_error(http.post("/v1/messages", json={**MESSAGE, "max_tokens": 257}), 400, "invalid_request_error")
        anthropic_error(http.post("/v1/messages", json={"model": "tiny-chat", "messages": HI}), 400,
                        "invalid_request_error")  # fmt: skip  # Anthropic requires max_tokens


def test_anthropic_bad_blocks_are_400(api):
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}}
    with api.http(KEY) as http:
        for change in ({"messages": [{"role": "user", "content": [image]}]}, {"system": 5},
                       {"tool_choice": {"type": "sometimes"}}, {"tools": [{"name": "x", "input_schema": 3}]},
                       {"messages": [{"role": "system", "content": "x"}]},  # system entries alone: nothing to answer
                       {"messages": [*HI, {"role": "system", "content": 5}]}):  # fmt: skip
            anthropic_error(http.post("/v1/messages", json={**MESSAGE, **change}), 400, "invalid_request_error")


def test_a_missing_or_wrong_key_is_401_and_either_header_works(api):
    with api.http() as http:
        error = openai_error(http.post("/v1/chat/completions", json=CHAT), 401)
        assert error["code"] == "missing_api_key"
        assert openai_error(http.get("/v1/models", headers={"Authorization": "Bearer wrong"}), 401)["code"] == (
            "invalid_api_key"
        )
        anthropic_error(http.post("/v1/messages", json=MESSAGE, headers={"x-api-key": "wrong"}), 401,
                        "authentication_error")  # fmt: skip
        assert http.get("/v1/models", headers={"x-api-key": KEY}).status_code == 200
        assert http.get("/v1/models", headers={"Authorization": f"Bearer {KEY}"}).status_code == 200
        assert http.get("/health").status_code == 200  # health needs no key
    assert api.openai(KEY).models.list().data[0].id == "tiny-chat"
    assert api.anthropic(KEY).messages.create(model="tiny-chat", max_tokens=2, messages=HI).usage.output_tokens == 2
    assert KEY not in repr(api.records)


def test_unknown_routes_and_methods_answer_in_the_apis_shape(api):
    with api.http(KEY) as http:
        assert openai_error(http.get("/v1/nothing"), 404)["code"] == "not_found"
        assert openai_error(http.get("/v1/chat/completions"), 405)["code"] == "method_not_allowed"


def test_cors_answers_only_the_listed_origins(api):
    with api.http(KEY) as http:
        preflight = {"Origin": "http://allowed.example", "Access-Control-Request-Method": "POST",
                     "Access-Control-Request-Headers": "authorization,content-type"}  # fmt: skip
        allowed = http.options("/v1/chat/completions", headers=preflight)
        assert allowed.headers.get("access-control-allow-origin") == "http://allowed.example"
        other = http.get("/v1/models", headers={"Origin": "http://elsewhere.example"})
        assert "access-control-allow-origin" not in other.headers


def test_a_server_without_cors_origins_sends_no_cors_headers(tmp_path):
    with ApiHarness(None, ServerConfig(port=0)) as api, api.http() as http:
        response = http.get("/v1/models", headers={"Origin": "http://page.example"})
        assert response.status_code == 200 and "access-control-allow-origin" not in response.headers


def test_a_reachable_address_without_a_key_and_a_taken_port_do_not_start():
    async def attempt(config: ServerConfig) -> None:
        host = EngineHost()
        server = ApiServer(host, ModelCatalog(host), config)
        try:
            await server.start()
        finally:
            await server.stop()
            await host.close()

    with pytest.raises(InvalidInputError, match="needs an API key"):
        asyncio.run(attempt(ServerConfig(host="0.0.0.0", port=0)))
    taken = socket.create_server(("127.0.0.1", 0))
    try:
        with pytest.raises(PortInUseError, match="already in use"):
            asyncio.run(attempt(ServerConfig(port=taken.getsockname()[1])))
    finally:
        taken.close()

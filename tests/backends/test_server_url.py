"""One reading of a model server's address for every client: the vLLM backend, the batch runner, the Bench page."""

from __future__ import annotations

import pytest

from app.backends.protocol import BackendError
from app.backends.server_url import ServerAddressError, normalize_server_url
from app.backends.vllm import DEFAULT_URL, normalize_url
from app.core.errors import ErrorKind, InvalidInputError
from app.services.batch.runner import BatchRunner


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("http://127.0.0.1:8000", "http://127.0.0.1:8000"),
        (" http://gpu-box:8000/v1/ ", "http://gpu-box:8000"),
        ("127.0.0.1:8000", "http://127.0.0.1:8000"),  # no scheme: http
        ("localhost:9000/v1", "http://localhost:9000"),
        ("https://api.example.com/proxy/v1", "https://api.example.com/proxy"),  # a proxy's path is kept
        ("https://api.example.com/proxy/", "https://api.example.com/proxy"),
        ("http://[::1]:8000/v1", "http://[::1]:8000"),
        ("http://host:8000/v1?x=1#top", "http://host:8000"),
        ("http://host:", "http://host"),
    ],
)
def test_addresses_are_normalized(given, expected):
    assert normalize_server_url(given) == expected


@pytest.mark.parametrize(
    "bad",
    ["ftp://host", "http://", "http://:80", "http://host:notaport", "http://host:70000", "http://exa mple:80", "\x00"],
)
def test_what_is_not_an_http_address_is_refused(bad):
    with pytest.raises(ServerAddressError, match=r"is not an http:// or https:// address\. Use one like http://"):
        normalize_server_url(bad)


@pytest.mark.parametrize("bad", ["http://user:pw@host:8000", "user:pw@host", "ftp://user:pw@host"])
def test_credentials_in_the_address_are_refused_without_repeating_them(bad):
    with pytest.raises(ServerAddressError, match="user name or password") as caught:
        normalize_server_url(bad)
    assert "pw" not in str(caught.value)


def test_no_address_is_the_default_or_an_error():
    assert normalize_server_url("  ", default=DEFAULT_URL) == DEFAULT_URL
    for empty in ("", "  ", None):
        with pytest.raises(ServerAddressError, match="No server address was given"):
            normalize_server_url(empty)


def test_the_error_is_a_backend_error_and_invalid_input():
    with pytest.raises(ServerAddressError) as caught:
        normalize_server_url("ftp://host")
    error = caught.value
    assert isinstance(error, BackendError) and isinstance(error, InvalidInputError) and isinstance(error, ValueError)
    assert (error.kind, error.setting) == (ErrorKind.INVALID_INPUT, "endpoint")


@pytest.mark.parametrize("given", ["localhost:9000", " http://10.0.0.2:8000/v1/ ", "https://gpu.example.org/vllm/"])
def test_the_vllm_backend_and_the_batch_runner_agree(given):
    assert normalize_url(given) == BatchRunner(given).endpoint == normalize_server_url(given)

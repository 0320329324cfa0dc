"""The MCP manager with real MCP servers from the ``mcp`` SDK (tests/support/mcp_test_server.py) over stdio and
Streamable HTTP, and the app's built-in server: state, tools and their schemas, calls with a timeout and
cancellation, a server that crashes mid-call, a 10 MB result, and what the servers' environment holds."""

from __future__ import annotations

import asyncio
import logging
import sys

import pytest

from app.core.mcp.config import BUILTIN_NAME, McpConfig, ServerConfig, builtin_server
from app.core.mcp.folder import MAX_READ_BYTES
from app.core.mcp.results import MAX_RESULT_BYTES
from app.services.mcp.config_file import McpConfigFile
from app.services.mcp.connection import McpCallError, ServerState
from app.services.mcp.manager import McpManager
from tests.support.mcp_servers import http_server, stdio_server
from tests.support.mcp_test_server import FAILED_LINE, SLOW_STARTED_LINE, STARTED_LINE
from tests.support.waiting import until


def run(coro, timeout=120):
    return asyncio.run(asyncio.wait_for(coro, timeout))


async def with_manager(servers, work):
    manager = McpManager(config=McpConfig(list(servers)))
    try:
        await manager.start_enabled()
        return await work(manager)
    finally:
        await manager.close()


def test_a_stdio_server_is_started_its_tools_listed_and_called(caplog):
    caplog.set_level(logging.INFO, logger="app.services.mcp")

    async def work(manager):
        status = manager.status("test")
        assert status.state is ServerState.READY and status.error is None
        tools = {tool.name: tool for tool in status.tools}
        assert set(tools) == {"add", "env_value", "big", "slow", "meet", "exit_later", "crash"}
        schema = tools["add"].input_schema
        assert schema["type"] == "object" and set(schema["required"]) == {"a", "b"}
        assert schema["properties"]["a"]["type"] == "integer" and tools["add"].description == "Add two integers."
        assert [t.name for t in manager.tools()] == list(tools)
        result = await manager.call_tool("test", "add", {"a": 2, "b": 40})
        assert (result.text, result.is_error) == ("42", False)
        refused = await manager.call_tool("test", "add", {"a": "two", "b": 1})  # the tool's answer: an error
        assert refused.is_error and "validation error" in refused.text
        with pytest.raises(McpCallError, match="has no tool named 'nope'"):
            await manager.call_tool("test", "nope")
        with pytest.raises(McpCallError, match="no MCP server named 'other'"):
            await manager.call_tool("other", "add")

    run(with_manager([stdio_server()], work))
    assert f"MCP server test: {STARTED_LINE}" in caplog.text  # its stderr is in the app's log
    assert "MCP server test is ready with 7 tools" in caplog.text


def test_the_server_gets_the_safe_environment_and_its_own_env_only_and_env_values_stay_out_of_the_log(
    caplog, monkeypatch
):
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("LLMW_TEST_APP_SECRET", "app-secret-value")
    config = stdio_server(env={"MCP_TEST_TOKEN": "tok-very-secret-42"})

    async def work(manager):
        async def value(name):
            return (await manager.call_tool("test", "env_value", {"name": name})).text

        return [await value(n) for n in ("MCP_TEST_TOKEN", "LLMW_TEST_APP_SECRET", "LLMW_HOME", "PATH")]

    token, app_secret, home, path = run(with_manager([config], work))
    assert token == "tok-very-secret-42"
    assert app_secret == "<unset>" and home == "<unset>"  # the app's environment is not passed on
    assert path != "<unset>"  # the SDK's safe default environment is
    assert "tok-very-secret-42" not in caplog.text and "tok-very-secret-42" not in repr(config)
    assert "MCP_TEST_TOKEN" in caplog.text  # the log says which variables were set, not their values


def test_a_server_that_crashes_mid_call_is_reported_and_the_manager_lives_on():
    async def work(manager):
        with pytest.raises(McpCallError) as caught:
            await asyncio.wait_for(manager.call_tool("doomed", "crash"), 60)  # reported, not a hang
        assert "stopped during the call to crash" in str(caught.value)
        assert "test server: crashing now" in str(caught.value)  # its last stderr line says why
        status = manager.status("doomed")
        assert status.state is ServerState.FAILED and "stopped during the call" in status.error
        assert status.tools == () and manager.status("other").state is ServerState.READY
        assert "test server: crashing now" in manager.stderr_tail("doomed")
        with pytest.raises(McpCallError, match=r"'doomed' is not running \(failed: the server stopped"):
            await manager.call_tool("doomed", "add", {"a": 1, "b": 1})
        assert (await manager.call_tool("other", "add", {"a": 1, "b": 1})).text == "2"
        restarted = await manager.restart("doomed")
        assert restarted.state is ServerState.READY and restarted.error is None
        assert (await manager.call_tool("doomed", "add", {"a": 2, "b": 2})).text == "4"

    run(with_manager([stdio_server("doomed"), stdio_server("other")], work))


def test_a_server_that_exits_while_idle_is_reported_failed():
    async def work(manager):
        assert (await manager.call_tool("test", "exit_later", {"seconds": 0.2})).text == "bye"
        await until(lambda: manager.status("test").state is ServerState.FAILED, timeout=60)
        assert manager.status("test").error == "the server exited (its last output: test server: leaving)"
        restarted = await manager.restart("test")
        assert restarted.state is ServerState.READY

    run(with_manager([stdio_server()], work))


def test_a_changed_configuration_is_saved_and_applied(tmp_path):
    async def work():
        config_file = McpConfigFile(tmp_path / "mcp-servers.json")
        manager = McpManager(config_file)
        try:
            await manager.load()
            await manager.apply(McpConfig([builtin_server(enabled=False), stdio_server("a"), stdio_server("b")]))
            await manager.start_enabled()
            first_a = manager._connections["a"]
            changed = McpConfig([builtin_server(), stdio_server("a"), stdio_server("b", env={"K": "v"})])
            await manager.apply(changed)
            assert manager._connections["a"] is first_a and first_a.state is ServerState.READY  # untouched
            assert manager.status("b").state is ServerState.READY  # restarted with its new env
            assert (await manager.call_tool("b", "env_value", {"name": "K"})).text == "v"
            assert manager.status(BUILTIN_NAME).state is ServerState.READY  # enabled: started
            await manager.apply(McpConfig([builtin_server(enabled=False), stdio_server("a")]))
            assert first_a.state is ServerState.READY and [s.name for s in manager.statuses()] == [BUILTIN_NAME, "a"]
            assert manager.status(BUILTIN_NAME).state is ServerState.DISABLED
            assert McpConfigFile(config_file.path).load() == manager.config
        finally:
            await manager.close()

    run(work())


def test_a_server_that_fails_to_start_says_why():
    servers = [
        stdio_server("broken", "--fail-at-start"),
        ServerConfig("missing", command="/nonexistent/mcp-server"),
        ServerConfig("nowhere", command=sys.executable, cwd="/nonexistent/folder"),
    ]

    async def work(manager):
        broken, missing, nowhere = (manager.status(name) for name in ("broken", "missing", "nowhere"))
        assert broken.state is ServerState.FAILED and FAILED_LINE in broken.error
        assert missing.state is ServerState.FAILED and "/nonexistent/mcp-server was not found" in missing.error
        assert nowhere.error == "its working folder /nonexistent/folder does not exist"

    run(with_manager(servers, work))


def test_a_server_that_never_answers_fails_after_the_start_timeout():
    silent = ServerConfig("silent", command="sleep", args=("600",))

    async def work():
        manager = McpManager(config=McpConfig([silent]))
        try:
            status = await manager.start("silent", timeout=1.5)
        finally:
            await asyncio.wait_for(manager.close(), 120)  # closed, not waited for to the end of its ten minutes
        assert status.state is ServerState.FAILED and "did not answer within 1.5 s" in status.error

    run(work())


def test_a_10_mb_result_arrives_whole_and_is_cut_to_64_kib_for_the_model():
    async def work(manager):
        return await manager.call_tool("test", "big", {"size": 10_000_000})

    result = run(with_manager([stdio_server()], work))
    assert result.total_bytes == 10_000_000 and not result.is_error
    cut = result.for_model()
    assert cut.truncated and cut.total_bytes == 10_000_000 and len(cut.text.encode()) <= MAX_RESULT_BYTES
    assert "of 10,000,000 bytes are shown" in cut.text


def test_a_call_times_out_and_a_cancelled_call_ends_at_once():
    async def work(manager):
        with pytest.raises(McpCallError, match=r"did not answer the call to slow within 0\.5 s"):
            await manager.call_tool("test", "slow", {"seconds": 600}, timeout=0.5)  # else: "done" in 10 minutes
        started = manager.stderr_tail("test").count(SLOW_STARTED_LINE)
        call = asyncio.create_task(manager.call_tool("test", "slow", {"seconds": 600}))
        await until(lambda: manager.stderr_tail("test").count(SLOW_STARTED_LINE) > started)  # in flight
        call.cancel()
        done, _ = await asyncio.wait({call}, timeout=60)  # at once, not when the ten-minute call ends
        assert call in done and call.cancelled()
        assert manager.status("test").state is ServerState.READY  # the server goes on
        assert (await manager.call_tool("test", "add", {"a": 3, "b": 4})).text == "7"

    run(with_manager([stdio_server()], work))


def test_a_streamable_http_server():
    with http_server() as url:
        web = ServerConfig("web", url=url, headers={"X-Test-Token": "header-secret"})

        async def work(manager):
            status = manager.status("web")
            assert status.state is ServerState.READY and status.transport == "http"
            assert {t.name for t in status.tools} == {"add", "env_value", "big", "slow", "meet", "exit_later", "crash"}
            assert (await manager.call_tool("web", "add", {"a": 20, "b": 22})).text == "42"
            big = await manager.call_tool("web", "big", {"size": 10_000_000})
            assert big.total_bytes == 10_000_000
            with pytest.raises(McpCallError, match="'web': the server stopped during the call to crash"):
                await manager.call_tool("web", "crash")
            assert manager.status("web").state is ServerState.FAILED
            await until(lambda: manager._connections["web"]._task.done(), timeout=60)  # the connection is closed

        run(with_manager([web], work))
    down = ServerConfig("down", url=url)
    status = run(with_manager([down], lambda manager: asyncio.sleep(0, manager.status("down"))))
    assert status.state is ServerState.FAILED and "cannot connect" in status.error


def test_state_changes_reach_listeners_and_stop_is_clean():
    seen = []

    async def work():
        manager = McpManager(config=McpConfig([stdio_server(), ServerConfig("off", command="x", enabled=False)]))
        manager.add_listener(lambda name: seen.append((name, manager.status(name).state)))
        assert manager.status("off").state is ServerState.DISABLED
        await manager.start_enabled()
        stopped = await manager.stop("test")
        assert stopped.state is ServerState.STOPPED and stopped.tools == () and manager.tools() == []
        await manager.close()

    run(work())
    assert seen == [("test", ServerState.STARTING), ("test", ServerState.READY), ("test", ServerState.STOPPED)]


# --- the built-in server ------------------------------------------------------------------------------------------
@pytest.fixture
def shared(tmp_path):
    root = tmp_path / "shared"
    root.mkdir()
    (root / "notes.txt").write_text("meeting at 10\n")
    (root / "big.log").write_bytes(b"a" * (MAX_READ_BYTES + 5000))
    (tmp_path / "secret.txt").write_text("top secret")
    (root / "escape").symlink_to(tmp_path / "secret.txt")
    return root


def test_the_builtin_server_reads_inside_its_folder_only_and_calculates_without_eval(shared):
    async def work(manager):
        status = manager.status("builtin")
        assert status.state is ServerState.READY and status.transport == "builtin"
        assert {t.name for t in status.tools} == {"calculate", "list_files", "read_file"}

        async def call(tool, **arguments):
            return await manager.call_tool("builtin", tool, arguments)

        return [
            await call("calculate", expression="(2 + 3) * 4 ** 2"),
            await call("calculate", expression="__import__('os').system('touch /tmp/pwned')"),
            await call("calculate", expression="9 ** 9 ** 9"),
            await call("list_files"),
            await call("read_file", path="notes.txt"),
            await call("read_file", path="../secret.txt"),
            await call("read_file", path=str(shared.parent / "secret.txt")),
            await call("read_file", path="escape"),
            await call("read_file", path="big.log"),
            await call("read_file", path="big.log", offset=MAX_READ_BYTES),
        ]

    calc, evil, huge, listing, notes, up, absolute, link, big, rest = run(
        with_manager([builtin_server(root=str(shared))], work)
    )
    assert (calc.text, calc.is_error) == ("80", False)
    assert evil.is_error and "found a function call" in evil.text
    assert huge.is_error and "exponents are limited" in huge.text
    assert "notes.txt  (14 bytes)" in listing.text and "escape  (a link leading outside" in listing.text
    assert notes.text == "meeting at 10\n"
    assert up.is_error and "leads outside the folder" in up.text
    assert absolute.is_error and "is not relative to the folder" in absolute.text
    assert link.is_error and "leads outside the folder" in link.text and "top secret" not in link.text
    assert not big.is_error and big.text.startswith("a" * MAX_READ_BYTES + "\n[bytes 0 to")
    assert f"of {MAX_READ_BYTES + 5000:,}; read on with offset={MAX_READ_BYTES}]" in big.text
    assert rest.text.startswith("a" * 5000 + "\n[bytes")


def test_the_builtin_server_without_a_folder_has_the_calculator_only_and_a_missing_folder_fails(tmp_path):
    servers = [builtin_server(), ServerConfig("x", command="x", enabled=False)]
    tools = run(with_manager(servers, lambda manager: asyncio.sleep(0, manager.status("builtin").tools)))
    assert [t.name for t in tools] == ["calculate"]
    gone = builtin_server(root=str(tmp_path / "gone"))
    status = run(with_manager([gone], lambda manager: asyncio.sleep(0, manager.status("builtin"))))
    assert status.state is ServerState.FAILED and "does not exist or is not a folder" in status.error

"""The MCP servers' configuration: the mcp.json of Claude Desktop and Cursor, the app's own versioned format, and
the errors a malformed file gets (which entry, what is wrong; never a token's value)."""

from __future__ import annotations

import pytest

from app.core.mcp.config import (
    BUILTIN_NAME,
    McpConfig,
    McpConfigError,
    ServerConfig,
    merge_servers,
    parse_mcp_json,
)

CLAUDE_DESKTOP = {
    "mcpServers": {
        "filesystem": {
            "command": "npx",
            "args": ["-y", "@modelcontextprotocol/server-filesystem", "/Users/me/Desktop"],
        },
        "github": {"command": "docker", "args": ["run", "-i", "ghcr.io/github/github-mcp-server"],
                   "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_secret123"}},
    }
}  # fmt: skip
CURSOR = {
    "mcpServers": {
        "remote": {"url": "https://mcp.example.com/mcp", "headers": {"Authorization": "Bearer tok-123456"}},
        "off": {"command": "uvx", "args": ["mcp-server-time"], "disabled": True},
    }
}


def test_claude_desktop_and_cursor_files_are_read_in_order():
    servers = parse_mcp_json(CLAUDE_DESKTOP)
    assert [s.name for s in servers] == ["filesystem", "github"]
    assert servers[0].transport == "stdio" and servers[0].command == "npx"
    assert servers[0].args == ("-y", "@modelcontextprotocol/server-filesystem", "/Users/me/Desktop")
    assert servers[1].env == {"GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_secret123"}
    remote, off = parse_mcp_json(CURSOR)
    assert remote.transport == "http" and remote.url == "https://mcp.example.com/mcp" and remote.enabled
    assert remote.headers == {"Authorization": "Bearer tok-123456"}
    assert off.transport == "stdio" and not off.enabled


def test_vs_code_servers_with_a_type_are_read():
    data = {"servers": {"web": {"type": "http", "url": "http://127.0.0.1:8000/mcp"}, "t": {"type": "stdio",
            "command": "uvx", "args": []}}}  # fmt: skip
    web, local = parse_mcp_json(data)
    assert web.transport == "http" and local.transport == "stdio"


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ([], "does not hold a JSON object"),
        ({"servers_": {}}, 'no "mcpServers" object'),
        ({"mcpServers": []}, '"mcpServers" must be an object'),
        ({"mcpServers": {"a": "npx"}}, '"a" must be an object'),
        ({"mcpServers": {"a": {"args": ["x"]}}}, '"a" has neither a "command"'),
        ({"mcpServers": {"a": {"command": "x", "url": "http://h/mcp"}}}, '"a" has both a "command" and a "url"'),
        ({"mcpServers": {"a": {"command": "x", "args": "--port 3"}}}, '"a": "args" must be a list of strings'),
        ({"mcpServers": {"a": {"command": "x", "args": ["-p", 3]}}}, '"args" item 2 must be a string (it is a number)'),
        ({"mcpServers": {"a": {"command": ""}}}, '"a": "command" must be the name or path of a program'),
        ({"mcpServers": {"a": {"command": "x", "env": ["K=V"]}}}, '"a": "env" must be an object'),
        ({"mcpServers": {"a": {"command": "x", "env": {"PORT": 8080}}}}, "env 'PORT' must be a string"),
        ({"mcpServers": {"a": {"url": "ftp://h/x"}}}, '"a": "url" must be an http:// or https:// address'),
        ({"mcpServers": {"a": {"url": "http:///mcp"}}}, '"url" must be an http:// or https:// address'),
        ({"mcpServers": {"a": {"type": "sse", "url": "http://h/sse"}}}, "SSE servers are not supported"),
        ({"mcpServers": {"a": {"url": "http://h/mcp", "headers": {"X": 1}}}}, "headers 'X' must be a string"),
        ({"mcpServers": {"bad/name": {"command": "x"}}}, "a server name is 1 to 64 letters"),
        ({"mcpServers": {BUILTIN_NAME: {"command": "x"}}}, "the name of the app's own server"),
    ],
)  # fmt: skip
def test_a_malformed_mcp_json_says_which_entry_and_what_is_wrong(data, expected):
    with pytest.raises(McpConfigError) as caught:
        parse_mcp_json(data, source="mcp.json")
    assert expected in str(caught.value)
    assert str(caught.value).startswith("mcp.json")


def test_an_error_never_shows_a_token():
    data = {"mcpServers": {"gh": {"command": "x", "env": {"TOKEN": "ghp_abc\ndef"}}}}
    with pytest.raises(McpConfigError) as caught:
        parse_mcp_json(data)
    assert "TOKEN" in str(caught.value) and "ghp_abc" not in str(caught.value)


def test_repr_hides_env_and_header_values():
    stdio, http = ServerConfig("gh", command="x", env={"TOKEN": "ghp_secret"}), parse_mcp_json(CURSOR)[0]
    for server in (stdio, http):
        text = repr(server)
        assert "ghp_secret" not in text and "tok-123456" not in text and "***" in text
    assert "TOKEN" in repr(stdio)


def test_the_app_format_round_trips_and_keeps_the_builtin_entry():
    config = McpConfig()
    assert [s.name for s in config.servers] == [BUILTIN_NAME] and config.servers[0].builtin
    for server in parse_mcp_json(CLAUDE_DESKTOP) + parse_mcp_json(CURSOR):
        config.put(server)
    config.set_builtin_root("/home/me/Documents")
    config.set_enabled("github", False)
    again = McpConfig.from_dict(config.to_dict())
    assert again == config
    assert again.get(BUILTIN_NAME).root == "/home/me/Documents" and not again.get("github").enabled
    assert McpConfig.from_dict({"version": 1, "servers": []}).get(BUILTIN_NAME) is not None  # added back


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"version": 9, "servers": []}, "newer version of the app"),
        ({"version": 1, "servers": {}}, '"servers" must be a list'),
        ({"version": 1, "servers": [{"command": "x"}]}, 'server 1 must be an object with a "name"'),
        ({"version": 1, "servers": [{"name": "a", "command": "x"}, {"name": "a", "url": "http://h"}]}, "used twice"),
        ({"version": 1, "servers": [{"name": "a", "command": "x", "enabled": "yes"}]}, '"enabled" must be true'),
    ],
)
def test_a_malformed_app_file_is_refused(data, expected):
    with pytest.raises(McpConfigError, match=expected):
        McpConfig.from_dict(data)


def test_unknown_server_names_are_refused_with_the_configured_ones():
    with pytest.raises(McpConfigError, match="no MCP server named 'nope'; configured: builtin"):
        McpConfig().set_enabled("nope", True)


def test_merge_adds_new_names_and_keeps_existing_ones_unless_replacing():
    config = McpConfig()
    first = merge_servers(config, parse_mcp_json(CLAUDE_DESKTOP))
    assert first.added == ("filesystem", "github") and not first.skipped
    changed = [ServerConfig("github", command="gh-mcp"), ServerConfig("new", command="n")]
    second = merge_servers(config, changed)
    assert second.added == ("new",) and second.skipped == ("github",) and config.get("github").command == "docker"
    third = merge_servers(config, changed, replace_existing=True)
    assert third.replaced == ("github", "new") and config.get("github").command == "gh-mcp"
    assert [s.name for s in config.servers] == [BUILTIN_NAME, "filesystem", "github", "new"]

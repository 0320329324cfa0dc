"""``llm-workstation mcp list|import|enable|disable|folder`` through ``main()`` (and once as a process), with the
real test MCP server and the built-in one."""

from __future__ import annotations

import json
import subprocess
import sys

from app.cli import main
from app.core.mcp.config import BUILTIN_NAME, McpConfig
from app.services.mcp.config_file import McpConfigFile
from app.services.paths import app_paths
from tests.support.mcp_servers import REPO, stdio_server


def cli(capsys, *argv):
    code = main(["mcp", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def configure(*servers):
    config = McpConfig()
    for server in servers:
        config.put(server)
    McpConfigFile(app_paths().ensure().mcp_servers_file).save(config)


def test_list_json_starts_the_servers_and_shows_their_tools(capsys, tmp_path):
    configure(stdio_server(env={"MCP_TEST_TOKEN": "cli-secret-token"}))
    code, out, err = cli(capsys, "folder", str(tmp_path))
    assert code == 0 and str(tmp_path) in out
    code, out, err = cli(capsys, "list", "--json")
    assert code == 0, err
    builtin, test = json.loads(out)
    assert builtin["name"] == BUILTIN_NAME and builtin["transport"] == "builtin" and builtin["state"] == "ready"
    assert {t["name"] for t in builtin["tools"]} == {"calculate", "list_files", "read_file"}
    assert test["state"] == "ready" and test["error"] is None and test["transport"] == "stdio"
    add = next(t for t in test["tools"] if t["name"] == "add")
    assert add["description"] == "Add two integers." and set(add["input_schema"]["properties"]) == {"a", "b"}
    assert "cli-secret-token" not in out + err


def test_list_no_start_and_text(capsys):
    configure(stdio_server())
    code, out, _ = cli(capsys, "list", "--json", "--no-start")
    assert code == 0
    assert [(s["name"], s["state"], s["tools"]) for s in json.loads(out)] == [
        (BUILTIN_NAME, "stopped", []),
        ("test", "stopped", []),
    ]
    code, out, _ = cli(capsys, "disable", BUILTIN_NAME)
    assert code == 0 and out.strip() == f"{BUILTIN_NAME} disabled"
    code, out, _ = cli(capsys, "list")
    assert code == 0
    assert f"{BUILTIN_NAME} (built-in): disabled" in out and "test (stdio): ready, 7 tools" in out
    assert "  add(a, b)  Add two integers." in out


def test_list_exits_1_when_a_server_fails(capsys, tmp_path):
    configure(stdio_server("broken", "--fail-at-start"))
    code, out, _ = cli(capsys, "list", "--json")
    assert code == 1
    broken = next(s for s in json.loads(out) if s["name"] == "broken")
    assert broken["state"] == "failed" and "cannot open its database" in broken["error"]


def test_import_adds_servers_and_says_what_it_did(capsys, tmp_path):
    source = tmp_path / "claude_desktop_config.json"
    source.write_text(json.dumps({"mcpServers": {
        "files": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"]},
        "remote": {"url": "https://mcp.example.com/mcp", "headers": {"Authorization": "Bearer abcdefgh12345"}},
    }}))  # fmt: skip
    code, out, err = cli(capsys, "import", str(source))
    assert code == 0, err
    assert out.splitlines() == [
        "added files (npx -y @modelcontextprotocol/server-filesystem /tmp)",
        "added remote (https://mcp.example.com/mcp)",
    ]
    code, out, _ = cli(capsys, "import", str(source))
    assert code == 0 and "skipped files: a server of that name is configured already" in out
    code, out, _ = cli(capsys, "import", str(source), "--replace")
    assert code == 0 and "replaced remote (https://mcp.example.com/mcp)" in out
    config = McpConfigFile(app_paths().mcp_servers_file).load()
    assert [s.name for s in config.servers] == [BUILTIN_NAME, "files", "remote"]
    assert "abcdefgh12345" not in out


def test_a_malformed_mcp_json_exits_2_with_the_reason_and_changes_nothing(capsys, tmp_path):
    source = tmp_path / "mcp.json"
    source.write_text(json.dumps({"mcpServers": {"ok": {"command": "a"}, "bad": {"command": "b", "args": "-x"}}}))
    code, out, err = cli(capsys, "import", str(source))
    assert code == 2 and out == ""
    assert err.strip() == f'llm-workstation: {source}: server "bad": "args" must be a list of strings'
    assert not app_paths().mcp_servers_file.exists()
    source.write_text("{not json")
    code, _, err = cli(capsys, "import", str(source))
    assert code == 2 and "is not valid JSON" in err
    code, _, err = cli(capsys, "import", str(tmp_path / "missing.json"))
    assert code == 2 and "there is no file" in err


def test_an_unreadable_servers_file_is_reported_and_left_as_it_is(capsys, tmp_path):
    path = app_paths().ensure().mcp_servers_file
    path.write_text('{"version": 1, "servers": [{"name": 3}]}')
    source = tmp_path / "mcp.json"
    source.write_text(json.dumps({"mcpServers": {"ok": {"command": "a"}}}))
    for argv in (["list"], ["import", str(source)], ["enable", "ok"], ["folder", str(tmp_path)]):
        code, _, err = cli(capsys, *argv)
        assert code == 2 and "could not be read" in err, argv
    assert path.read_text() == '{"version": 1, "servers": [{"name": 3}]}'


def test_unknown_names_and_folders_exit_2(capsys, tmp_path):
    code, _, err = cli(capsys, "enable", "nope")
    assert code == 2 and "no MCP server named 'nope'; configured: builtin" in err
    code, _, err = cli(capsys, "folder", str(tmp_path / "missing"))
    assert code == 2 and "is not a folder" in err


def test_the_verb_as_a_process(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "app", "mcp", "list", "--json", "--no-start"],
        capture_output=True, text=True, timeout=120, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [
        {"name": BUILTIN_NAME, "transport": "builtin", "enabled": True, "state": "stopped", "error": None, "tools": []}
    ]

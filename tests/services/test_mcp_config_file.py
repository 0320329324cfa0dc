"""The MCP servers file: owner-only, written atomically, never written over when it could not be read (the app
then runs without MCP servers and says why), and the ``mcp`` SDK left unimported until a server starts."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import subprocess
import sys
import textwrap

import pytest

from app.core.mcp.config import BUILTIN_NAME, McpConfig, McpConfigError, ServerConfig
from app.services.mcp.config_file import McpConfigFile
from app.services.mcp.connection import ServerState
from app.services.paths import app_paths, secure_app_files
from app.services.workstation import Workstation
from tests.support.mcp_servers import REPO, stdio_server


def mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test_no_file_means_the_builtin_server_alone():
    config_file = McpConfigFile(app_paths().mcp_servers_file)
    config = config_file.load()
    assert [s.name for s in config.servers] == [BUILTIN_NAME] and config_file.problem is None
    assert not config_file.path.exists()  # reading creates nothing


def test_the_file_is_owner_only_and_round_trips():
    path = app_paths().mcp_servers_file
    config = McpConfig()
    config.put(ServerConfig("gh", command="gh-mcp", args=("--stdio",), env={"GITHUB_TOKEN": "ghp_x"}))
    McpConfigFile(path).save(config)
    assert mode(path) == 0o600 and mode(path.parent) == 0o700
    assert McpConfigFile(path).load() == config
    assert json.loads(path.read_text())["version"] == 1
    assert not path.with_name(path.name + ".tmp").exists()


def test_a_file_left_readable_by_others_is_made_owner_only():
    path = app_paths().mcp_servers_file
    McpConfigFile(path).save(McpConfig())
    os.chmod(path, 0o644)
    McpConfigFile(path).load()
    assert mode(path) == 0o600
    os.chmod(path, 0o644)
    assert path in secure_app_files()
    assert mode(path) == 0o600


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ('{"version": 1, "servers": [', "not valid JSON"),
        ('{"version": 7, "servers": []}', "newer version of the app"),
        ('{"version": 1, "servers": [{"name": "a", "command": 5}]}', '"command" must be the name or path'),
    ],
)
def test_an_unusable_file_is_reported_and_never_written_over(content, reason):
    path = app_paths().mcp_servers_file
    path.parent.mkdir(parents=True)
    path.write_text(content)
    config_file = McpConfigFile(path)
    assert config_file.load().servers == []  # no server runs meanwhile
    assert reason in config_file.problem and str(path) in config_file.problem
    assert "left it as it is" in config_file.problem
    with pytest.raises(McpConfigError, match="Nothing was saved"):
        config_file.save(McpConfig())
    assert path.read_text() == content


def test_a_folder_in_place_of_the_file_is_reported():
    path = app_paths().mcp_servers_file
    path.mkdir(parents=True)
    config_file = McpConfigFile(path)
    assert config_file.load().servers == [] and "is a folder" in config_file.problem


def test_the_workstation_owns_the_manager_and_stops_its_servers_on_close():
    paths = app_paths().ensure()
    config = McpConfig([ServerConfig(BUILTIN_NAME, builtin=True, enabled=False), stdio_server()])
    McpConfigFile(paths.mcp_servers_file).save(config)

    async def main():
        workstation = Workstation.create(paths)
        manager = workstation.mcp
        assert workstation.mcp is manager  # one per workstation
        await manager.load()
        statuses = await manager.start_enabled()
        assert [(s.name, s.state) for s in statuses] == [(BUILTIN_NAME, ServerState.DISABLED), ("test", "ready")]
        await workstation.close()
        return manager.status("test").state

    assert asyncio.run(asyncio.wait_for(main(), 60)) is ServerState.STOPPED


def test_a_broken_file_leaves_the_workstation_without_mcp_servers():
    paths = app_paths().ensure()
    paths.mcp_servers_file.write_text("{broken")

    async def main():
        workstation = Workstation.create(paths)
        try:
            await workstation.mcp.load()
            return workstation.mcp.problem, await workstation.mcp.start_enabled()
        finally:
            await workstation.close()

    problem, statuses = asyncio.run(main())
    assert "could not be read" in problem and statuses == []
    assert paths.mcp_servers_file.read_text() == "{broken"


def test_the_mcp_sdk_is_not_imported_until_a_server_starts():
    script = textwrap.dedent(
        """
        import asyncio, json, sys
        from app.cli import build_parser
        from app.services.paths import app_paths
        from app.services.workstation import Workstation
        build_parser()  # every verb's module, app.cli.mcp included
        async def main():
            workstation = Workstation.create(app_paths().ensure())
            await workstation.mcp.load()
            await workstation.close()
        asyncio.run(main())
        print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in ("mcp", "mcp_types", "httpx2"))))
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []

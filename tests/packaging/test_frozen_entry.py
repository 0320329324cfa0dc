"""How a frozen bundle starts its subprocesses: the llama.cpp worker through the bundle's own executable, and
the vLLM venv through a system python3 (the bundle has no interpreter to run ``-m``)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from app.backends.llamacpp import protocol
from app.backends.llamacpp.process import FROZEN_WORKER_FLAG, worker_command


def test_worker_command_uses_python_dash_m_from_source():
    assert worker_command() == [sys.executable, "-m", protocol.WORKER_MODULE]
    assert worker_command("/opt/py/bin/python") == ["/opt/py/bin/python", "-m", protocol.WORKER_MODULE]


def test_worker_command_uses_the_bundle_executable_when_frozen(monkeypatch):
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "executable", "/opt/llm-workstation/llm-workstation")
    assert worker_command() == ["/opt/llm-workstation/llm-workstation", FROZEN_WORKER_FLAG]
    assert worker_command("/usr/bin/python3")[1:] == ["-m", protocol.WORKER_MODULE]  # an explicit one wins


def test_entry_point_starts_the_worker_on_the_flag():
    """``python -m app --llamacpp-worker`` is the worker (as the bundle's executable is): hello, then shutdown."""
    proc = subprocess.run(
        [sys.executable, "-m", "app", FROZEN_WORKER_FLAG],
        input=protocol.encode({"op": "shutdown"}),
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    first = json.loads(proc.stdout.splitlines()[0])
    assert first["event"] == "hello" and isinstance(first["pid"], int)


def test_vllm_install_uses_system_python_when_frozen(monkeypatch, tmp_path):
    from app.services.vllm import environment as vllm_env

    monkeypatch.setattr(sys, "frozen", True, raising=False)
    python3 = tmp_path / "python3"
    python3.write_text("#!/bin/sh\n")
    python3.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert vllm_env._base_python() == str(python3)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(vllm_env.VllmInstallError, match="install python3"):
        vllm_env._base_python()


def test_children_of_a_bundle_get_the_users_library_path_back():
    from app.backends.llamacpp.process import restore_library_path

    bundled = {"LD_LIBRARY_PATH": "/opt/llm-workstation/_internal", "LD_LIBRARY_PATH_ORIG": "/usr/local/lib"}
    restore_library_path(bundled)
    assert bundled == {"LD_LIBRARY_PATH": "/usr/local/lib"}
    unset_before = {"LD_LIBRARY_PATH": "/opt/llm-workstation/_internal", "HOME": "/root"}
    restore_library_path(unset_before)
    assert unset_before == {"HOME": "/root"}


def test_builtin_mcp_server_runs_through_the_bundle_executable_when_frozen(monkeypatch):
    """The bundle's executable stands in for ``python -m`` (app/__main__.py), so the built-in server runs there."""
    from app.core.mcp.config import builtin_server
    from app.services.mcp.connection import BUILTIN_MODULE, _argv_and_env

    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "executable", "/opt/llm-workstation/llm-workstation")
    command, args, env = _argv_and_env(builtin_server(root="/home/me/notes"))
    assert (command, args) == (
        "/opt/llm-workstation/llm-workstation",
        ("-m", BUILTIN_MODULE, "--root", "/home/me/notes"),
    )
    assert "PYTHONPATH" not in env

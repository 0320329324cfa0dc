import os
import sys

from app.ui.lifecycle import QUIT

QUIT.catch()  # first: a SIGTERM from now on closes the window cleanly, or is given back to a verb or the worker


def _entry() -> int:
    from app.backends.llamacpp.process import FROZEN_WORKER_FLAG, restore_library_path

    if getattr(sys, "frozen", False):
        restore_library_path(os.environ)  # a bundled child (the worker) gets the path again from its bootloader

    if sys.argv[1:2] == [FROZEN_WORKER_FLAG]:  # a frozen bundle starting its llama.cpp worker
        from app.backends.llamacpp.worker import main as worker_main

        QUIT.release()
        del sys.argv[1]
        worker_main()
        return 0
    if getattr(sys, "frozen", False) and sys.argv[1:2] in (["-m"], ["-c"]) and len(sys.argv) > 2:
        return _run_as_python(sys.argv[1:])
    from app.cli import main

    return main()


def _run_as_python(argv: list[str]) -> int:
    """In a frozen bundle ``sys.executable`` is the app, not Python: it stands in for ``python -m MODULE ...``
    and ``python -c CODE ...``, which probes and benchmarks start with ``sys.executable``."""
    import runpy

    flag, target, *rest = argv
    if flag == "-m" and target in ("app", "app.__main__"):  # this very script: the bundle's own entry
        sys.argv = [sys.argv[0], *rest]
        return _entry()
    QUIT.release()
    if flag == "-m":
        sys.argv = [target, *rest]
        runpy.run_module(target, run_name="__main__", alter_sys=True)
    else:
        sys.argv = ["-c", *rest]
        exec(compile(target, "<string>", "exec"), {"__name__": "__main__"})
    return 0


raise SystemExit(_entry())

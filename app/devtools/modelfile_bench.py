"""``bench modelfile``: the Modelfile parser and formatter on the largest Modelfile let through (1 MiB), per shape.

Each shape (a long licence, one long line, thousands of short instructions, blank lines inside a quote...) is
parsed and formatted at full size and at 1/16 of it in the same run. The ratio ``full / (16 × small)`` is ~1 for
a parser that is linear in the input and grows with the size for a quadratic one (the blank-lines-in-a-quote shape
once took minutes): it is the figure to watch, the seconds depend on the machine and its load.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from app.core.modelfile.parser import MAX_MODELFILE_BYTES, parse_modelfile

SCALE = 16  # the small input is 1/SCALE of the full one


def _fill(size: int, head: str, unit: str, tail: str = "") -> str:
    """``head``, then ``unit`` repeated to about ``size`` bytes, then ``tail``."""
    count = max(1, (size - len(head.encode()) - len(tail.encode())) // len(unit.encode()))
    return head + unit * count + tail


def large_modelfiles(size: int = MAX_MODELFILE_BYTES) -> dict[str, str]:
    """Modelfile texts of about ``size`` bytes, one per shape that has been slow before."""
    blanks = max(1, size // 10)
    return {
        # A long licence or template, the usual reason a Modelfile is large.
        "quoted-lines": _fill(size, 'FROM x\nLICENSE """', "Permission is granted to use this model.\n", '"""\n'),
        "one-long-line": _fill(size, "FROM x\nSYSTEM ", "y"),
        "words": _fill(size, "FROM x\nSYSTEM ", "word "),
        "non-ascii": _fill(size, "FROM x\nSYSTEM ", "你好世界 "),
        # Blank lines inside an open quote: trimming the value on every line made this quadratic (minutes).
        "blank-lines-in-a-quote": _fill(size, 'FROM x\nSYSTEM """x', "\n", '"""\n'),
        "leading-blanks-then-a-quote": _fill(size, "FROM x\nSYSTEM ", " ", '"""x\n' + "\n" * blanks + 'y"""\n'),
        # Many short instructions: the state machine changes state every few characters.
        "many-parameters": _fill(size, "FROM x\n", "PARAMETER stop a\n"),
        "many-messages": _fill(size, "FROM x\n", "MESSAGE user hi\n"),
        "many-comments": _fill(size, "FROM x\n", "# c\n"),
        "short-quoted-lines": _fill(size, 'FROM x\nTEMPLATE """', "x\n", '"""\n'),
    }


def _best_of(runs: int, fn: Callable[[], Any]) -> float:
    best = float("inf")
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - started)
    return best


def _measure(text: str, runs: int) -> tuple[float, float]:
    data = text.encode()
    modelfile = parse_modelfile(data)
    return _best_of(runs, lambda: parse_modelfile(data)), _best_of(runs, modelfile.format)


def bench_modelfile(size: int = MAX_MODELFILE_BYTES, runs: int = 3) -> dict[str, Any]:
    """Per shape: parse and format seconds at ``size`` and at ``size / SCALE``, and the linearity ratios."""
    full, small = large_modelfiles(size), large_modelfiles(max(64, size // SCALE))
    rows = []
    for shape, text in full.items():
        parse_s, format_s = _measure(text, runs)
        small_parse_s, small_format_s = _measure(small[shape], runs)
        rows.append(
            {
                "shape": shape,
                "bytes": len(text.encode()),
                "parse_s": parse_s,
                "format_s": format_s,
                "parse_linearity": round(parse_s / max(SCALE * small_parse_s, 1e-9), 2),
                "format_linearity": round(format_s / max(SCALE * small_format_s, 1e-9), 2),
            }
        )
    return {"size_bytes": size, "scale": SCALE, "runs": runs, "rows": rows}


def bench_lines(report: dict[str, Any]) -> list[str]:
    """The report as a table; linearity ~1 means linear in the input, ≫1 (growing with size) quadratic."""
    lines = [
        f"Modelfile parse and format, ~{report['size_bytes']:,} bytes per shape, best of {report['runs']} "
        f"(linearity: full-size time / {report['scale']} × the time at 1/{report['scale']} of the size)",
        f"  {'shape':<28} {'parse ms':>9} {'format ms':>10} {'parse lin.':>11} {'format lin.':>12}",
    ]
    for row in report["rows"]:
        lines.append(
            f"  {row['shape']:<28} {row['parse_s'] * 1000:9.1f} {row['format_s'] * 1000:10.1f} "
            f"{row['parse_linearity']:11.2f} {row['format_linearity']:12.2f}"
        )
    return lines

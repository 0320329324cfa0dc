"""Ollama's PARAMETER names and types, and the checks ``ollama create`` runs before it sends a Modelfile.

The names, types and defaults are the JSON tags of ``api.Options`` (with the embedded ``api.Runner``) and
``api.DefaultOptions()``. Values are parsed with Go's ``strconv`` rules: ``ParseInt(s, 10, 64)``,
``ParseFloat(s, 32)`` and ``ParseBool``, ported exactly (signs, ``inf``/``nan``, hex floats, ``_`` between
digits of a float, float32 rounding and range).
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from fractions import Fraction

from app.core.modelfile.parser import NON_PARAMETER_NAMES, Modelfile, ModelfileError

__all__ = [
    "DEPRECATED_PARAMETERS",
    "OLLAMA_OPTIONS",
    "REQUIRES_ERROR",
    "CheckResult",
    "OllamaOption",
    "check_modelfile",
    "format_params",
    "valid_requires",
]


@dataclass(frozen=True)
class OllamaOption:
    name: str
    kind: str  # "int" | "float" | "bool" | "list"
    default: object  # DefaultOptions(), or None where Ollama has none or decides at run time
    help: str
    load_time: bool  # an api.Runner option: it takes effect when the model is loaded


def _option(name: str, kind: str, default: object, help: str, load_time: bool = False) -> OllamaOption:
    return OllamaOption(name, kind, default, help, load_time)


OLLAMA_OPTIONS: dict[str, OllamaOption] = {
    o.name: o
    for o in (
        _option(
            "num_ctx",
            "int",
            None,
            "Context window in tokens (prompt plus reply); larger needs more memory. Unset, Ollama uses "
            "OLLAMA_CONTEXT_LENGTH or picks 4096, 32768 or 262144 from the GPU memory.",
            True,
        ),
        _option(
            "num_batch",
            "int",
            512,
            "Prompt tokens processed per step. Higher reads prompts faster but needs more memory; "
            "typically 128 to 2048.",
            True,
        ),
        _option(
            "num_gpu",
            "int",
            None,
            "Number of model layers placed on the GPU; 0 runs on the CPU only. Unset, Ollama fits as many "
            "as memory allows.",
            True,
        ),
        _option(
            "main_gpu",
            "int",
            None,
            "Index of the GPU that holds the small shared tensors when the model is split over several GPUs.",
            True,
        ),
        _option(
            "use_mmap",
            "bool",
            None,
            "Map the model file into memory instead of reading it all first. Unset, Ollama decides; false "
            "can help on slow or network disks.",
            True,
        ),
        _option(
            "num_thread",
            "int",
            None,
            "CPU threads used for computation. Unset, Ollama picks a number from the CPU's physical cores.",
            True,
        ),
        _option(
            "draft_num_predict",
            "int",
            4,
            "Tokens the DRAFT model proposes per step in speculative decoding; 0 turns drafting off.",
            True,
        ),
        _option(
            "num_keep",
            "int",
            4,
            "Tokens at the start of the prompt that are kept when a full context shifts old text out.",
        ),
        _option(
            "seed",
            "int",
            -1,
            "Random seed. -1 picks a new one every time; a fixed number makes replies repeatable.",
        ),
        _option("num_predict", "int", -1, "Most tokens one reply may have; -1 means no limit."),
        _option(
            "top_k",
            "int",
            40,
            "Sample only from the k most likely tokens: lower is more focused (10), higher more varied (100).",
        ),
        _option(
            "top_p",
            "float",
            0.9,
            "Sample from the most likely tokens that together reach probability p: lower is more focused "
            "(0.5), higher more varied (0.95).",
        ),
        _option(
            "min_p",
            "float",
            0.0,
            "Drop tokens less likely than min_p times the most likely one; 0 turns it off, 0.05 is typical.",
        ),
        _option(
            "typical_p",
            "float",
            1.0,
            "Locally typical sampling: 1.0 turns it off; lower values such as 0.9 keep only typical tokens.",
        ),
        _option(
            "repeat_last_n",
            "int",
            64,
            "How many recent tokens the repeat penalty looks at; 0 turns it off, -1 means the whole context.",
        ),
        _option(
            "temperature",
            "float",
            0.8,
            "Randomness of replies: lower is more predictable (0.2), higher more creative (1.0 and up).",
        ),
        _option(
            "repeat_penalty",
            "float",
            1.0,
            "Penalty on recently used tokens: 1.0 is off, 1.1 to 1.3 discourages repetition.",
        ),
        _option(
            "presence_penalty",
            "float",
            0.0,
            "Penalty on any token that already appeared, nudging towards new topics; 0 is off, typically 0 to 1.",
        ),
        _option(
            "frequency_penalty",
            "float",
            0.0,
            "Penalty that grows with how often a token already appeared; 0 is off, typically 0 to 1.",
        ),
        _option(
            "stop",
            "list",
            None,
            "Text that ends the reply when the model writes it. Repeat the PARAMETER for several stop strings.",
        ),
    )
}

DEPRECATED_PARAMETERS: tuple[str, ...] = (
    "penalize_newline",
    "low_vram",
    "f16_kv",
    "logits_all",
    "vocab_only",
    "use_mlock",
    "mirostat",
    "mirostat_tau",
    "mirostat_eta",
)


# --- Go's strconv ------------------------------------------------------------------------------------------------
_GO_INT = re.compile(r"[+-]?[0-9]+")
_BOOLS = {"1": True, "t": True, "T": True, "TRUE": True, "true": True, "True": True}
_BOOLS |= {"0": False, "f": False, "F": False, "FALSE": False, "false": False, "False": False}
_FLOAT32_LIMIT = 2.0**128  # rounding to this or beyond is out of range


def _go_int(text: str) -> int | None:
    """``strconv.ParseInt(text, 10, 64)``; ``None`` where Go returns an error."""
    if not _GO_INT.fullmatch(text):
        return None
    value = int(text)
    return value if -(2**63) <= value < 2**63 else None


def _underscores_ok(text: str) -> bool:
    """Go's ``underscoreOK``: an ``_`` only between digits, or between a base prefix and a digit."""
    body = text[1:] if text[:1] in "+-" else text
    prefixed = body[:1] == "0" and body[1:2].lower() in ("b", "o", "x")
    digits = "0123456789abcdefABCDEF" if body[1:2].lower() == "x" and prefixed else "0123456789"
    seen = "0" if prefixed else "^"  # last seen: 0 a digit (or prefix), _ an underscore, ! anything else
    for ch in body[2:] if prefixed else body:
        if ch in digits:
            seen = "0"
        elif ch == "_":
            if seen != "0":
                return False
            seen = "_"
        elif seen == "_":
            return False
        else:
            seen = "!"
    return seen != "_"


def _read_float(text: str) -> tuple[bool, str, int, bool, int] | None:
    """Go's ``readFloat`` over all of ``text``: ``(negative, digits, point, hexadecimal, exponent)`` where
    ``point`` digits come before the dot and ``exponent`` is the ``e``/``p`` part; ``None`` for a syntax error."""
    i, n = 0, len(text)
    negative = text[:1] == "-"
    if text[:1] in ("+", "-"):
        i = 1
    hexa = i + 2 < n and text[i] == "0" and text[i + 1] in "xX"
    i += 2 if hexa else 0
    digit_chars = "0123456789abcdefABCDEF" if hexa else "0123456789"
    digits: list[str] = []
    seen_dot = underscores = False
    point = 0
    while i < n:
        ch = text[i]
        if ch == "_":
            underscores = True
        elif ch == "." and not seen_dot:
            seen_dot, point = True, len(digits)
        elif ch in digit_chars:
            digits.append(ch)
        else:
            break
        i += 1
    if not digits:
        return None
    if not seen_dot:
        point = len(digits)
    exponent = 0
    if i < n and text[i] in ("pP" if hexa else "eE"):
        i += 1
        sign = -1 if text[i : i + 1] == "-" else 1
        i += 1 if text[i : i + 1] in ("+", "-") else 0
        if i >= n or text[i] not in "0123456789":
            return None
        while i < n and text[i] in "0123456789_":
            if text[i] == "_":
                underscores = True
            elif exponent < 10000:  # Go stops counting there
                exponent = exponent * 10 + int(text[i])
            i += 1
        exponent *= sign
    elif hexa:
        return None  # a hex float needs its p exponent
    if i != n or (underscores and not _underscores_ok(text)):
        return None
    return negative, "".join(digits), point, hexa, exponent


def _round_float32(exact: Fraction) -> float | None:
    """The float32 nearest to ``exact`` > 0 (ties to even), as a float; ``None`` when it overflows."""
    exponent = exact.numerator.bit_length() - exact.denominator.bit_length()
    if exact < Fraction(2) ** exponent:
        exponent -= 1  # now 2**exponent <= exact < 2**(exponent + 1)
    shift = 23 - max(exponent, -126)  # 24 significant bits; fewer for subnormals
    scaled = exact * Fraction(2) ** shift
    quotient, rest = divmod(scaled.numerator, scaled.denominator)
    if 2 * rest > scaled.denominator or (2 * rest == scaled.denominator and quotient & 1):
        quotient += 1
    value = math.ldexp(quotient, -shift)
    return value if value < _FLOAT32_LIMIT else None


def _rounded_decimal(significant: str, exponent: int) -> float | None:
    """``int(significant) * 10**exponent`` rounded to float32 (``None``: out of range), reading at most 800
    digits as Go's slow path does: later digits only count as "something non-zero follows"."""
    exponent += len(significant) - len(significant.rstrip("0"))
    significant = significant.rstrip("0")
    if not significant:
        return 0.0
    if len(significant) > _MAX_DIGITS:
        exponent += len(significant) - _MAX_DIGITS - 1
        significant = significant[:_MAX_DIGITS] + "1"
    magnitude = len(significant) + exponent  # the value lies below 10**magnitude
    if magnitude > 40:
        return None
    if magnitude < -50:
        return 0.0
    return _round_float32(Fraction(int(significant)) * Fraction(10) ** exponent)


_MAX_DIGITS = 800
_MASK64 = (1 << 64) - 1


def _pow10_128(exp10: int) -> tuple[int, int]:
    """Go's ``detailedPowersOfTen`` row: the top 128 bits of 10**exp10, rounded down, as (low, high) halves."""
    if exp10 >= 0:
        power = 10**exp10
        top = power << (128 - power.bit_length()) if power.bit_length() <= 128 else power >> (power.bit_length() - 128)
    else:
        power = 10**-exp10
        top = (1 << (127 + power.bit_length())) // power
    return top & _MASK64, top >> 64


def _eisel_lemire32(mantissa: int, exp10: int) -> int | None:
    """Go's ``eiselLemire32`` (``mantissa`` > 0): the float32 bits, or ``None`` where it gives up."""
    if not -348 <= exp10 <= 347:
        return None
    zeros = 64 - mantissa.bit_length()
    man = mantissa << zeros
    exp2 = ((217706 * exp10 >> 16) + 64 + 127 - zeros) & _MASK64
    low, high = _pow10_128(exp10)
    x_hi, x_lo = divmod(man * high, 1 << 64)
    if x_hi & 0x3FFFFFFFFF == 0x3FFFFFFFFF and (x_lo + man) & _MASK64 < man:
        y_hi, y_lo = divmod(man * low, 1 << 64)
        merged_hi, merged_lo = x_hi, (x_lo + y_hi) & _MASK64
        if merged_lo < x_lo:
            merged_hi = (merged_hi + 1) & _MASK64
        if merged_hi & 0x3FFFFFFFFF == 0x3FFFFFFFFF and merged_lo == _MASK64 and (y_lo + man) & _MASK64 < man:
            return None
        x_hi, x_lo = merged_hi, merged_lo
    msb = x_hi >> 63
    result = x_hi >> (msb + 38)
    exp2 = (exp2 - (1 ^ msb)) & _MASK64
    if x_lo == 0 and x_hi & 0x3FFFFFFFFF == 0 and result & 3 == 1:
        return None
    result = (result + (result & 1)) >> 1
    if result >> 24:
        result >>= 1
        exp2 = (exp2 + 1) & _MASK64
    if (exp2 - 1) & _MASK64 >= 0xFF - 1:
        return None
    return exp2 << 23 | result & 0x7FFFFF


def _decimal_float32(digits: str, point: int, exponent: int) -> float | None:
    """A decimal ``ParseFloat(s, 32)``: the correctly rounded value, except for Go's slow-path slip.

    Go's fallback (taken when its fast paths give up) keeps 800 digits and places the decimal point after at
    most 800 of them, so an integer part of more than 800 significant digits comes out scaled down.
    """
    lead = len(digits) - len(digits.lstrip("0"))
    significant = digits[lead:]
    whole = point - lead  # significant digits before the dot
    if whole <= _MAX_DIGITS:
        return _rounded_decimal(significant, exponent + whole - len(significant))
    mantissa, kept = int(significant[:19]), min(len(significant), 19)
    exp10 = whole + exponent - kept
    truncated = significant[19:].strip("0") != ""
    bits = _eisel_lemire32(mantissa, exp10)
    if bits is not None and (not truncated or _eisel_lemire32(mantissa + 1, exp10) == bits):
        return _rounded_decimal(significant, exponent + whole - len(significant))
    point_at = _MAX_DIGITS + exponent  # the slip: the point sits after digit 800, not after digit `whole`
    if point_at > 310:
        return None
    if point_at < -330:
        return 0.0
    return _rounded_decimal(significant, point_at - len(significant))


def _shortest(value: float) -> float:
    """The float of the shortest decimal that reads back as the float32 ``value``: what Go's JSON sends."""
    if value == 0 or not math.isfinite(value):
        return value
    exact = Fraction(abs(value))
    for precision in range(1, 10):
        digits, _, power = f"{abs(value):.{precision - 1}e}".partition("e")
        nearest, scale = int(digits.replace(".", "")), int(power) - precision + 1
        # the nearest one first: Python rounds half to even, as Go does between two equally near ones
        fits = [Fraction(c) * Fraction(10) ** scale for c in (nearest, nearest - 1, nearest + 1) if c > 0]
        fits = [d for d in fits if _round_float32(d) == abs(value)]
        if fits:
            return math.copysign(float(min(fits, key=lambda d: abs(d - exact))), value)
    return value


def _go_float32(text: str) -> float | None:
    """``strconv.ParseFloat(text, 32)`` as the float32 Go keeps (given as the shortest decimal that names
    it); ``None`` where Go returns an error (syntax, or beyond the float32 range)."""
    body = text[1:] if text[:1] in "+-" else text
    if body.lower() in ("inf", "infinity"):
        return -math.inf if text[:1] == "-" else math.inf
    if text.lower() == "nan":
        return math.nan
    parsed = _read_float(text)
    if parsed is None:
        return None
    negative, digits, point, hexa, exponent = parsed
    if hexa:
        mantissa = int(digits, 16)
        magnitude = mantissa.bit_length() + exponent + 4 * (point - len(digits))  # the value is below 2**this
        if mantissa == 0 or magnitude < -160:
            rounded: float | None = 0.0
        elif magnitude > 130:
            rounded = None
        else:
            rounded = _round_float32(Fraction(mantissa) * Fraction(2) ** (exponent + 4 * (point - len(digits))))
    else:
        rounded = _decimal_float32(digits, point, exponent)
    if rounded is None:
        return None
    return -_shortest(rounded) if negative else _shortest(rounded)


# --- FormatParams ------------------------------------------------------------------------------------------------
def _typed(name: str, value: str) -> object:
    option = OLLAMA_OPTIONS.get(name)
    if option is None:
        raise ModelfileError(f"unknown parameter '{name}'")
    typed: object
    if option.kind == "int":
        typed = _go_int(value)
    elif option.kind == "float":
        typed = _go_float32(value)
    elif option.kind == "bool":
        typed = _BOOLS.get(value)
    else:
        return value
    if typed is None:
        raise ModelfileError(f"invalid {option.kind} value [{value}]")
    return typed


def format_params(params: dict[str, list[str]]) -> tuple[dict[str, object], list[str]]:
    """Type PARAMETER values the way ``ollama create`` does (``api.FormatParams`` once per PARAMETER line).

    Returns the typed values (int, float, bool; ``stop`` a list of every value; any other repeated name keeps
    its last value) and the warnings for deprecated names, which are dropped. Raises :class:`ModelfileError`
    with Ollama's text at the first bad one: ``unknown parameter 'x'``, ``invalid float value [x]`` (Go prints
    the one value as a ``[]string``), ``invalid int value [x]``, ``invalid bool value [x]``.

    A float comes back as the shortest decimal that names its float32 (``0.7``, not ``0.699999988...``): the
    number Go's JSON encoder sends. ``inf`` and ``nan`` parse (Go accepts them) but cannot be sent.
    """
    out: dict[str, object] = {}
    warnings: list[str] = []
    for name, values in params.items():
        for value in values:
            if name in DEPRECATED_PARAMETERS:
                warnings.append(f"warning: parameter {name} is deprecated")
                continue
            typed = _typed(name, value)
            if OLLAMA_OPTIONS[name].kind == "list":
                current = out.setdefault(name, [])
                assert isinstance(current, list)
                current.append(typed)
            else:
                out[name] = typed
    return out, warnings


# --- REQUIRES: golang.org/x/mod/semver ---------------------------------------------------------------------------
_SEMVER_NUMBER = r"(?:0|[1-9][0-9]*)"
_SEMVER_PRERELEASE_ID = r"(?:[0-9A-Za-z-]*[A-Za-z-][0-9A-Za-z-]*|0|[1-9][0-9]*)"
_SEMVER = re.compile(
    rf"v{_SEMVER_NUMBER}(?:\.{_SEMVER_NUMBER}(?:\.{_SEMVER_NUMBER}"
    rf"(?:-{_SEMVER_PRERELEASE_ID}(?:\.{_SEMVER_PRERELEASE_ID})*)?"
    r"(?:\+[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?)?)?"
)
REQUIRES_ERROR = "requires must be a valid semver (e.g. 0.14.0)"


def valid_requires(value: str) -> bool:
    """Whether Ollama accepts ``REQUIRES value``: a ``v`` is added when missing, then ``semver.IsValid``
    (which also takes the shorthands ``1`` and ``1.2``, but no pre-release or build on them)."""
    return _SEMVER.fullmatch(value if value.startswith("v") else "v" + value) is not None


# --- the whole file --------------------------------------------------------------------------------------------
@dataclass
class CheckResult:
    parameters: dict[str, object] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def _json_float(value: object) -> str | None:
    """Go's JSON encoder refuses infinities and NaN: its message for ``value``, or ``None``."""
    if isinstance(value, float) and not math.isfinite(value):
        text = "NaN" if math.isnan(value) else ("+Inf" if value > 0 else "-Inf")
        return f"json: unsupported value: {text}"
    return None


def check_modelfile(modelfile: Modelfile) -> CheckResult:
    """What ``ollama create`` would refuse before it contacts the server, every problem rather than the first:
    PARAMETER names and values, REQUIRES, a DRAFT that is the FROM path (compared as written, normalised),
    values JSON cannot carry, and a missing FROM. Files are not looked at."""
    result = CheckResult()

    def problem(text: str) -> None:
        if text not in result.problems:
            result.problems.append(text)

    if not modelfile.froms():
        problem("no FROM line")
    paths: dict[str, list[str]] = {"model": [], "draft": []}
    for command in modelfile.commands:
        name, args = command.name, command.args
        if name == "requires" and not valid_requires(args):
            problem(REQUIRES_ERROR)
        elif name in paths:
            other = paths["draft" if name == "model" else "model"]
            if any(os.path.normpath(args) == os.path.normpath(p) for p in other):
                problem(f"DRAFT must not reference the same local path as FROM: {args}")
            paths[name].append(args)
        elif name not in NON_PARAMETER_NAMES:
            try:
                typed, warnings = format_params({name: [args]})
            except ModelfileError as exc:
                problem(str(exc))
                continue
            result.warnings.extend(warnings)
            for key, value in typed.items():
                current = result.parameters.get(key)
                result.parameters[key] = (
                    current + value if isinstance(current, list) and isinstance(value, list) else value
                )
    for value in result.parameters.values():
        if (text := _json_float(value)) is not None:
            problem(text)
    return result

"""Go strings: their UTF-8 bytes, strconv's quoting and unquoting, and strconv.FormatFloat's shortest form."""

from __future__ import annotations

import decimal
import math


def utf8(s: str) -> bytes:
    """A string's bytes, as Go sees a string. Bytes that are not UTF-8 (from "\\xff" escapes or slicing inside a
    character) live in the str as surrogate escapes."""
    return s.encode("utf-8", "surrogateescape")


def from_utf8(b: bytes) -> str:
    return b.decode("utf-8", "surrogateescape")


def clean_output(text: str) -> str:
    """The rendered bytes read as UTF-8 text: stray bytes become U+FFFD."""
    try:
        return utf8(text).decode("utf-8", "replace")
    except UnicodeEncodeError:
        return "".join("\ufffd" if 0xD800 <= ord(c) < 0xE000 else c for c in text)


_SIMPLE_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "\\": "\\"}


def go_unquote(text: str) -> str:
    """strconv.Unquote for "…", '…' and `…` literals; raises ValueError on bad syntax."""
    quote, body = text[0], text[1:-1]
    if quote == "`":
        return body.replace("\r", "")
    out = bytearray()
    i = 0
    while i < len(body):
        c = body[i]
        if c != "\\":
            out += utf8(c)
            i += 1
            continue
        e = body[i + 1 : i + 2]
        i += 2
        if e in _SIMPLE_ESCAPES:
            out += _SIMPLE_ESCAPES[e].encode()
        elif e == quote:
            out += e.encode()
        elif e in ("x", "u", "U"):
            width = {"x": 2, "u": 4, "U": 8}[e]
            digits = body[i : i + width]
            if len(digits) != width or any(d not in "0123456789abcdefABCDEF" for d in digits):
                raise ValueError("invalid syntax")
            value = int(digits, 16)
            i += width
            if e == "x":
                out.append(value)
            elif value > 0x10FFFF or 0xD800 <= value < 0xE000:
                raise ValueError("invalid syntax")
            else:
                out += chr(value).encode()
        elif e and e in "01234567":
            digits = body[i - 1 : i + 2]
            if len(digits) != 3 or any(d not in "01234567" for d in digits) or int(digits, 8) > 255:
                raise ValueError("invalid syntax")
            out.append(int(digits, 8))
            i += 2
        else:
            raise ValueError("invalid syntax")
    result = from_utf8(bytes(out))
    if quote == "'" and len(result) != 1:
        raise ValueError("invalid syntax")
    return result


def go_quote(s: str) -> str:
    """strconv.Quote."""
    out = ['"']
    for c in s:
        if c in ('"', "\\"):
            out.append("\\" + c)
        elif c == " " or (c.isprintable() and c not in "\u00a0\u2028\u2029"):
            out.append(c)
        elif c in "\a\b\f\n\r\t\v":
            out.append("\\" + "abfnrtv"["\a\b\f\n\r\t\v".index(c)])
        elif ord(c) < 0x80:
            out.append(f"\\x{ord(c):02x}")
        elif ord(c) < 0x10000:
            out.append(f"\\u{ord(c):04x}")
        else:
            out.append(f"\\U{ord(c):08x}")
    return "".join(out) + '"'


def _shortest_digits(f: float) -> tuple[str, int]:
    """The shortest digits that read back as abs(f), and where the decimal point goes: 0.DIGITS x 10**dp."""
    t = decimal.Decimal(repr(abs(f))).as_tuple()
    digits = "".join(map(str, t.digits))
    return digits.rstrip("0"), len(digits) + int(t.exponent)


def format_float(f: float, exp_below: int, exp_from: int) -> str:
    """strconv.FormatFloat with the shortest digits: %e form when the decimal exponent is < exp_below or
    >= exp_from (fmt's %v uses -4 and 6, encoding/json -6 and 21), else %f form."""
    if math.isnan(f):
        return "NaN"
    if math.isinf(f):
        return "+Inf" if f > 0 else "-Inf"
    sign = "-" if math.copysign(1.0, f) < 0 else ""
    if f == 0:
        return sign + "0"
    digits, dp = _shortest_digits(f)
    exp = dp - 1
    if exp < exp_below or exp >= exp_from:
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{sign}{mantissa}e{'-' if exp < 0 else '+'}{abs(exp):02d}"
    if dp <= 0:
        return sign + "0." + "0" * -dp + digits
    if dp >= len(digits):
        return sign + digits + "0" * (dp - len(digits))
    return sign + digits[:dp] + "." + digits[dp:]


def format_float_v(f: float) -> str:
    """fmt's %v for a float64 (strconv 'g', shortest): 1e+06, 123456, 1.5, 1e-05."""
    return format_float(f, -4, 6)

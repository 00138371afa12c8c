"""Reader for the java.util.Properties text format, which Kafka's server.properties uses.

A logical line is `key=value`, `key: value` or `key value`; whitespace around the separator
is ignored. Lines whose first non-blank character is `#` or `!` are comments. A line ending
in an odd number of backslashes continues on the next line (leading blanks of the next line
are dropped). In keys and values `\\t \\n \\r \\f \\uXXXX` are escapes and a backslash before
any other character stands for that character, so `a\\=b=c` is key `a=b`, value `c`.
Unlike Java (ISO-8859-1), the text is read as UTF-8 by the caller.
"""

from __future__ import annotations

import re
from typing import NamedTuple

__all__ = ["PropertiesSyntaxError", "PropertyLine", "parse_properties"]

_BLANKS = " \t\f"
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_NEWLINE = re.compile(r"\r\n|\r|\n")  # only these end a line (str.splitlines knows more)


class PropertiesSyntaxError(ValueError):
    """A malformed escape; `line` is the 1-based number of the line it starts on."""

    def __init__(self, message: str, line: int) -> None:
        super().__init__(message)
        self.line = line


class PropertyLine(NamedTuple):
    key: str
    value: str
    line: int  # 1-based number of the natural line the logical line starts on


def parse_properties(text: str) -> list[PropertyLine]:
    """Every key/value pair in file order (a repeated key appears twice; the last one wins)."""
    result: list[PropertyLine] = []
    for raw, line_no in _logical_lines(text.removeprefix("\ufeff")):
        key_raw, value_raw = _split(raw)
        result.append(
            PropertyLine(_unescape(key_raw, line_no), _unescape(value_raw, line_no), line_no)
        )
    return result


def _logical_lines(text: str) -> list[tuple[str, int]]:
    lines: list[tuple[str, int]] = []
    pending: list[str] | None = None  # parts of a logical line being continued
    start = 0
    for number, natural in enumerate(_NEWLINE.split(text), start=1):
        stripped = natural.lstrip(_BLANKS)
        if pending is None:
            if not stripped or stripped[0] in "#!":
                continue
            start = number
            pending = []
        trailing = len(stripped) - len(stripped.rstrip("\\"))
        if trailing % 2 == 1:
            pending.append(stripped[:-1])
            continue
        pending.append(stripped)
        lines.append(("".join(pending), start))
        pending = None
    if pending is not None:  # the file ended inside a continuation
        lines.append(("".join(pending), start))
    return lines


def _split(line: str) -> tuple[str, str]:
    """Split a logical line at the first unescaped separator ('=', ':' or a blank)."""
    n = len(line)
    escaped = False
    key_end = n
    value_start = n
    has_separator = False
    for i, c in enumerate(line):
        if not escaped and c in "=:":
            key_end, value_start, has_separator = i, i + 1, True
            break
        if not escaped and c in _BLANKS:
            key_end, value_start = i, i + 1
            break
        escaped = (not escaped) if c == "\\" else False
    while value_start < n:
        c = line[value_start]
        if c in _BLANKS:
            value_start += 1
        elif not has_separator and c in "=:":
            has_separator = True
            value_start += 1
        else:
            break
    return line[:key_end], line[value_start:]


def _unescape(s: str, line_no: int) -> str:
    if "\\" not in s:
        return s
    out: list[str] = []
    i, n = 0, len(s)
    while i < n:
        c = s[i]
        i += 1
        if c != "\\":
            out.append(c)
            continue
        if i == n:  # a lone trailing backslash stands for nothing
            break
        c = s[i]
        i += 1
        if c == "u":
            digits = s[i : i + 4]
            if len(digits) != 4 or any(d not in "0123456789abcdefABCDEF" for d in digits):
                bad = "\\u" + digits
                raise PropertiesSyntaxError(f"malformed \\uXXXX escape {bad!r}", line_no)
            out.append(chr(int(digits, 16)))
            i += 4
        else:
            out.append(_ESCAPES.get(c, c))
    return "".join(out)

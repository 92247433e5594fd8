"""Text that came from outside, made safe to show: escapes visible, never emitted.

Anything a server sends (error messages, model ids, versions, metric labels, log lines,
probe answers) is data. Written raw to a terminal, ``ESC ] 0 ; … BEL`` retitles the
window and ``ESC [ 2 J`` clears the screen; a C1 ``U+009B`` is a one-character CSI on
some terminals; bidi overrides (``U+202E``) make text read backwards; and a CSV cell that
starts with ``=`` runs as a formula in a spreadsheet. Every place soaktop shows or
exports such text as text goes through one of these functions:

* :func:`safe_text` — multi-line text: newline and tab kept, every other control shown
  as an escape (``\\x1b``, ``\\x9b``, ``\\u202e``);
* :func:`safe_line` — one field of a status line or a table cell: newline and tab are
  shown as ``\\n`` and ``\\t`` too;
* :func:`safe_csv_cell` — a CSV cell: :func:`safe_line`, and a text that a spreadsheet
  would run as a formula is prefixed with ``'`` (OWASP); numbers pass unchanged;
* :func:`safe_json` — JSON text printed to a terminal: the same characters written as
  ``\\u`` escapes, so the JSON still parses to exactly the original strings.

Journals, evidence and ``record.json`` keep the exact text (JSON-escaped by the
serialiser); only what is shown or exported goes through here. Each function returns its
argument unchanged, at C speed, when there is nothing to escape.
"""

from __future__ import annotations

import re

# What is never emitted: C0 controls (newline and tab aside), DEL, C1 controls, the
# Arabic letter mark, zero-width and direction marks, line/paragraph separators, bidi
# embeddings/overrides/isolates, word joiners and invisible operators, the BOM,
# interlinear annotations, lone surrogates (they cannot even be encoded to UTF-8) and
# the invisible "tag" characters (used to smuggle text past a reader).
_INVISIBLES = (
    "\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff\ufff9-\ufffb"
    "\ud800-\udfff\U000e0000-\U000e007f"
)
_MULTI = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_INVISIBLES}]")
_LINE = re.compile(f"[\x00-\x1f\x7f-\x9f{_INVISIBLES}]")
_JSON = re.compile(f"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f{_INVISIBLES}]")
_NAMED = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}

_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
"""A CSV cell starting with one of these is a formula to a spreadsheet (OWASP)."""


def _escape(m: re.Match[str]) -> str:
    ch = m.group()
    if ch in _NAMED:
        return _NAMED[ch]
    cp = ord(ch)
    if cp <= 0xFF:
        return f"\\x{cp:02x}"
    if cp <= 0xFFFF:
        return f"\\u{cp:04x}"
    return f"\\U{cp:08x}"


def _json_escape(m: re.Match[str]) -> str:
    cp = ord(m.group())
    if cp <= 0xFFFF:
        return f"\\u{cp:04x}"
    cp -= 0x10000  # JSON spells a character outside the BMP as a surrogate pair
    return f"\\u{0xD800 + (cp >> 10):04x}\\u{0xDC00 + (cp & 0x3FF):04x}"


def _str(value: object) -> str:
    return value if isinstance(value, str) else str(value)


def safe_text(value: object) -> str:
    """``value`` as display-safe multi-line text: newline and tab kept, every other
    control or dangerous invisible character shown as an escape such as ``\\x1b``."""
    s = _str(value)
    if s.isprintable():  # fast path: nothing here is ever escaped
        return s
    return _MULTI.sub(_escape, s)


def safe_line(value: object) -> str:
    """``value`` as one display-safe line: like :func:`safe_text`, and newline, carriage
    return and tab shown as ``\\n``, ``\\r``, ``\\t`` (a field never breaks its line)."""
    s = _str(value)
    if s.isprintable():
        return s
    return _LINE.sub(_escape, s)


def safe_csv_cell(value: object) -> str:
    """A CSV cell: numbers as they are; text made safe (:func:`safe_line`) and, when a
    spreadsheet would read it as a formula (``=``, ``+``, ``-``, ``@`` first), prefixed
    with ``'`` so it stays text. ``-12.5`` is a number and is kept; ``-1+A1`` is not."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        s = safe_line(value)
    else:
        return str(value)
    if s.startswith(FORMULA_STARTS) and not _NUMBER.fullmatch(s):
        return "'" + s
    return s


def safe_json(text: str) -> str:
    """JSON text safe for a terminal: DEL, C1 and the invisibles above (and any raw C0
    control other than JSON whitespace) written as ``\\uXXXX`` escapes. Inside a string
    that is the same JSON value; outside one such characters cannot occur in valid
    JSON, so the text parses to exactly what it did."""
    return _JSON.sub(_json_escape, text)

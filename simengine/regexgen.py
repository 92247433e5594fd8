"""Generate a string that matches a (simple) regular expression.

Enough for the patterns JSON schemas use in practice: literals, escapes (``\\d \\w \\s``),
character classes with ranges, groups with alternation, ``.``, anchors and the quantifiers
``* + ? {n} {n,} {n,m}``. Anything else (lookarounds, backreferences) is skipped; the caller
checks the result with :mod:`re` and reports a best-effort string as such.
"""

from __future__ import annotations

import random
import re
import string
from typing import Literal

_DIGITS = string.digits
_WORD = string.ascii_letters + string.digits + "_"
_SPACE = " "
_ANY = string.ascii_letters + string.digits
_PRINTABLE = string.ascii_letters + string.digits + " -_.,:;!?@#"

# AST nodes: ("chars", pool) | ("seq", [node]) | ("alt", [node]) | ("rep", node, lo, hi)
Chars = tuple[Literal["chars"], str]
Group = tuple[Literal["seq", "alt"], list["Node"]]
Rep = tuple[Literal["rep"], "Node", int, int]
Node = Chars | Group | Rep


class _Parser:
    def __init__(self, pattern: str) -> None:
        self.p = pattern
        self.i = 0

    def peek(self) -> str:
        return self.p[self.i] if self.i < len(self.p) else ""

    def take(self) -> str:
        ch = self.peek()
        self.i += 1
        return ch

    def parse_alt(self) -> Node:
        branches = [self.parse_seq()]
        while self.peek() == "|":
            self.take()
            branches.append(self.parse_seq())
        return ("alt", branches) if len(branches) > 1 else branches[0]

    def parse_seq(self) -> Node:
        items: list[Node] = []
        while self.peek() and self.peek() not in "|)":
            atom = self.parse_atom()
            if atom is None:
                continue
            items.append(self.parse_quant(atom))
        return ("seq", items)

    def parse_atom(self) -> Node | None:
        ch = self.take()
        if ch in "^$":
            return None
        if ch == "(":
            if self.peek() == "?":
                self.take()
                kind = self.take()
                if kind != ":":  # lookaround or named group: skip its body
                    if kind == "P" and self.peek() == "<":
                        while self.take() not in (">", ""):
                            pass
                    else:
                        depth = 1
                        while depth and self.peek():
                            c = self.take()
                            depth += (c == "(") - (c == ")")
                        return None
            node = self.parse_alt()
            if self.peek() == ")":
                self.take()
            return node
        if ch == "[":
            return ("chars", self.parse_class())
        if ch == "\\":
            return ("chars", self.parse_escape(self.take()))
        if ch == ".":
            return ("chars", _ANY)
        return ("chars", ch)

    def parse_escape(self, ch: str) -> str:
        return {
            "d": _DIGITS,
            "w": _WORD,
            "s": _SPACE,
            "D": string.ascii_letters,
            "W": "-",
            "S": _ANY,
            "n": "\n",
            "t": "\t",
        }.get(ch, ch)

    def parse_class(self) -> str:
        negate = self.peek() == "^"
        if negate:
            self.take()
        chars: list[str] = []
        first = True
        while self.peek() and (self.peek() != "]" or first):
            first = False
            ch = self.take()
            if ch == "\\":
                chars.append(self.parse_escape(self.take()))
                continue
            if self.peek() == "-" and self.i + 1 < len(self.p) and self.p[self.i + 1] != "]":
                self.take()
                end = self.take()
                if end == "\\":
                    end = self.take()
                chars.append("".join(chr(c) for c in range(ord(ch), ord(end) + 1)))
                continue
            chars.append(ch)
        self.take()  # the closing ]
        pool = "".join(chars)
        if negate:
            return "".join(c for c in _PRINTABLE if c not in pool) or "x"
        return pool or "x"

    def parse_quant(self, atom: Node) -> Node:
        ch = self.peek()
        lo, hi = 1, 1
        if ch == "*":
            lo, hi = 0, 3
        elif ch == "+":
            lo, hi = 1, 4
        elif ch == "?":
            lo, hi = 0, 1
        elif ch == "{":
            m = re.match(r"\{(\d*)(,?)(\d*)\}", self.p[self.i :])
            if not m:
                return atom
            lo = int(m.group(1) or 0)
            hi = int(m.group(3)) if m.group(3) else lo + 3
            if not m.group(2):
                hi = lo
            self.i += len(m.group(0)) - 1
        else:
            return atom
        self.take()
        if self.peek() in "?+":  # lazy / possessive: same strings
            self.take()
        return ("rep", atom, lo, hi)


def _gen(node: Node, rng: random.Random, out: list[str]) -> None:
    match node:
        case ("chars", pool):
            out.append(rng.choice(pool))
        case ("seq", children):
            for child in children:
                _gen(child, rng, out)
        case ("alt", branches):
            _gen(rng.choice(branches), rng, out)
        case ("rep", child, lo, hi):
            for _ in range(rng.randint(lo, hi)):
                _gen(child, rng, out)


def generate(pattern: str, rng: random.Random) -> tuple[str, bool]:
    """A string for ``pattern`` and whether it really matches (JSON Schema: a search)."""
    try:
        tree = _Parser(pattern).parse_alt()
    except (IndexError, ValueError):
        return "x", False
    for _ in range(4):
        out: list[str] = []
        _gen(tree, rng, out)
        text = "".join(out)
        try:
            if re.search(pattern, text):
                return text, True
        except re.error:
            return text, False
    return text, False

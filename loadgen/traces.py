"""Arrival traces: timestamped requests with token counts, parsed before any load starts.

``--arrival trace:FILE`` replays a file of arrivals. Four formats are read, detected from
the file's first line (the extension is not trusted):

- **Mooncake** JSONL (``kvcache-ai/Mooncake``): ``{"timestamp": ms, "input_length": N,
  "output_length": M, "hash_ids": [0, 1, ...]}``. Each hash id names one block of
  :data:`BLOCK_TOKENS` prompt tokens (the last block may be partial); two arrivals sharing
  leading ids share that prefix.
- **Azure** LLM inference trace CSV (``Azure/AzurePublicDataset``):
  ``TIMESTAMP,ContextTokens,GeneratedTokens``, ``TIMESTAMP`` a datetime
  (``2023-11-16 18:15:46.6805900``, extra fractional digits are cut to microseconds).
- **BurstGPT** CSV (``HPMLL/BurstGPT``): ``Timestamp,Model,Request tokens,Response
  tokens,Total tokens,Log Type`` (``Timestamp`` in seconds; the columns are found by name,
  so the later files' ``Session ID`` and ``Elapsed time`` columns are fine).
- **soaktop** JSONL: ``{"t_s": 0.0, "input_tokens": 120, "output_tokens": 40}``, with an
  optional shared prefix ``"prefix": "sys-a", "prefix_tokens": 256`` (one name, one
  length: every arrival naming ``sys-a`` starts with the same 256 tokens).

Offsets start at 0 (the first arrival opens the window). A file whose times go backwards
is sorted (stably) and says how many lines were out of order; it is not refused, since
merged logs often are. The public formats record requests that failed in the original
service with 0 output tokens (BurstGPT's failures): those lines are skipped and counted,
since no request can ask for 0 tokens. Anything else wrong is a :class:`TraceError` that
names the file, the line, the field, the value and what is allowed.
"""

from __future__ import annotations

import csv
import hashlib
import io
import math
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, NamedTuple

import orjson

TraceFormat = Literal["mooncake", "azure", "burstgpt", "soaktop"]
TRACE_FORMATS: tuple[TraceFormat, ...] = ("mooncake", "azure", "burstgpt", "soaktop")
BLOCK_TOKENS = 512
"""Tokens per Mooncake hash id (the trace's KV block), and per block of a soaktop prefix."""
MAX_TOKENS = 10_000_000
"""Largest token count of one arrival (as ``max_tokens``' bound in the run config)."""
MAX_OFFSET_S = 30 * 86_400.0
"""Longest trace: 30 days, the run's longest duration."""
SKIP_NO_OUTPUT = "0 output tokens (failed in the source: no request asks for 0)"
_AZURE_HEADER = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
_BURST_COLUMNS = ("Timestamp", "Request tokens", "Response tokens")


class TraceError(ValueError):
    """A trace file that cannot be replayed; the message names the file and the problem."""


class TraceArrival(NamedTuple):
    """One arrival: when, how many tokens in and out, which shared blocks lead its prompt
    (a tuple: a 100k-line trace is 100k of these, made and kept cheaply)."""

    offset_s: float
    """Seconds from the trace's first arrival (before ``time_scale``)."""
    input_tokens: int
    output_tokens: int
    blocks: tuple[int, ...] = ()
    """Shared blocks of :data:`BLOCK_TOKENS` tokens leading the prompt (the last one may
    be partial): Mooncake's hash ids, or a soaktop prefix's blocks. Arrivals with the same
    leading ids send the same leading text."""
    line: int = 0
    """The file's line (1-based; the CSV header is line 1)."""


@dataclass(frozen=True)
class Trace:
    """A parsed trace: its arrivals in time order and what was made of the file."""

    path: Path
    format: TraceFormat
    sha256: str
    """Of the file's bytes (``sha256sum FILE`` says the same)."""
    arrivals: tuple[TraceArrival, ...]
    skipped: dict[str, int] = field(default_factory=dict)
    """Lines left out, by reason."""
    reordered: int = 0
    """Lines whose time came before an earlier line's (the arrivals were sorted)."""

    @property
    def duration_s(self) -> float:
        """The last arrival's offset: the trace's length at time scale 1."""
        return self.arrivals[-1].offset_s

    def shared_prefix_arrivals(self) -> int:
        """Arrivals whose first block leads another arrival's prompt too (a prefix cache
        can hit on them, the first of each aside)."""
        leads = Counter(a.blocks[0] for a in self.arrivals if a.blocks)
        return sum(1 for a in self.arrivals if a.blocks and leads[a.blocks[0]] > 1)

    def facts(self, time_scale: float) -> dict[str, Any]:
        """What the record says about the trace (``identity.prompt_pool.trace``)."""
        ins = [a.input_tokens for a in self.arrivals]
        outs = [a.output_tokens for a in self.arrivals]
        return {
            "path": str(self.path),
            "format": self.format,
            "sha256": self.sha256,
            "arrivals": len(self.arrivals),
            "duration_s": self.duration_s / time_scale,
            "time_scale": time_scale,
            "input_tokens_total": sum(ins),
            "output_tokens_total": sum(outs),
            "shared_prefix_arrivals": self.shared_prefix_arrivals(),
            "skipped": dict(self.skipped),
            "reordered": self.reordered,
        }


def load_trace(path: Path) -> Trace:
    """Read and check a whole trace file (see the module docstring)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise TraceError(f"trace file {str(path)!r} does not exist") from None
    except IsADirectoryError:
        raise TraceError(f"trace file {str(path)!r} is a directory, not a file") from None
    except OSError as e:
        raise TraceError(f"trace file {str(path)!r} cannot be read: {e.strerror or e}") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise TraceError(f"trace file {str(path)!r} is not UTF-8 text (byte {e.start})") from None
    fmt = detect_format(path, text)
    parser = _parse_jsonl if fmt in ("mooncake", "soaktop") else _parse_csv
    rows, skipped = parser(path, fmt, text)
    if not rows:
        why = f" ({_skipped_words(skipped)})" if skipped else ""
        raise TraceError(f"trace file {str(path)!r} holds no arrivals{why}")
    return _finish(path, fmt, hashlib.sha256(data).hexdigest(), rows, skipped)


_CACHE: dict[tuple[str, int, int], Trace] = {}


def read_trace(path: Path) -> Trace:
    """:func:`load_trace`, parsed once per file version (the config check, the schedule
    and the source all ask for it): keyed by the resolved path, size and mtime."""
    try:
        st = path.stat()
    except OSError:
        return load_trace(path)  # its own words for a missing or unreadable file
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if key not in _CACHE:
        _CACHE.clear()  # one trace per run: never hold two
        _CACHE[key] = load_trace(path)
    return _CACHE[key]


def detect_format(path: Path, text: str) -> TraceFormat:
    """The format of ``text`` from its first non-empty line (JSON object or CSV header)."""
    first = next((ln.strip() for ln in _lines(text) if ln.strip()), "")
    if not first:
        raise TraceError(f"trace file {str(path)!r} is empty")
    if first.startswith("{"):
        try:
            obj = orjson.loads(first)
        except orjson.JSONDecodeError as e:
            raise TraceError(f"trace file {str(path)!r} line 1: not JSON ({e})") from None
        if isinstance(obj, dict) and "timestamp" in obj and "input_length" in obj:
            return "mooncake"
        if isinstance(obj, dict) and "t_s" in obj:
            return "soaktop"
        keys = ", ".join(sorted(obj)) if isinstance(obj, dict) else type(obj).__name__
        raise TraceError(
            f"trace file {str(path)!r} line 1: a JSON line with {keys}; allowed: Mooncake "
            '({"timestamp", "input_length", "output_length", "hash_ids"}) or soaktop '
            '({"t_s", "input_tokens", "output_tokens"[, "prefix", "prefix_tokens"]})'
        )
    header = [c.strip() for c in next(csv.reader([first]))]
    if tuple(header[:3]) == _AZURE_HEADER:
        return "azure"
    if all(c in header for c in _BURST_COLUMNS):
        return "burstgpt"
    raise TraceError(
        f"trace file {str(path)!r} line 1: header {first[:120]!r} is not a known trace; "
        f"allowed: Azure ({','.join(_AZURE_HEADER)}), BurstGPT (Timestamp,Model,Request "
        "tokens,Response tokens,Total tokens,Log Type), or a JSONL trace (Mooncake, soaktop)"
    )


# -- one line at a time --------------------------------------------------------------------


def _lines(text: str) -> list[str]:
    """The file's lines, split at line feeds only (a CR before one is JSON whitespace):
    ``str.splitlines`` also splits at U+2028, U+0085 and the like, which a JSON string
    may hold raw, and would number the lines after them wrong. A file of bare CRs (no
    line feed at all) is split at those."""
    return text.split("\n" if "\n" in text or "\r" not in text else "\r")


_Row = tuple[float, int, int, tuple[int, ...], int]
"""(time in seconds, input tokens, output tokens, shared blocks, line)."""


def _missing(path: Path, line: int, name: str, needed: tuple[str, ...]) -> TraceError:
    return TraceError(
        f"trace file {str(path)!r} line {line}: {name} is missing; every line has "
        f"{', '.join(needed)}"
    )


def _bad(path: Path, line: int, name: str, value: object, allowed: str) -> TraceError:
    shown = repr(value) if not isinstance(value, str) else repr(value[:80])
    return TraceError(f"trace file {str(path)!r} line {line}: {name} = {shown}; allowed: {allowed}")


def _number(value: object) -> float | None:
    """A JSON number or a CSV cell as a float (None: not a number)."""
    if isinstance(value, str):
        if "_" in value:  # float() reads "1_000" as 1000: no trace writes that
            return None
        try:
            return float(value.strip())
        except ValueError:
            return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None


def _count(path: Path, line: int, name: str, value: object, least: int) -> int:
    """A token count: a whole number from ``least`` to :data:`MAX_TOKENS` (a CSV cell or a
    JSON number; ``12.0`` is 12, ``12.5`` is refused)."""
    number = _number(value)
    if number is not None and number.is_integer() and least <= number <= MAX_TOKENS:
        return int(number)
    raise _bad(path, line, name, value, f"a whole number from {least} to {MAX_TOKENS:,}")


def _seconds(path: Path, line: int, name: str, value: object, scale: float) -> float:
    number = _number(value)
    if number is not None and math.isfinite(s := number * scale) and 0 <= s <= MAX_OFFSET_S:
        return s
    unit = "milliseconds" if scale != 1.0 else "seconds"
    raise _bad(path, line, name, value, f"{unit} from 0 to 30 days, a number")


def _parse_jsonl(path: Path, fmt: TraceFormat, text: str) -> tuple[list[_Row], Counter[str]]:
    rows: list[_Row] = []
    skipped: Counter[str] = Counter()
    prefixes: dict[str, tuple[int, int, tuple[int, ...]]] = {}
    next_block = [0]
    for n, raw in enumerate(_lines(text), 1):
        if not raw.strip():
            continue
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError as e:
            raise TraceError(f"trace file {str(path)!r} line {n}: not JSON ({e})") from None
        if not isinstance(obj, dict):
            raise _bad(path, n, "the line", raw, "a JSON object")
        if fmt == "mooncake":
            row = _mooncake(path, n, obj)
        else:
            row = _soaktop(path, n, obj, prefixes, next_block)
        if row is None:
            skipped[SKIP_NO_OUTPUT] += 1
        else:
            rows.append(row)
    return rows, skipped


def _mooncake(path: Path, n: int, obj: dict[str, Any]) -> _Row | None:
    needed = ("timestamp", "input_length", "output_length")
    for key in needed:
        if key not in obj:
            raise _missing(path, n, key, needed)
    t = _seconds(path, n, "timestamp", obj["timestamp"], 1e-3)
    inp = _count(path, n, "input_length", obj["input_length"], 1)
    out = _count(path, n, "output_length", obj["output_length"], 0)
    ids = obj.get("hash_ids", [])
    if not isinstance(ids, list) or not (
        all(type(i) is int for i in ids) and (not ids or (min(ids) >= 0 and max(ids) < 2**62))
    ):
        raise _bad(path, n, "hash_ids", ids, "a list of whole numbers from 0")
    most = -(-inp // BLOCK_TOKENS)
    if len(ids) > most:
        raise _bad(
            path, n, "hash_ids", f"{len(ids)} ids", f"at most {most}: one per "
            f"{BLOCK_TOKENS}-token block of input_length {inp}",
        )  # fmt: skip
    return None if out == 0 else (t, inp, out, tuple(ids), n)


def _soaktop(
    path: Path,
    n: int,
    obj: dict[str, Any],
    prefixes: dict[str, tuple[int, int, tuple[int, ...]]],
    next_block: list[int],
) -> _Row:
    known = {"t_s", "input_tokens", "output_tokens", "prefix", "prefix_tokens"}
    for key in obj:
        if key not in known:
            raise _bad(path, n, key, obj[key], f"only {', '.join(sorted(known))}")
    needed = ("t_s", "input_tokens", "output_tokens")
    for key in needed:
        if key not in obj:
            raise _missing(path, n, key, needed)
    t = _seconds(path, n, "t_s", obj["t_s"], 1.0)
    inp = _count(path, n, "input_tokens", obj["input_tokens"], 1)
    out = _count(path, n, "output_tokens", obj["output_tokens"], 1)
    name = obj.get("prefix")
    if name is None:
        if "prefix_tokens" in obj:
            raise _bad(path, n, "prefix_tokens", obj["prefix_tokens"], "only with a prefix")
        return (t, inp, out, (), n)
    if not isinstance(name, str) or not name or len(name) > 256:
        raise _bad(path, n, "prefix", name, "a name of 1 to 256 characters")
    if "prefix_tokens" not in obj:
        raise _missing(path, n, "prefix_tokens", ("prefix_tokens", "with a prefix"))
    size = _count(path, n, "prefix_tokens", obj["prefix_tokens"], 1)
    if size > inp:
        raise _bad(path, n, "prefix_tokens", size, f"at most input_tokens ({inp})")
    if name not in prefixes:
        count = -(-size // BLOCK_TOKENS)
        prefixes[name] = (size, n, tuple(range(next_block[0], next_block[0] + count)))
        next_block[0] += count
    first_size, first_line, blocks = prefixes[name]
    if size != first_size:
        raise _bad(
            path, n, "prefix_tokens", size,
            f"{first_size}, as line {first_line} gave prefix {name!r}: one prefix, one length",
        )  # fmt: skip
    return (t, inp, out, blocks, n)


def _parse_csv(path: Path, fmt: TraceFormat, text: str) -> tuple[list[_Row], Counter[str]]:
    reader = csv.reader(io.StringIO(text))
    # The header is the first non-blank row, as detect_format found it (blank rows are []).
    header = next(([c.strip() for c in row] for row in reader if "".join(row).strip()), [])
    if fmt == "azure":
        cols: tuple[int, ...] = (0, 1, 2)
        names = _AZURE_HEADER
    else:
        cols = tuple(header.index(c) for c in _BURST_COLUMNS)
        names = _BURST_COLUMNS
    rows: list[_Row] = []
    skipped: Counter[str] = Counter()
    zero: datetime | None = None
    for cells in reader:
        n = reader.line_num  # the file's line (a quoted cell may span lines)
        if not cells or not "".join(cells).strip():
            continue
        if len(cells) < len(header):
            raise _bad(path, n, "the row", ",".join(cells), f"{len(header)} columns as the header")
        t_cell, in_cell, out_cell = (cells[i] for i in cols)
        if fmt == "azure":
            when = _datetime(path, n, t_cell)
            if zero is None:
                zero = when
            try:
                t = (when - zero).total_seconds()
            except TypeError:
                raise _bad(
                    path, n, names[0], t_cell, "times all with or all without a zone"
                ) from None
        else:
            t = _seconds(path, n, names[0], t_cell, 1.0)
        inp = _count(path, n, names[1], in_cell, 0)
        out = _count(path, n, names[2], out_cell, 0)
        if out == 0:
            skipped[SKIP_NO_OUTPUT] += 1
            continue
        rows.append((t, inp, out, (), n))
    return rows, skipped


def _datetime(path: Path, n: int, cell: str) -> datetime:
    text = cell.strip()
    head, dot, frac = text.partition(".")
    if dot:  # Azure writes 7 fractional digits; Python's parser takes at most 6
        digits = len(frac) - len(frac.lstrip("0123456789"))
        text = f"{head}.{frac[: min(digits, 6)]}{frac[digits:]}"
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise _bad(
            path, n, "TIMESTAMP", cell, "a date and time such as 2023-11-16 18:15:46.6805900"
        ) from None


def _finish(
    path: Path, fmt: TraceFormat, sha: str, rows: list[_Row], skipped: Counter[str]
) -> Trace:
    """Sort by time (stably), start at 0, and check the span."""
    reordered = 0
    latest = -math.inf
    for row in rows:
        if row[0] < latest:
            reordered += 1
        latest = max(latest, row[0])
    if reordered:
        rows = sorted(rows, key=lambda r: r[0])
    zero = rows[0][0]
    span = rows[-1][0] - zero
    if span > MAX_OFFSET_S:
        raise TraceError(
            f"trace file {str(path)!r} spans {span / 86_400:,.1f} days; allowed: at most 30"
        )
    arrivals = tuple(TraceArrival(t - zero, i, o, b, n) for t, i, o, b, n in rows)
    return Trace(path, fmt, sha, arrivals, dict(skipped), reordered)


def _skipped_words(skipped: Counter[str]) -> str:
    return "; ".join(f"{n:,} line(s) skipped: {why}" for why, n in skipped.items())

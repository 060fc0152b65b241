"""JSON text that msgspec will not decode as it stands: where its structure is, whether it is a cut-off prefix, and
the repairs that make a real trace's not-quite-JSON decodable.

The structure scan finds the brackets and commas that lie outside strings (a quote counts unless an odd run of
backslashes precedes it) and the nesting depth after each, vectorised in numpy: it is what tells a cut between two
entries from a cut inside one, splits an array whose text msgspec rejects into its values, and tells which keys
of a header are top-level ones (`PrefixDepth`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import msgspec
import numpy as np

QUOTE, BACKSLASH, COMMA = ord('"'), ord("\\"), ord(",")
_SPECIAL = np.zeros(256, dtype=bool)
_SPECIAL[list(b'"\\{}[],')] = True
_DEPTH_STEP = np.zeros(256, dtype=np.int64)
_DEPTH_STEP[list(b"{[")] = 1
_DEPTH_STEP[list(b"}]")] = -1
_VALUE = msgspec.json.Decoder(msgspec.Raw)
CUT_OFF = "Input data was truncated"  # msgspec's message for text that stops before its value is complete


@dataclass(frozen=True)
class Structure:
    """The structural bytes of a text that starts outside any string, in order."""

    positions: np.ndarray  # byte offsets of { } [ ] , outside strings
    chars: np.ndarray  # those bytes
    depth: np.ndarray  # nesting depth after each, relative to the start of the text
    ends_in_string: bool
    quotes: np.ndarray  # byte offsets of the quotes that open and close strings, in turn (the first opens one)

    def at_depth(self, depth: int, chars: bytes) -> np.ndarray:
        """Offsets of the given structural bytes that leave the nesting at `depth`."""
        mask = (self.depth == depth) & np.isin(self.chars, list(chars))
        return self.positions[mask]


def structure(text: bytes) -> Structure:
    data = np.frombuffer(text, dtype=np.uint8)
    positions = np.flatnonzero(_SPECIAL[data])
    chars = data[positions]
    quote = _real_quotes(positions, chars)
    quotes_so_far = np.cumsum(quote)
    outside = (chars != QUOTE) & (chars != BACKSLASH) & (quotes_so_far % 2 == 0)
    kept = chars[outside]
    return Structure(positions[outside], kept, np.cumsum(_DEPTH_STEP[kept]),
                     bool(quotes_so_far[-1] % 2) if len(quotes_so_far) else False, positions[quote])


@dataclass
class PrefixDepth:
    """Where strings open in one growing text, and at what nesting depth, asked at offsets that only grow: each
    question scans only the text since the last structural byte scanned before (from there the text is outside
    every string), so the keys of a text looked at block by block cost one scan of it, not one each."""

    scanned: int = 0  # just after the last structural byte scanned: outside every string
    depth: int = 0  # the nesting depth there

    def string_depths(self, text: bytes | bytearray, offsets: list[int]) -> list[int | None]:
        """For each of OFFSETS (ascending): the nesting depth there if a string opens there (a quote outside every
        string), else None. The text up to them is the one earlier questions saw, or more of it."""
        if not offsets:
            return []
        if offsets[0] < self.scanned:  # asked before where the last question was: scanned again from the start
            self.scanned, self.depth = 0, 0
        found = structure(bytes(text[self.scanned:offsets[-1] + 1]))
        at = np.asarray(offsets) - self.scanned
        nth_quote = np.searchsorted(found.quotes, at)  # the quotes before each offset: an even count, outside strings
        opens = (nth_quote % 2 == 0) & (np.append(found.quotes, -1)[nth_quote] == at)
        depths = self.depth + np.append(0, found.depth)[np.searchsorted(found.positions, at)]
        if len(found.positions):
            self.scanned, self.depth = self.scanned + int(found.positions[-1]) + 1, self.depth + int(found.depth[-1])
        return [depth if open_ else None for open_, depth in zip(opens.tolist(), depths.tolist())]


def _real_quotes(positions: np.ndarray, chars: np.ndarray) -> np.ndarray:
    """Which of these bytes (every quote and backslash of a text among them) are quotes that open or close a string:
    those not preceded by an odd run of backslashes."""
    backslash = chars == BACKSLASH
    index = np.arange(len(positions))
    continues = np.zeros(len(positions), dtype=bool)
    continues[1:] = backslash[1:] & backslash[:-1] & (np.diff(positions) == 1)
    run_start = np.maximum.accumulate(np.where(backslash & ~continues, index, 0))
    odd_run = (index - run_start) % 2 == 0  # a run of odd length ends here
    escaped = np.zeros(len(positions), dtype=bool)
    escaped[1:] = backslash[:-1] & (positions[:-1] == positions[1:] - 1) & odd_run[:-1]
    return (chars == QUOTE) & ~escaped


def value_state(text: bytes) -> str:
    """Whether `text` is a whole JSON value ("complete"), the start of one that a cut interrupted ("cut"), or
    neither ("malformed"). A number cut after its dot, exponent or sign counts as cut."""
    # both patterns end at the text's end: looked for in its last bytes only (over a whole 64 MB text: ~9 s)
    tail = max(0, len(text) - CUT_TOKEN_BYTES)
    if cut_token := CUT_NON_FINITE.search(text, tail):  # the start of a NaN or Infinity
        text = text[:cut_token.start()]
    if CUT_NUMBER.search(text, max(0, len(text) - CUT_TOKEN_BYTES)):
        text += b"0"
    try:
        _VALUE.decode(text)
    except msgspec.DecodeError as exc:
        if str(exc) == CUT_OFF:
            return "cut"
        repaired, _ = repaired_json(text)
        return value_state(repaired) if repaired != text else "malformed"
    return "complete"


def split_array(text: bytes) -> list[bytes] | None:
    """The values of a JSON array's text, split where its top-level commas are; None if it is not one array."""
    body = text.strip(b" \t\r\n")
    if body[:1] != b"[" or body[-1:] != b"]":
        return None
    found = structure(body[1:-1])
    if found.ends_in_string or (len(found.depth) and (found.depth.min() < 0 or found.depth[-1] != 0)):
        return None
    commas = found.at_depth(0, b",")
    inner = body[1:-1]
    bounds = np.concatenate(([-1], commas, [len(inner)]))
    values = [inner[a + 1:b].strip(b" \t\r\n") for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist())]
    if values == [b""]:
        return []
    return None if any(not v for v in values) else values


# --------------------------------------------------------------------------- repairs

# Python's json module writes NaN / Infinity / -Infinity, C++ printf nan / inf: neither is JSON. Outside strings they
# become strings ("NaN"), so a field that needed a number sees a string and is reported as such.
NON_FINITE = re.compile(rb"-?(?:NaN|Infinity|nan|inf)(?![A-Za-z0-9_])")
# A \uD800-\uDFFF escape that is not half of a pair (Python's json writes them for lone surrogates); the escape's
# backslash must itself be unescaped (an even run of backslashes before it).
LONE_SURROGATE = re.compile(
    rb"(?<!\\)((?:\\\\)*)\\u([dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F][0-9a-fA-F]{2})"
    rb"|(?<![dD][89abAB][0-9a-fA-F]{2}\\u)[dD][c-fC-F][0-9a-fA-F]{2})")
REPLACEMENT_ESCAPE = rb"\ufffd"
# A cut number's or non-finite word's last bytes (at most "-Infinit" and the byte before it, which a lookbehind sees
# before a search's start)
CUT_TOKEN_BYTES = 16
CUT_NUMBER = re.compile(rb"(?:[0-9][.eE]|[0-9][eE][+-]|(?<![A-Za-z0-9_.\"])-)\Z")
CUT_NON_FINITE = re.compile(rb"(?<![A-Za-z0-9_.\"])-?(?:N|Na|I|In|Inf|Infi|Infin|Infini|Infinit|n|na|i|in)\Z")


def repaired_json(text: bytes) -> tuple[bytes, list[str]]:
    """The text with non-finite numbers quoted and lone surrogate escapes replaced by \\ufffd (the same length), and
    what was repaired (reasons: non_finite_number, lone_surrogate)."""
    reasons = []
    surrogates = LONE_SURROGATE.sub(lambda m: m.group(1) + REPLACEMENT_ESCAPE, text)
    if surrogates != text:
        reasons.append("lone_surrogate")
    tokens = list(NON_FINITE.finditer(surrogates))
    if not tokens:
        return surrogates, reasons
    quotes = _unescaped_quotes(surrogates)
    starts = np.array([m.start() for m in tokens])
    outside = np.searchsorted(quotes, starts) % 2 == 0
    pieces, last = [], 0
    for match, repair in zip(tokens, outside.tolist()):
        if repair:
            pieces += [surrogates[last:match.start()], b'"', match.group(), b'"']
            last = match.end()
    if not pieces:
        return surrogates, reasons
    reasons.append("non_finite_number")
    return b"".join(pieces) + surrogates[last:], reasons


def _unescaped_quotes(text: bytes) -> np.ndarray:
    data = np.frombuffer(text, dtype=np.uint8)
    positions = np.flatnonzero((data == QUOTE) | (data == BACKSLASH))
    return positions[_real_quotes(positions, data[positions])]


def valid_utf8(text: bytes) -> bool:
    if text.isascii():
        return True
    try:
        text.decode()
    except UnicodeDecodeError:
        return False
    return True


def utf8_repaired(text: bytes) -> bytes:
    """Invalid UTF-8 sequences replaced by U+FFFD."""
    return text.decode(errors="replace").encode()

"""Decoding `traceEvents` entries, and repairing those that are not quite JSON.

Speed comes from msgspec: entries decode into typed Structs with `args`, `ts` and `dur` kept as raw JSON text, so
the arguments stay byte-exact and timestamps can be parsed from their decimal text without float rounding. Where
the fast decode fails, each entry is decoded alone: bytes that are not UTF-8, NaN / Infinity and lone surrogates
are repaired (each a `Repair`, a diagnostic to be), and fields of unexpected types are read leniently.
"""

from __future__ import annotations

import gc
from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import get_args

import msgspec
import pyarrow as pa

from tracekit.errors import InputError
from tracekit.read import jsontext


class Entry(msgspec.Struct, gc=False):  # gc=False: holds only atoms, so it is never part of a reference cycle
    """One `traceEvents` entry, decoded only as far as tables need."""

    ph: str | None = None
    cat: str | None = None
    name: str | None = None
    pid: int | str | None = None
    tid: int | str | None = None
    ts: msgspec.Raw = msgspec.Raw(b"")
    dur: msgspec.Raw = msgspec.Raw(b"")
    id: int | str | None = None
    bp: str | None = None
    s: str | None = None
    args: msgspec.Raw = msgspec.Raw(b"")


def _f(json_name: str):
    return msgspec.field(name=json_name, default=None)


class Args(msgspec.Struct, gc=False):
    """The `args` keys that become typed columns of `events` (legacy spellings included)."""

    device: int | None = None
    stream: int | None = None
    correlation: int | None = None
    external_id: int | None = _f("External id")
    external_id_legacy: int | None = _f("external id")
    record_function_id: int | None = _f("Record function id")
    sequence_number: int | None = _f("Sequence number")
    fwd_thread_id: int | None = _f("Fwd thread id")
    input_dims: msgspec.Raw = _f("Input Dims")
    input_dims_legacy: msgspec.Raw = _f("Input dims")
    input_type: msgspec.Raw = _f("Input type")
    input_strides: msgspec.Raw = _f("Input Strides")
    concrete_inputs: msgspec.Raw = _f("Concrete Inputs")
    grid: list[int] | None = None
    block: list[int] | None = None
    bytes: int | None = None
    collective_name: str | None = _f("Collective name")
    in_msg_nelems: int | None = _f("In msg nelems")
    out_msg_nelems: int | None = _f("Out msg nelems")
    dtype: str | None = None
    group_size: int | None = _f("Group size")
    process_group_name: str | None = _f("Process Group Name")
    process_group_desc: str | None = _f("Process Group Description")
    process_group_ranks: msgspec.Raw = _f("Process Group Ranks")
    sync_kind: str | None = _f("cuda_sync_kind")
    wait_on_stream: int | None = None
    wait_on_event_correlation: int | None = _f("wait_on_cuda_event_record_corr_id")
    rank: int | None = None


ARGS_FIELDS = Args.__struct_fields__
RAW_ARGS_FIELDS = {f.name for f in msgspec.structs.fields(Args) if f.type is msgspec.Raw}  # kept as JSON text
INT32_ARGS = ("device", "group_size")  # int32 columns of `events`
ARG_TYPES = {f.name: pa.string() if f.name in RAW_ARGS_FIELDS or str in get_args(f.type)
             else pa.list_(pa.int64()) if f.name in ("grid", "block")
             else pa.int32() if f.name in INT32_ARGS else pa.int64()
             for f in msgspec.structs.fields(Args)}
_ENTRIES = msgspec.json.Decoder(list[Entry])
_ARGS_LIST = msgspec.json.Decoder(list[Args | None], strict=False)
_ARGS_ONE = msgspec.json.Decoder(Args | None, strict=False)
RAW_LIST = msgspec.json.Decoder(list[msgspec.Raw])


@dataclass(frozen=True)
class Repair:
    """An entry that needed its text repaired before it would decode."""

    index: int  # within the array decoded
    reason: str  # bad_utf8, non_finite_number, lone_surrogate
    pid: str | None


REPAIR_DETAILS = {
    "bad_utf8": "bytes that are not UTF-8 were replaced by U+FFFD",
    "non_finite_number": "NaN / Infinity (not JSON) were read as the strings \"NaN\" / \"Infinity\"",
    "lone_surrogate": "an unpaired UTF-16 surrogate escape was replaced by \\ufffd",
}


def decode_entries(path: Path, entries: bytes | msgspec.Raw
                   ) -> tuple[list[Entry | None], list[bytes] | None, list[Repair]]:
    """Decode every entry of a JSON array; an entry that is not an object becomes None. Where the fast decode
    fails, each entry is decoded alone (and repaired where needed): the raw texts and the repairs are returned."""
    if jsontext.valid_utf8(entries if isinstance(entries, bytes) else bytes(entries)):
        try:
            return _ENTRIES.decode(entries), None, []
        except (msgspec.ValidationError, msgspec.DecodeError):
            pass
    try:
        raws = [bytes(r) for r in RAW_LIST.decode(entries)]
    except msgspec.ValidationError:
        raise InputError(f"{path}: traceEvents is not a list") from None
    except msgspec.DecodeError as exc:
        raws = jsontext.split_array(bytes(entries))
        if raws is None:
            raise InputError(f"{path}: not valid JSON ({exc})") from None
    decoded: list[Entry | None] = []
    repairs: list[Repair] = []
    for index, raw in enumerate(raws):
        entry, raws[index], reasons = _decoded_entry(path, raw)
        decoded.append(entry)
        repairs += [Repair(index, reason, None if entry is None else _pid_text(entry.pid)) for reason in reasons]
    return decoded, raws, repairs


def _decoded_entry(path: Path, raw: bytes) -> tuple[Entry | None, bytes, list[str]]:
    """One entry, its text (repaired where needed) and the repairs made."""
    reasons = []
    if not jsontext.valid_utf8(raw):
        raw = jsontext.utf8_repaired(raw)
        reasons.append("bad_utf8")
    while True:
        try:
            try:
                return _ENTRY.decode(raw), raw, reasons
            except msgspec.ValidationError:  # a field of another type, maybe not-quite-JSON further on
                return _lenient_entry(raw), raw, reasons
        except msgspec.DecodeError as exc:
            repaired, more = jsontext.repaired_json(raw)
            if not more or repaired == raw:
                raise InputError(f"{path}: not valid JSON ({exc})") from None
            raw, reasons = repaired, reasons + more


def _pid_text(pid) -> str | None:
    return None if pid is None else pid if isinstance(pid, str) else str(pid)


class RawEntry(msgspec.Struct, gc=False):
    """An entry's fields as JSON text: for an entry whose fields have unexpected types."""

    ph: msgspec.Raw = msgspec.Raw(b"")
    cat: msgspec.Raw = msgspec.Raw(b"")
    name: msgspec.Raw = msgspec.Raw(b"")
    pid: msgspec.Raw = msgspec.Raw(b"")
    tid: msgspec.Raw = msgspec.Raw(b"")
    ts: msgspec.Raw = msgspec.Raw(b"")
    dur: msgspec.Raw = msgspec.Raw(b"")
    id: msgspec.Raw = msgspec.Raw(b"")
    bp: msgspec.Raw = msgspec.Raw(b"")
    s: msgspec.Raw = msgspec.Raw(b"")
    args: msgspec.Raw = msgspec.Raw(b"")


_ENTRY = msgspec.json.Decoder(Entry)
_RAW_ENTRY = msgspec.json.Decoder(RawEntry)
_TEXT = msgspec.json.Decoder(str | None)
_ID = msgspec.json.Decoder(int | str | None)


def _lenient_entry(raw: bytes) -> Entry | None:
    """An entry whose fields have unexpected types: a field that should be text and is not becomes its JSON text;
    ts, dur and args stay as their exact text (the table columns say what they could not use). None when the entry
    is not a JSON object."""
    try:
        fields = _RAW_ENTRY.decode(raw)
    except msgspec.ValidationError:
        return None

    def text(value: msgspec.Raw, decoder=_TEXT):
        if not len(value):
            return None
        try:
            return decoder.decode(value)
        except msgspec.ValidationError:
            return bytes(value).decode()

    return Entry(
        ph=text(fields.ph), cat=text(fields.cat), name=text(fields.name), pid=text(fields.pid, _ID),
        tid=text(fields.tid, _ID), ts=fields.ts, dur=fields.dur, id=text(fields.id, _ID), bp=text(fields.bp),
        s=text(fields.s), args=fields.args,
    )


def decode_args(raws: Sequence[msgspec.Raw], all_present: bool = False) -> tuple[list[Args], list[tuple[int, str]]]:
    """Typed args for each raw args text (empty: no args); returns (args, [(row, problem)]) for fields that did not
    fit. `all_present` says no text is empty."""
    blob = b"[" + b",".join(raws if all_present else [r or b"null" for r in raws]) + b"]"
    empty = Args()
    try:
        return [a or empty for a in _ARGS_LIST.decode(blob)], []
    except (msgspec.ValidationError, msgspec.DecodeError):
        pass
    out, problems = [], []
    for row, raw in enumerate(raws):
        if not len(raw):
            out.append(empty)
            continue
        try:
            out.append(_ARGS_ONE.decode(raw) or empty)
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            out.append(_lenient_args(raw))
            problems.append((row, str(exc)))
    return out, problems


RawArgs = msgspec.defstruct("RawArgs", [(f.name, msgspec.Raw, msgspec.field(name=f.encode_name, default=msgspec.Raw(b"")))
                                        for f in msgspec.structs.fields(Args)], gc=False)
_RAW_ARGS = msgspec.json.Decoder(RawArgs)
_ARG_DECODERS = {f.name: msgspec.json.Decoder(f.type, strict=False) for f in msgspec.structs.fields(Args)}


def _lenient_args(raw: msgspec.Raw) -> Args:
    """The args fields that fit their type; the others left null."""
    try:
        fields = _RAW_ARGS.decode(raw)
    except msgspec.ValidationError:
        return Args()
    typed = {}
    for name in ARGS_FIELDS:
        value = getattr(fields, name)
        if not len(value):
            continue
        if name in RAW_ARGS_FIELDS:
            typed[name] = value
            continue
        try:
            typed[name] = _ARG_DECODERS[name].decode(value)
        except msgspec.ValidationError:
            pass
    return Args(**typed)


@contextmanager
def gc_paused():
    """The cycle collector off while millions of short-lived acyclic objects are made (it would only rescan them,
    30-40% of the time); restored afterwards."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()

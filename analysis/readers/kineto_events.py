"""The structs msgspec decodes a Kineto trace's events into, chosen by phase (`ph`: a tagged union, so a flow
event decodes only its category), and `decode` of a piece of `traceEvents` (cut by kineto_stream)."""

from __future__ import annotations

import json
from functools import reduce
from operator import or_
from typing import Any

import msgspec

UNSET = msgspec.UNSET


class Args(msgspec.Struct, frozen=True, gc=False):
    """The `args` keys the reader uses (every other key is skipped by the decoder). UNSET where a key is
    absent and the reader falls back to another field (device → pid, stream → tid)."""

    correlation: Any = None
    stream: Any = UNSET
    device: Any = UNSET
    grid: Any = None
    block: Any = None
    bytes: Any = None
    external_id: Any = msgspec.field(default=None, name="External id")
    # record_shapes=True: input sizes, kept as their JSON text (few distinct values: each formatted once)
    input_dims: msgspec.Raw = msgspec.field(default=msgspec.Raw(b"null"), name="Input Dims")
    name: Any = None  # a metadata event's thread name


class Event(msgspec.Struct, gc=False):
    """One trace event. `ph` is NOT_EVENT for an element of traceEvents that is not an object."""

    ph: Any = None
    cat: Any = UNSET
    name: Any = None
    pid: Any = None
    tid: Any = None
    ts: Any = None
    dur: Any = None
    args: Args | None = None

    @property
    def category(self) -> Any:
        """What a left-out event is counted by, with `ph` (a phase struct reads the same)."""
        return self.cat


NOT_EVENT = object()
DECODE = msgspec.json.Decoder(list[Event], float_hook=str)  # any element that is an object
NO_ARGS = Args()
NOT_COMPLETE = object()  # the `cat` of a phase struct other than X: no group's category


def _phase(ph: str, fields: list[tuple[str, Any, Any]], namespace: dict[str, Any]) -> type[msgspec.Struct]:
    """An event struct for one value of `ph` (also its class attribute `ph`, so it reads like an Event)."""
    return msgspec.defstruct(
        f"Phase{ord(ph)}", fields, tag_field="ph", tag=ph, gc=False, namespace={"ph": ph, **namespace}
    )


# The Chrome trace format's phases, each decoded into a struct of the fields the reader uses from it:
# complete events whole, metadata for thread names, every other phase (flows: a third of a trace's
# events) only its category, which is what it is counted by. Only X has a `cat` of its own: a group is
# found from `cat` alone. `args` is never None (null: the piece is decoded as Events).
_FIELDS = {f.name: (f.encode_name, f.type, f.default) for f in msgspec.structs.fields(Event)}
_CATEGORY = ("category", Any, msgspec.field(default=UNSET, name="cat"))
_OWN_CAT = {"category": Event.category}
_PHASES = [
    _phase("X", [_FIELDS[f] for f in _FIELDS if f != "ph"], _OWN_CAT),
    _phase("M", [_CATEGORY, *(_FIELDS[f] for f in ("name", "pid", "tid", "args"))], {"cat": NOT_COMPLETE}),
    *(_phase(ph, [_CATEGORY], {"cat": NOT_COMPLETE}) for ph in "BEiICbneNOPDstfRcVv()"),
]
DECODE_PHASES = msgspec.json.Decoder(list[reduce(or_, _PHASES)], float_hook=str)  # type: ignore[misc]


def decode(data: bytes | memoryview) -> list[Any] | None:
    """A JSON list of events as structs that read like Events (by phase where every element has a known
    `ph`, else as Events); None where it is not JSON that msgspec takes (a wrong cut, NaN, nesting past
    the recursion limit, an integer past the digit limit, ...): the stream then reads it and says why."""
    try:
        return DECODE_PHASES.decode(data)
    except msgspec.ValidationError:  # an element without a known phase, or not an object
        pass
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return None
    try:
        return DECODE.decode(data)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return None


def event_of(value: Any) -> Event:
    """An Event from what the stdlib parsed (the slow path): the same fields msgspec would fill."""
    if type(value) is not dict:
        return Event(ph=NOT_EVENT)
    args = value.get("args")
    a = None
    if type(args) is dict:
        dims = msgspec.Raw(json.dumps(args.get("Input Dims")).encode())
        a = Args(**{**_decoded(_ARGS_FIELDS, args), "input_dims": dims})
    return Event(**{**_decoded(_FIELDS, value), "args": a})


_ARGS_FIELDS = {f.name: (f.encode_name, f.type, f.default) for f in msgspec.structs.fields(Args)}


def _decoded(fields: dict[str, tuple[str, Any, Any]], value: dict[str, Any]) -> dict[str, Any]:
    """A struct's `fields` as msgspec fills them from the object `value`: each by its name there, its
    default where absent."""
    return {name: value.get(key, default) for name, (key, _, default) in fields.items()}

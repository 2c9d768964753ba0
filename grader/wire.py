"""The plain-data format that crosses the sandbox boundary, both ways.

Details: docs/internals.md, `grader.wire`.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
import math
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

from grader.errors import GraderError

MAX_FRAME = 16 * 1024 * 1024
# The base64 characters of tensor data one frame may carry (all its values
# together): well under MAX_FRAME, so the worker never writes a frame the
# reader would skip as too large. A tensor past what is left is sent as a
# "too large" record (its shape and dtype, no data).
VALUE_BUDGET = 6 * 1024 * 1024
MAX_CONTAINERS = 200_000
# The tensor shapes one trace record of a list, tuple or dict may hold
# (grader.worker.agent.MAX_HELD).
MAX_HELD_SHAPES = 64
# A description's flat map of the sandbox table's numbers at any depth
# (grader.worker.agent.NUMBERS_ENTRIES).
MAX_NUMBERS = 128
# The verb of an "untraceable" event that reports torch operations chosen
# by data rather than by code (grader.worker.agent.CHOSEN_BY_DATA;
# docs/threat-model.md, principle 4).
CHOSEN_BY_DATA = "choose by data"
#: The verb of an "untraceable" event that reports a graded call handing
#: a tensor's values to code outside torch (grader.worker.agent.VALUES_OUT).
VALUES_OUT = "take values out of torch"
#: The verb of a compiler's stand-in: it raised, nothing was compiled.
REFUSED_COMPILE = "compile (refused)"
#: The verb of a refused thread start (the kernel's count or a stand-in):
#: libraries start threads of their own (a progress bar's monitor), so
#: the flag says a refusal costs nothing by itself.
REFUSED_THREAD = "start a thread"
# The trace record of a value the tracer could not read without running
# code of the value's own (grader.worker.agent.UNREAD_RECORD;
# docs/threat-model.md, principle 6): the statement is not verified.
UNREAD_RECORD = "unread"
# The trace record of a tensor with no fixed shape (a nested tensor whose
# parts differ in size; grader.worker.agent.IRREGULAR_RECORD): no
# bracketed shape claims it, so the statement is not verified.
IRREGULAR_RECORD = "irregular"
#: A trace's ``made``: the lines of the submission on which a torch
#: operation made a tensor that outlived its statement (at most this many,
#: grader.worker.agent's run_probe).
MAX_MADE_LINES = 4096
#: A failed probe's ``reached``: the ids of the planned statements that
#: completed before its call raised (at most this many, sorted;
#: grader.worker.agent's run_probe). Words of the report only.
MAX_REACHED = 4096
MAGIC_SIZE = 16
MAC_SIZE = 32
_HEADER = struct.Struct(">I")


class ChannelError(GraderError):
    """A frame that is malformed or too large (a corrupted channel)."""


# --------------------------------------------------------------------------
# The job (trusted side to worker)


def job_frame(plan: dict) -> bytes:
    """A worker's job as the bytes its job pipe carries."""
    data = json.dumps(plan, separators=(",", ":")).encode("utf-8")
    return _HEADER.pack(len(data)) + data


def _read_exactly(fd: int, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = os.read(fd, min(size - len(data), 1 << 20))
        if not chunk:
            raise EOFError("the job ended early")
        data.extend(chunk)
    return bytes(data)


def read_job(fd: int) -> dict:
    """The job a :func:`job_frame` wrote to ``fd`` (the worker's side)."""
    (size,) = _HEADER.unpack(_read_exactly(fd, _HEADER.size))
    return json.loads(_read_exactly(fd, size))


# --------------------------------------------------------------------------
# Result frames (worker to trusted side)


def result_writer(key: bytes, magic: bytes, fd: int,
                  on_failure: Callable[[int], Any],
                  write: Callable[[int, Any], int] | None = None
                  ) -> Callable[[dict], None]:
    """Return ``send(message)``: write one authenticated result frame.

    The message is plain data (dicts, lists, tuples, text, numbers, None);
    anything else is sent as null. A channel that fails calls
    ``on_failure(75)`` (the worker ends) rather than raise into the code
    that runs. The closures look up no global name.
    """
    import _hashlib
    import _json
    import math

    if write is None:
        write = os.write
    b_type, b_str, b_int, b_float = type, str, int, float
    b_dict, b_list, b_tuple, b_len = dict, list, tuple, len
    b_memoryview, b_BaseException = memoryview, BaseException
    int_repr, float_repr = int.__repr__, float.__repr__
    infinity = math.inf
    encode_string = _json.encode_basestring_ascii
    hmac_digest = _hashlib.hmac_digest
    pack_length = _HEADER.pack

    def dump(value, depth=0):
        kind = b_type(value)
        if kind is b_str:
            return encode_string(value)
        if value is None:
            return "null"
        if value is True:
            return "true"
        if value is False:
            return "false"
        if kind is b_int:
            return int_repr(value)
        if kind is b_float:
            if value != value:
                return "NaN"
            if value == infinity:
                return "Infinity"
            if value == -infinity:
                return "-Infinity"
            return float_repr(value)
        if depth > 48:
            return "null"
        deeper = depth + 1
        # Lists, not generators, for join; an int inline (no call): the
        # frames' shape records are lists of many small ints.
        if kind is b_dict:
            return "{" + ",".join([
                encode_string(b_str(k)) + ":" + dump(v, deeper)
                for k, v in value.items()]) + "}"
        if kind is b_list or kind is b_tuple:
            return "[" + ",".join([
                int_repr(v) if b_type(v) is b_int else dump(v, deeper)
                for v in value]) + "]"
        return "null"

    def send(message):
        body = dump(message).encode("ascii")
        header = pack_length(b_len(body))
        data = magic + header + body + hmac_digest(key, header + body,
                                                   "sha256")
        view = b_memoryview(data)
        try:
            while view:
                view = view[write(fd, view):]
        except b_BaseException:
            on_failure(75)

    return send


def _parse(body: bytes) -> dict:
    """A frame's JSON object, parsed within bounds (ChannelError if not)."""
    if body.count(b"[") + body.count(b"{") > MAX_CONTAINERS:
        raise ChannelError(f"a frame holds more than {MAX_CONTAINERS} "
                           f"arrays and objects")
    try:
        message = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError,
            MemoryError) as exc:
        raise ChannelError(f"a frame is not JSON: "
                           f"{type(exc).__name__}") from exc
    if not isinstance(message, dict):
        raise ChannelError("a frame is not a JSON object")
    return message


class AuthenticatedReader:
    """Split a worker's result stream into frames the agent really sent.

    Each frame starts with the job's magic and ends with an HMAC of its
    length and body under the job's key. Bytes that do not start a frame,
    and frames whose HMAC is wrong, are foreign: the submission wrote them
    (it can reach the pipe, not the key). They are skipped, counted in
    :attr:`foreign_bytes` and :attr:`forged_frames`, and the reader looks
    for the next magic, so the agent's later frames still arrive.
    """

    def __init__(self, key: bytes, magic: bytes) -> None:
        """Start with an empty buffer for a job's key and magic."""
        self._key = key
        self._magic = magic
        self._buffer = bytearray()
        self.foreign_bytes = 0
        self.forged_frames = 0
        self.authentic_bytes = 0

    def feed(self, data: bytes) -> list[dict]:
        """Add bytes; return the authentic frames they complete."""
        self._buffer.extend(data)
        messages = []
        head = MAGIC_SIZE + _HEADER.size
        while True:
            start = self._buffer.find(self._magic)
            if start < 0:
                # Keep a tail that may be the start of a magic.
                keep = MAGIC_SIZE - 1
                if len(self._buffer) > keep:
                    self.foreign_bytes += len(self._buffer) - keep
                    del self._buffer[:len(self._buffer) - keep]
                return messages
            if start:
                self.foreign_bytes += start
                del self._buffer[:start]
            if len(self._buffer) < head:
                return messages
            (size,) = _HEADER.unpack_from(self._buffer, MAGIC_SIZE)
            if size > MAX_FRAME:
                # Not a frame of ours (ours are smaller): skip the magic.
                self.forged_frames += 1
                del self._buffer[:MAGIC_SIZE]
                continue
            if len(self._buffer) < head + size + MAC_SIZE:
                return messages
            header = bytes(self._buffer[MAGIC_SIZE:head])
            body = bytes(self._buffer[head:head + size])
            mac = bytes(self._buffer[head + size:head + size + MAC_SIZE])
            wanted = hmac.new(self._key, header + body,
                              hashlib.sha256).digest()
            if not hmac.compare_digest(mac, wanted):
                self.forged_frames += 1
                del self._buffer[:MAGIC_SIZE]
                continue
            del self._buffer[:head + size + MAC_SIZE]
            self.authentic_bytes += head + size + MAC_SIZE
            messages.append(_parse(body))

    @property
    def leftover(self) -> int:
        """Bytes of an unfinished frame still in the buffer."""
        return len(self._buffer) if self._buffer.startswith(
            self._magic) else 0


# --------------------------------------------------------------------------
# The frames a worker may send: checked at the boundary, so that a
# forged or garbled frame (the student's process can write to the channel)
# never reaches the stages after this one in an unexpected form.

_MAX_TEXT = 4096
_MAX_INT = 2 ** 31
_KINDS = ("tensor", "tuple", "list", "none", "number", "object")


def _text(value: Any) -> bool:
    return isinstance(value, str) and len(value) <= _MAX_TEXT


def _count(value: Any) -> bool:
    return type(value) is int and 0 <= value < _MAX_INT


def _number(value: Any) -> bool:
    return (type(value) is float or (type(value) is int
                                     and abs(value) < _MAX_INT))


def _error(value: Any) -> str | None:
    if not isinstance(value, dict):
        return "an error is not an object"
    if not (_text(value.get("type")) and _text(value.get("message"))):
        return "an error has no type or message"
    if not all(_count(value[key]) for key in ("line", "outer")
               if key in value):
        return "an error's line is not a line number"
    if not all(_text(value[key]) for key in ("code", "function")
               if key in value):
        return "an error's code is not text"
    return None


def _reached(value: Any) -> str | None:
    """Why a failed probe's ``reached`` (statement ids, as decimal
    text) is malformed, or None."""
    if isinstance(value, list) and len(value) <= MAX_REACHED and all(
            isinstance(v, str) and 0 < len(v) <= 12 and v.isdecimal()
            and v.isascii() for v in value):
        return None
    return "a failed probe's reached statements are malformed"


def _tensor(value: dict) -> str | None:
    shape = value.get("shape")
    if not (isinstance(shape, list) and len(shape) <= 8
            and all(_count(size) for size in shape)):
        return "a tensor's shape is not a list of sizes"
    if not _text(value.get("dtype")):
        return "a tensor has no dtype"
    if not isinstance(value.get("too_large", False), bool):
        return "a tensor's too_large is not a flag"
    data = value.get("data")
    if data is None:
        return None
    itemsize = {"float32": 4, "int64": 8}.get(value.get("encoding"))
    if itemsize is None or not isinstance(data, str):
        return "a tensor has an unknown encoding"
    elements = 1
    for size in shape:
        elements *= size
    decoded = len(data) // 4 * 3 - len(data[-2:]) + len(
        data[-2:].rstrip("="))
    if len(data) % 4 or decoded != elements * itemsize:
        return "a tensor's data does not fit its shape"
    return None


def _value(value: Any, depth: int = 0) -> str | None:
    if not isinstance(value, dict) or value.get("kind") not in _KINDS:
        return "a value has no known kind"
    kind = value["kind"]
    if kind == "tensor":
        return _tensor(value)
    if kind in ("tuple", "list"):
        items = value.get("items")
        if depth >= 3 or not isinstance(items, list) or len(items) > 8 \
                or not _count(value.get("length")):
            return "a sequence is malformed"
        return next(filter(None, (_value(v, depth + 1) for v in items)),
                    None)
    if kind == "number" and not (_number(value.get("value"))
                                 or type(value.get("value")) is bool):
        return "a number is not a number"
    if kind == "object" and not _text(value.get("type")):
        return "an object has no type name"
    return None


def _shape_map(value: Any) -> bool:
    return isinstance(value, dict) and all(
        _text(k) and isinstance(v, list) and all(_count(s) for s in v)
        for k, v in value.items())


# A child's keys; any other is a number the job's sandbox table names.
_CHILD_KEYS = ("type", "is_linear", "in_features", "out_features", "bias")


def _describe(value: Any) -> str | None:
    if not isinstance(value, dict) or not _text(value.get("type")) \
            or not isinstance(value.get("is_module"), bool):
        return "a description is malformed"
    for key, limit in (("children", 32), ("numbers", MAX_NUMBERS)):
        children = value.get(key, {})
        if not isinstance(children, dict) or len(children) > limit:
            return f"a description's {key} are malformed"
        if not all(_text(name) and _child(child)
                   for name, child in children.items()):
            return "the description of a child layer is malformed"
    if not all(_shape_map(value.get(key, {})) for key in ("parameters",
                                                          "buffers")):
        return "a description's parameters are malformed"
    if not _aliases(value.get("aliases", {})):
        return "a description's aliases are malformed"
    if not isinstance(value.get("numbers_complete", True), bool):
        return "a description's numbers are malformed"
    return None


def _child(child: Any) -> bool:
    """A child's (or a numbers entry's) description: type, Linear sizes, the
    numbers the job's sandbox table names."""
    return (isinstance(child, dict) and _text(child.get("type"))
            and isinstance(child.get("is_linear"), bool)
            and all(_count(child.get(k)) for k in ("in_features",
                                                   "out_features")
                    if k in child or child["is_linear"])
            and isinstance(child.get("bias", False), bool)
            and len(child) <= 16 and all(
                _text(k) and _number(v) for k, v in child.items()
                if k not in _CHILD_KEYS))


def _aliases(value: Any) -> bool:
    """Names of parameters that are another name's (tied): name -> the
    name it is an alias of."""
    return isinstance(value, dict) and len(value) <= 128 and all(
        _text(k) and _text(v) for k, v in value.items())


def _trace(value: Any) -> str | None:
    if not isinstance(value, dict) or not isinstance(value.get("intact"),
                                                     bool):
        return "a trace is malformed"
    records = value.get("records")
    if not isinstance(records, dict):
        return "trace records are not an object"
    for key, executions in records.items():
        if not (_text(key) and isinstance(executions, list) and all(
                isinstance(execution, list) and all(
                    shape is None or shape == UNREAD_RECORD
                    or shape == IRREGULAR_RECORD
                    or _shape(shape) or _held(shape)
                    or (place == len(execution) - 1 and _call(shape))
                    for place, shape in enumerate(execution))
                for execution in executions)):
            return "trace records are not shapes"
    made = value.get("made", [])
    if not (isinstance(made, list) and len(made) <= MAX_MADE_LINES
            and all(_count(line) for line in made)):
        return "a trace's lines that made tensors are malformed"
    left_out = value.get("left_out", {})
    if not (isinstance(left_out, dict) and all(
            _text(key) and _count(count) for key, count in left_out.items())):
        return "a trace's count of unrecorded executions is malformed"
    return None


def _call(value: Any) -> bool:
    """The marker that ends an execution recorded inside a declared call:
    the call's index and the shape of its input (None: no tensor)."""
    return (isinstance(value, dict) and set(value) == {"call", "input"}
            and _count(value["call"])
            and (value["input"] is None or _shape(value["input"])))


def _shape(value: Any) -> bool:
    return isinstance(value, list) and all(_count(size) for size in value)


def _held(value: Any) -> bool:
    """The shapes of the tensors a list, tuple or dict holds, with None
    last when it holds more than the tracer reads."""
    if not (isinstance(value, list) and value
            and len(value) <= MAX_HELD_SHAPES + 1):
        return False
    shapes = value[:-1] if value[-1] is None else value
    return all(isinstance(s, list) and _shape(s) for s in shapes)


def _coverage(value: Any) -> str | None:
    if not isinstance(value, dict):
        return "coverage is not an object"
    ran, foreign = value.get("ran", []), value.get("foreign", [])
    if not (isinstance(ran, list) and len(ran) <= 100_000 and all(
            isinstance(r, list) and len(r) == 4 and _text(r[0])
            and _count(r[1]) and _text(r[2]) and _text(r[3])
            for r in ran)):
        return "coverage of the submission's code is malformed"
    if not (isinstance(foreign, list) and len(foreign) <= 1000 and all(
            isinstance(f, list) and len(f) == 4 and _text(f[0])
            and _text(f[1]) and _count(f[2]) and _text(f[3])
            for f in foreign)):
        return "coverage of foreign code is malformed"
    return None


def check_frame(message: dict) -> str | None:
    """Why a frame from a worker is malformed, or None when it is fine.

    The frames are documented in :mod:`grader.worker.agent`; a frame of an
    unknown type is malformed too.
    """
    kind = message.get("type")
    if kind in ("done", "hello"):
        return None
    if kind == "event":
        line = message.get("line")
        return None if (_text(message.get("verb"))
                        and _text(message.get("kind"))
                        and _text(message.get("object", ""))
                        and (line is None or _count(line))) \
            else "an event is malformed"
    if kind == "patched":
        what = message.get("what")
        return None if isinstance(what, list) and len(what) <= 64 and all(
            _text(w) for w in what) else "a patched list is malformed"
    if kind == "start":
        return None if _text(message.get("id")) else "a start has no id"
    if "seconds" in message and not _number(message["seconds"]):
        return "seconds is not a number"
    if not isinstance(message.get("ok"), bool):
        return f"a {kind!r} frame has no outcome"
    if "coverage" in message:
        problem = _coverage(message["coverage"])
        if problem:
            return problem
    if kind == "import":
        return None if message["ok"] else _error(message.get("error"))
    if kind != "probe":
        return f"unknown frame type {str(kind)[:40]!r}"
    if not _text(message.get("id")):
        return "a probe result has no id"
    if not message["ok"]:
        return _error(message.get("error")) or (
            _reached(message["reached"]) if "reached" in message else None)
    for key, check in (("value", _value), ("describe", _describe),
                       ("trace", _trace)):
        if key in message:
            problem = check(message[key])
            if problem:
                return problem
    if not _aliases(message.get("aliases", {})):
        return "a probe's aliases are malformed"
    return None


# --------------------------------------------------------------------------
# Values


def value_encoder(torch: Any = None) -> Callable[..., dict]:
    """Return ``encode(value, budget=None) -> dict``: a value as plain data.

    Only exact ``torch.Tensor`` instances are sent as tensors (read with
    torch's own methods, bound now, under ``DisableTorchFunction``);
    tuples and lists (exact types) to two levels, eight items each;
    subclasses and other objects by their type's name, so they can never
    take part in a comparison and no code of theirs runs. ``budget`` is a
    one-item list of the base64 characters still allowed (shared by the
    values of one frame; a fresh :data:`VALUE_BUDGET` when None): a
    tensor whose data would not fit is sent as ``"too_large"``, with its
    shape and dtype and no data, decided from its shape before any data is
    read. The closures look up no global name.
    """
    import binascii

    if torch is None:
        import torch
    b_type, b_str, b_int, b_len = type, str, int, len
    b_tuple, b_list, b_bool, b_float = tuple, list, bool, float
    type_name = type.__dict__["__name__"].__get__
    type_mro = type.__dict__["__mro__"].__get__
    to_base64 = binascii.b2a_base64
    exact_tensor = torch.Tensor
    base = torch._C.TensorBase
    t_size, t_detach, t_to = base.size, base.detach, base.to
    t_contiguous, t_numpy = base.contiguous, base.numpy
    t_is_floating, t_is_complex = base.is_floating_point, base.is_complex
    t_dtype = base.__dict__["dtype"].__get__
    float32, int64, cpu = torch.float32, torch.int64, torch.device("cpu")
    no_torch_function = torch._C.DisableTorchFunction
    ndarray_tobytes = type(t_numpy(torch.zeros(1))).tobytes
    value_budget = VALUE_BUDGET

    def tensor_data(value, budget):
        with no_torch_function():
            tensor = t_detach(value)
            dtype = b_str(t_dtype(tensor)).replace("torch.", "")
            shape = [b_int(s) for s in t_size(tensor)]
            if t_is_complex(tensor):
                return {"kind": "tensor", "dtype": dtype, "shape": shape,
                        "data": None}
            floating = t_is_floating(tensor)
            elements = 1
            for size in shape:
                elements *= size
            characters = (elements * (4 if floating else 8) + 2) // 3 * 4
            if characters > budget[0]:
                return {"kind": "tensor", "dtype": dtype, "shape": shape,
                        "data": None, "too_large": True}
            budget[0] -= characters
            if floating:
                data = t_contiguous(t_to(tensor, cpu, float32))
                encoding = "float32"
            else:
                data = t_contiguous(t_to(tensor, cpu, int64))
                encoding = "int64"
            raw = ndarray_tobytes(t_numpy(data))
        return {"kind": "tensor", "dtype": dtype, "shape": shape,
                "encoding": encoding,
                "data": to_base64(raw, newline=False).decode("ascii")}

    def encode_within(value, depth, budget):
        kind = b_type(value)
        if kind is exact_tensor:
            return tensor_data(value, budget)
        if (kind is b_tuple or kind is b_list) and depth < 2:
            return {"kind": type_name(kind),
                    "items": [encode_within(v, depth + 1, budget)
                              for v in value[:8]],
                    "length": b_len(value)}
        if value is None:
            return {"kind": "none"}
        if kind is b_bool or kind is b_int or kind is b_float:
            return {"kind": "number", "value": value}
        bases = [type_name(b)[:80] for b in type_mro(kind)[1:-1]][:8]
        return {"kind": "object", "type": type_name(kind)[:80],
                "bases": bases}

    def encode(value, budget=None):
        if budget is None:
            budget = [value_budget]
        return encode_within(value, 0, budget)

    return encode


@cache
def _trusted_encoder() -> Callable[..., dict]:
    return value_encoder()


def encode_value(value: Any) -> dict:
    """:func:`value_encoder`'s encoding of ``value`` (the trusted side)."""
    return _trusted_encoder()(value)


@dataclass(frozen=True)
class Value:
    """A decoded value as the parent sees it."""

    kind: str
    tensor: Any = None          # torch.Tensor (float32 or int64) or None
    dtype: str | None = None
    shape: tuple[int, ...] | None = None
    items: tuple[Value, ...] = ()
    length: int = 0
    type_name: str | None = None
    number: float | None = None
    too_large: bool = False     # a tensor past the frame's budget: no data

    @property
    def holds_tensor(self) -> bool:
        """Whether a judge finds a tensor in the value: it is one, or one
        of its items is (the worker's encoder sends the items of a tuple
        or a list one level deep, and any other object as its type
        alone)."""
        if self.kind in ("tuple", "list"):
            return any(item.kind == "tensor" for item in self.items)
        return self.kind == "tensor"

    @property
    def elements(self) -> int:
        """How many values a tensor holds (0 for other kinds)."""
        return math.prod(self.shape) if self.shape is not None else 0

    def describe(self) -> str:
        """Words for a student: what was returned."""
        if self.kind == "tensor" and self.too_large:
            return (f"a {self.dtype} tensor of shape {list(self.shape)} "
                    f"({self.elements} values), too large to compare")
        if self.kind == "tensor":
            return f"a {self.dtype} tensor of shape {list(self.shape)}"
        if self.kind in ("tuple", "list"):
            inner = ", ".join(v.describe() for v in self.items)
            return f"a {self.kind} of {self.length} ({inner})"
        if self.kind == "none":
            return "None"
        if self.kind == "number":
            return f"the number {self.number!r}"
        name = " ".join(str(self.type_name).split())[:80]
        return f"an object of type {name!r}"


def decode_value(data: Any) -> Value:
    """Rebuild a :class:`Value` from plain data, validating everything."""
    import numpy as np
    import torch

    if not isinstance(data, dict):
        raise ChannelError("a value is not an object")
    kind = data.get("kind")
    if kind == "tensor":
        shape = tuple(int(s) for s in data.get("shape", ()))
        if any(s < 0 for s in shape) or len(shape) > 8:
            raise ChannelError("a tensor has an invalid shape")
        dtype = str(data.get("dtype"))
        if data.get("data") is None:
            return Value(kind="tensor", dtype=dtype, shape=shape,
                         too_large=data.get("too_large") is True)
        numpy_type = {"float32": np.float32, "int64": np.int64}.get(
            data.get("encoding"))
        if numpy_type is None:
            raise ChannelError("a tensor has an unknown encoding")
        raw = base64.b64decode(data["data"], validate=True)
        array = np.frombuffer(raw, dtype=numpy_type)
        if array.size != math.prod(shape):
            raise ChannelError("a tensor's data does not fit its shape")
        tensor = torch.from_numpy(array.copy()).reshape(shape)
        return Value(kind="tensor", tensor=tensor, dtype=dtype, shape=shape)
    if kind in ("tuple", "list"):
        items = tuple(decode_value(v) for v in data.get("items", [])[:8])
        return Value(kind=kind, items=items,
                     length=int(data.get("length", len(items))))
    if kind == "none":
        return Value(kind="none")
    if kind == "number":
        number = data.get("value")
        if not isinstance(number, (int, float)):
            raise ChannelError("a number is not a number")
        return Value(kind="number", number=number)
    if kind == "object":
        return Value(kind="object", type_name=str(data.get("type"))[:80])
    raise ChannelError(f"unknown value kind {kind!r}")


def encode_tensor(tensor: Any) -> dict:
    """Encode a trusted tensor (an input or a weight) for a probe plan."""
    return encode_value(tensor.detach().to("cpu"))


def decode_tensor(data: dict) -> Any:
    """Decode a tensor of a probe plan (worker side)."""
    value = decode_value(data)
    if value.tensor is None:
        raise ChannelError("a plan tensor has no data")
    return value.tensor


#: The factories whose closures run in a worker once a submission runs
#: (the kit's integrity test walks their code for global look-ups).
FACTORIES = (result_writer, value_encoder)

"""The plain-data format that crosses the sandbox boundary.

The worker (untrusted: it runs student code) sends the parent (trusted)
frames. The job plan (parent to worker) is a 4-byte big-endian length, then
that many bytes of UTF-8 JSON. A result frame (worker to parent) is the
job's 16-byte magic, a 4-byte length, that many bytes of ASCII JSON, and a
32-byte HMAC-SHA256 of length and body under the job's key
(:class:`AuthenticatedReader`), which only the sandbox agent holds: bytes
the submission writes to the channel are recognised as foreign and skipped.
Tensors travel as their dtype, shape and raw float32 (or int64) bytes in
base64; the parent rebuilds them with numpy. Nothing is ever unpickled, so a
frame can at worst carry wrong numbers, never code.

Decoding is bounded by its cost: a frame is refused before parsing when it
is larger than :data:`MAX_FRAME` or holds more than
:data:`MAX_CONTAINERS` JSON arrays and objects, so a worker cannot make
the trusted process build millions of objects.

Both sides import this module; it must stay free of grader state.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
import struct
from dataclasses import dataclass
from typing import Any

from grader.errors import GraderError

MAX_FRAME = 16 * 1024 * 1024
MAX_CONTAINERS = 200_000
MAGIC_SIZE = 16
MAC_SIZE = 32
_HEADER = struct.Struct(">I")


class ChannelError(GraderError):
    """A frame that is malformed or too large (a corrupted channel)."""


def frame(message: dict) -> bytes:
    """Encode one message as a length-prefixed JSON frame."""
    data = json.dumps(message, separators=(",", ":")).encode("utf-8")
    return _HEADER.pack(len(data)) + data


class FrameReader:
    """Incrementally split a byte stream into decoded frames."""

    def __init__(self) -> None:
        """Start with an empty buffer."""
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[dict]:
        """Add bytes; return the complete frames they finish."""
        self._buffer.extend(data)
        messages = []
        while len(self._buffer) >= _HEADER.size:
            (size,) = _HEADER.unpack_from(self._buffer)
            if size > MAX_FRAME:
                raise ChannelError(f"a frame of {size} bytes is over the "
                                   f"{MAX_FRAME} byte limit")
            if len(self._buffer) < _HEADER.size + size:
                break
            body = bytes(self._buffer[_HEADER.size:_HEADER.size + size])
            del self._buffer[:_HEADER.size + size]
            try:
                message = json.loads(body.decode("utf-8"))
            except (UnicodeDecodeError, ValueError, RecursionError) as exc:
                raise ChannelError(f"a frame is not JSON: "
                                   f"{type(exc).__name__}") from exc
            if not isinstance(message, dict):
                raise ChannelError("a frame is not a JSON object")
            messages.append(message)
        return messages

    @property
    def leftover(self) -> int:
        """Bytes of an unfinished frame still in the buffer."""
        return len(self._buffer)


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
# Values


def encode_value(value: Any, depth: int = 0) -> dict:
    """Describe a value returned by student code as plain data.

    Only exact ``torch.Tensor`` instances are sent as tensors; subclasses
    and other objects are described by their type name, so they can never
    take part in a comparison.
    """
    import torch

    if type(value) is torch.Tensor:
        tensor = value.detach()
        dtype = str(tensor.dtype).replace("torch.", "")
        shape = list(tensor.shape)
        if tensor.is_floating_point():
            data = tensor.to(device="cpu", dtype=torch.float32)
            kind = "float32"
        elif tensor.dtype == torch.bool or not tensor.is_complex():
            data = tensor.to(device="cpu", dtype=torch.int64)
            kind = "int64"
        else:
            return {"kind": "tensor", "dtype": dtype, "shape": shape,
                    "data": None}
        raw = data.contiguous().numpy().tobytes()
        return {"kind": "tensor", "dtype": dtype, "shape": shape,
                "encoding": kind,
                "data": base64.b64encode(raw).decode("ascii")}
    if isinstance(value, (tuple, list)) and depth < 2:
        return {"kind": type(value).__name__,
                "items": [encode_value(v, depth + 1) for v in value[:8]],
                "length": len(value)}
    if value is None:
        return {"kind": "none"}
    if type(value) in (bool, int, float):
        return {"kind": "number", "value": value}
    cls = type(value)
    bases = [b.__name__ for b in cls.__mro__[1:-1]]
    return {"kind": "object", "type": cls.__name__,
            "module": getattr(cls, "__module__", "?"), "bases": bases}


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

    def describe(self) -> str:
        """Words for a student: what was returned."""
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
            return Value(kind="tensor", dtype=dtype, shape=shape)
        numpy_type = {"float32": np.float32, "int64": np.int64}.get(
            data.get("encoding"))
        if numpy_type is None:
            raise ChannelError("a tensor has an unknown encoding")
        raw = base64.b64decode(data["data"], validate=True)
        array = np.frombuffer(raw, dtype=numpy_type)
        if array.size != int(np.prod(shape, dtype=np.int64)):
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

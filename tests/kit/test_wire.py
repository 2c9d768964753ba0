"""The wire: what the worker writes, the trusted side reads back exactly.

Both sides use ``grader/wire.py``: the worker frames its results with
:func:`grader.wire.result_writer` and encodes values with
:func:`grader.wire.value_encoder` (bound before a submission runs); the
trusted side reads them with :class:`grader.wire.AuthenticatedReader`,
checks them with :func:`grader.wire.check_frame` and rebuilds values with
:func:`grader.wire.decode_value`. These tests send through the worker's
writer and encoder and read through the trusted reader and decoder.
"""
from __future__ import annotations

import math
import os
import secrets

import pytest
import torch

from grader import wire


class _Sub(torch.Tensor):
    """A tensor subclass: sent as an object, never as numbers."""


def _round_trip(message: dict) -> list[dict]:
    """``message`` through the worker's writer and the trusted reader."""
    key, magic = secrets.token_bytes(32), secrets.token_bytes(16)
    written = bytearray()

    def write(fd: int, data: memoryview) -> int:
        written.extend(data[:7])  # a short write each time
        return min(len(data), 7)

    failures: list[int] = []
    send = wire.result_writer(key, magic, 99, failures.append, write)
    send(message)
    assert failures == []
    reader = wire.AuthenticatedReader(key, magic)
    frames = reader.feed(b"noise" + bytes(written))
    assert reader.leftover == 0 and reader.forged_frames == 0
    return frames


VALUES = {
    "float": torch.arange(6, dtype=torch.float64).reshape(2, 3) / 7,
    "int": torch.tensor([[1, -2], [3, 4]], dtype=torch.int32),
    "bool": torch.tensor([True, False, True]),
    "empty": torch.zeros(0, 4),
    "scalar": torch.tensor(2.5),
    "grad": torch.ones(2, requires_grad=True) * 3,
}


@pytest.mark.parametrize("name", sorted(VALUES))
def test_a_tensor_crosses_unchanged(name: str) -> None:
    """dtype, shape and every number arrive (floats as float32)."""
    tensor = VALUES[name]
    encode = wire.value_encoder(torch)
    [frame] = _round_trip({"type": "probe", "id": "p", "ok": True,
                           "value": encode(tensor)})
    assert wire.check_frame(frame) is None
    value = wire.decode_value(frame["value"])
    assert value.kind == "tensor"
    assert value.dtype == str(tensor.dtype).replace("torch.", "")
    assert value.shape == tuple(tensor.shape)
    expected = (tensor.detach().float() if tensor.is_floating_point()
                else tensor.long())
    assert torch.equal(value.tensor, expected)


def test_containers_numbers_and_objects_cross_as_described() -> None:
    encode = wire.value_encoder(torch)
    sent = (torch.ones(2), [1, 2.5, None, True], _Sub(torch.ones(1)),
            object(), float("nan"), tuple(range(12)))
    [frame] = _round_trip({"type": "probe", "id": "p", "ok": True,
                           "value": encode(sent)})
    assert wire.check_frame(frame) is None
    value = wire.decode_value(frame["value"])
    assert (value.kind, value.length) == ("tuple", 6)
    tensor, listed, sub, thing, nan, long = value.items
    assert torch.equal(tensor.tensor, torch.ones(2))
    assert [v.describe() for v in listed.items] == [
        "the number 1", "the number 2.5", "None", "the number True"]
    assert (sub.kind, sub.type_name) == ("object", "_Sub")
    assert (thing.kind, thing.type_name) == ("object", "object")
    assert nan.kind == "number" and math.isnan(nan.number)
    assert (long.length, len(long.items)) == (12, 8)


def test_the_trusted_side_encodes_with_the_same_encoder() -> None:
    """A plan's tensor (trusted side) and a result (worker side) are the
    same plain data."""
    tensor = torch.randn(3, 4, dtype=torch.float64)
    assert wire.encode_tensor(tensor) == wire.value_encoder(torch)(tensor)
    assert torch.equal(wire.decode_tensor(wire.encode_tensor(tensor)),
                       tensor.float())


def test_a_job_crosses_its_pipe() -> None:
    plan = {"source": "x = 1\n", "probes": [{"id": "é", "args": [1.5]}]}
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, wire.job_frame(plan))
        os.close(write_end)
        write_end = -1
        assert wire.read_job(read_end) == plan
    finally:
        os.close(read_end)
        if write_end >= 0:
            os.close(write_end)


def test_a_failing_channel_calls_its_failure() -> None:
    def broken(fd: int, data: memoryview) -> int:
        raise OSError("the pipe is gone")

    failures: list[int] = []
    wire.result_writer(b"k" * 32, b"m" * 16, 3, failures.append,
                       broken)({"type": "done"})
    assert failures == [75]

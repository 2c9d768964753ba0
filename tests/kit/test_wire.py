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

import json
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


def test_a_tensor_past_the_budget_crosses_as_its_shape_alone() -> None:
    """150M values (an expanded view: no data to read) cross as a small
    "too large" record with their shape and dtype; the trusted side sees
    a tensor with no numbers and says so, rather than skip the frame as
    a forgery (issue 24)."""
    huge = torch.zeros(1).expand(150_000_000)
    encoded = wire.value_encoder(torch)((torch.ones(2), huge))
    [frame] = _round_trip({"type": "probe", "id": "p", "ok": True,
                           "value": encoded})
    assert wire.check_frame(frame) is None
    value = wire.decode_value(frame["value"])
    small, big = value.items
    assert torch.equal(small.tensor, torch.ones(2)) and not small.too_large
    assert big.too_large and big.tensor is None
    assert (big.shape, big.dtype) == ((150_000_000,), "float32")
    assert big.describe() == ("a float32 tensor of shape [150000000] "
                              "(150000000 values), too large to compare")


def test_the_values_of_one_frame_share_one_budget() -> None:
    """Eight tensors that each fit the budget alone: the first is sent,
    the rest cross as their shapes, and the frame stays under MAX_FRAME;
    a fresh call starts a fresh budget, a shared one carries on."""
    elements = wire.VALUE_BUDGET * 3 // 4 // 4 * 9 // 10
    part = torch.ones(elements)
    encode = wire.value_encoder(torch)
    encoded = encode([part] * 8)
    assert [item["data"] is None for item in encoded["items"]] == \
        [False] + [True] * 7
    assert [item.get("too_large") for item in encoded["items"][1:]] == \
        [True] * 7
    frame = json.dumps({"type": "probe", "value": encoded})
    assert len(frame) < wire.MAX_FRAME // 2
    assert encode(part)["data"] is not None
    budget = [wire.VALUE_BUDGET]
    assert encode(part, budget)["data"] is not None
    assert encode(part, budget).get("too_large") is True


def test_a_forged_too_large_flag_is_malformed() -> None:
    frame = {"type": "probe", "id": "p", "ok": True,
             "value": {"kind": "tensor", "dtype": "float32", "shape": [2],
                       "data": None, "too_large": "yes"}}
    assert wire.check_frame(frame) == "a tensor's too_large is not a flag"


def test_a_failed_call_may_name_the_statements_it_reached() -> None:
    """A probe whose call raised may send the ids of the statements that
    completed first (words of the report only): decimal ids, at most
    MAX_REACHED; anything else is malformed, and the error is still
    checked."""
    error = {"type": "ValueError", "message": "no"}
    failed = {"type": "probe", "id": "p", "ok": False, "error": error}
    assert wire.check_frame({**failed, "reached": ["3", "12"]}) is None
    malformed = "a failed probe's reached statements are malformed"
    for reached in (["x"], [3], "3", ["-1"], [""], ["1" * 13],
                    ["1"] * (wire.MAX_REACHED + 1), ["\u0663"]):
        assert wire.check_frame({**failed, "reached": reached}) == \
            malformed, reached
    assert wire.check_frame({**failed, "error": {}, "reached": ["3"]}) == \
        "an error has no type or message"


def test_an_import_error_may_name_its_top_level_line() -> None:
    """An import frame's error may name, besides its own line, the line of
    the top-level statement that was running (``outer``: the engine
    leaves that statement out); a line that is no line number is
    malformed."""
    error = {"type": "OSError", "message": "no", "line": 15, "outer": 19}
    frame = {"type": "import", "ok": False, "error": error}
    assert wire.check_frame(frame) is None
    for outer in ("19", -1, 0.5, True, None, 10 ** 30):
        assert wire.check_frame({**frame, "error": {**error, "outer": outer}}
                                ) == "an error's line is not a line number", \
            outer


def test_aliases_of_tied_parameters_are_names() -> None:
    """A probe's aliases (tied parameters) and a description's are maps
    of names to names; anything else is malformed."""
    good = {"type": "probe", "id": "p", "ok": True,
            "aliases": {"token_embeddings.weight": "out_proj.weight"},
            "describe": {"type": "M", "is_module": True,
                         "aliases": {"a.weight": "b.weight"}}}
    assert wire.check_frame(good) is None
    for aliases in ({"a": 1}, ["a", "b"], {str(i): "b" for i in range(129)}):
        assert wire.check_frame({**good, "aliases": aliases}) == \
            "a probe's aliases are malformed"
        assert wire.check_frame({**good, "describe": {
            **good["describe"], "aliases": aliases}}) == \
            "a description's aliases are malformed"


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

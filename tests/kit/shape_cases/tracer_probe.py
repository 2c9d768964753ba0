"""A torch-free probe of the sandbox agent's line tracer.

Run as ``python tracer_probe.py /path/to/kit`` under any Python 3.11+; it
prints one JSON object: the records of ``Probe.forward`` and whether a
forward that switches tracing off leaves the trace not intact.
``tests/kit/test_shapes.py`` runs it under every interpreter it finds and
expects the same output from each, so the behaviours that differ between
versions (a multi-line statement's extra line events, PEP 709 inlined
comprehensions, a ``return`` inside ``with``) are pinned down. (In the
sandbox, switching tracing off is refused outright; see
``tests/kit/test_integrity.py``.)
"""
import json
import sys


class FakeTensor:
    """Just enough of a tensor: a shape, view, in-place ops, indexing."""

    def __init__(self, *shape):
        self.shape = tuple(shape)

    def view(self, *shape):
        return FakeTensor(*shape)

    def __add__(self, other):
        return FakeTensor(*self.shape)

    def __iadd__(self, other):
        return self

    def __setitem__(self, key, value):
        pass

    def fill_(self, value):
        return self


class Ctx:
    """A context manager whose exit runs after a return inside it."""

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        return False


class Probe:
    def boom(self):
        raise ValueError("boom")

    def forward(self, x, n):
        y = (x
             + x
             + x)
        ys = [y for _ in range(n)]
        total = x.view(1)
        for h in range(n):
            total = total.view(h + 1)
        total += x
        total.fill_(0)
        total[0] = 1
        a = x.view(2); b = x.view(3)
        if n > 100: c = x.view(4)
        try:
            d = self.boom()
        except ValueError:
            d = x.view(5)
        e = [x.view(i) for i in range(1, 3)][1]
        if n > 100:
            never = x.view(6)
        with Ctx():
            return total, x.view(7), n


class TamperNone:
    def forward(self, x):
        y = x.view(1)
        sys.settrace(None)
        z = x.view(2)
        return z


class TamperFrame:
    def forward(self, x):
        y = x.view(1)
        sys._getframe().f_trace = None
        z = x.view(2)
        return z


def main(kit: str) -> None:
    sys.path.insert(0, kit)
    from pathlib import Path

    sys.path.insert(0, str(Path(kit) / "tests" / "kit"))
    from tracing import Trace

    from grader.locate.source import load_python
    from grader.shapes import collect_statements

    source = load_python(Path(__file__))
    filename = Probe.forward.__code__.co_filename

    def is_tensor(value):
        return isinstance(value, FakeTensor)

    def trace(cls, *args):
        statements = collect_statements(source, cls.__name__, "forward")
        plan = [statement.to_plain() for statement in statements]
        with Trace(filename, "forward", plan, is_tensor) as tracer:
            cls().forward(*args)
        texts = {str(s.id): s.text for s in statements}
        records = {texts[key]: value
                   for key, value in tracer.records.items()}
        return records, tracer.intact

    records, intact = trace(Probe, FakeTensor(2, 3), 3)
    result = {"records": records, "intact": intact,
              "not_traceable": [
                  s.text for s in collect_statements(source, "Probe",
                                                     "forward")
                  if not s.traceable]}
    for cls in (TamperNone, TamperFrame):
        result[cls.__name__] = trace(cls, FakeTensor(2, 3))[1]
    result["trace_after"] = sys.gettrace() is None
    print(json.dumps(result, sort_keys=True))


if __name__ == "__main__":
    main(sys.argv[1])

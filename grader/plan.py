"""Probe plans: what the sandbox runs, and the trusted case behind it.

A probe is plain data (see :mod:`grader.worker.agent`): build ``target`` with
``init`` (or, marked ``again``, take the object the task's previous probe
built), load ``state`` into its parameters, set train or eval mode
through the object's own ``train``, seed torch, call it on ``call`` and
send back the value (and, when asked, a description of the object or a
shape trace). :class:`ProbeInfo` keeps, in
the trusted process, what the checks need to judge the answer.
"""
from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from grader.wire import encode_tensor

#: The prefix of a twin's id (:meth:`Plan.assign_modes`): no check selects
#: it, and :func:`grader.run.observe.observe` folds the twin into the probe
#: it repeats.
TWIN = "~twin:"
#: The value-preserving operations an activation is made by (wire key
#: ``via``, :meth:`Plan.assign_states`): each leaves its own ``grad_fn``
#: (CloneBackward0, MulBackward0, SubBackward0, ToCopyBackward0,
#: NegBackward0), none a view (a view of a leaf refuses in-place edits).
ACTIVATION_OPS = ("clone", "mul", "sub", "cast", "neg")
#: ... of a twin in its probe's own mode, on a fresh input (TwinInput).
TWIN_SAME = "~twin=:"
#: ... of a twin that gives a family's one probe of a mode the other finer
#: state of that mode (:meth:`Plan.assign_states`; then ``2:`` with
#: autograd off, ``3:`` with it on, and the original's id), on the third
#: or fourth fresh input when the plug-in gives them (TwinInput), else on
#: the probe's own.
TWIN_STATE = "~twin~:"

#: ``twin_input(task, info, seed) -> TwinInput | None``: another input for
#: the twin of probe ``info`` and the trusted answers (a plug-in's
#: ``twin_input``, :meth:`Plan.assign_modes`).
TwinMaker = Callable[[str, "ProbeInfo", int], "TwinInput | None"]


def family(probe_id: str) -> str:
    """A probe's family: its id up to the first ':'."""
    return probe_id.split(":", 1)[0]


def derive_seed(seed: int, *labels: object) -> int:
    """A seed for one random stream, derived one-way from the grading seed.

    Every random stream a submission can observe (hidden inputs and
    weights, dropout masks) is seeded with ``derive_seed(seed, "what",
    ...)``: a SHA-256 of the secret seed and the labels, so that nothing a
    submission sees or prints (``torch.initial_seed()``, the inputs) gives
    the secret seed away. Returns a 63-bit non-negative integer.
    """
    text = "\x1f".join(["grader-seed-v1", str(int(seed))]
                       + [str(label) for label in labels])
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") >> 1


@dataclass(frozen=True)
class Case:
    """Inputs and weights of one graded case (trusted, float32)."""

    name: str
    public: bool
    sizes: dict[str, int]
    x: torch.Tensor
    weights: dict[str, torch.Tensor]
    # A case that is not public is hidden, except in a public-only grade
    # (see :meth:`Plan.public_only`).
    hidden: bool = True
    # Plain words for reports: the name of the case this one was made
    # from, and how it was changed ("with zero query and key weights"),
    # so that no internal id such as 'public-zero-qk' reaches a student.
    shown: str = ""
    variant: str = ""
    # The state a probe ran this case in, when it is not the default
    # (autograd off under torch.no_grad()): "with autograd on (as in
    # training)", "under torch.inference_mode()" ... (set per probe by
    # grader.run.observe, :func:`state_words`), so that a failure says it.
    state: str = ""

    def brief(self) -> str:
        """The case in a few words: its name, quoted, and its variant."""
        name = f"'{self.shown or self.name}'"
        return f"{name} {self.variant}" if self.variant else name

    def describe(self) -> str:
        """Words for a report: which case, with which sizes."""
        sizes = ", ".join(f"{k}={v}" for k, v in self.sizes.items())
        state = f" {self.state}" if self.state else ""
        if self.public:
            return f"the public test values {self.brief()} ({sizes}){state}"
        if self.hidden:
            return f"hidden case {self.brief()} ({sizes}){state}"
        return f"the grader's own case {self.brief()} ({sizes}){state}"

    def float64(self) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The input and the weights in float64, for references."""
        return self.x.double(), {k: v.double()
                                 for k, v in self.weights.items()}


@dataclass(frozen=True)
class TwinInput:
    """Fresh inputs for a probe's twins, with the trusted answers
    (:meth:`Plan.assign_modes`, made by a plug-in's ``twin_input``).

    ``inputs`` are two or four inputs of the shape and dtype of the
    probe's first call argument, with fresh values (seeded): the first
    for a twin in the other autograd mode, the second for a twin in the
    probe's own mode, the third and fourth for state twins with autograd
    off and on (``TWIN_STATE``, :meth:`Plan.assign_states`; without
    them, a state twin repeats its probe's input). The probe's own
    input may have been seen before, by an earlier probe on the same
    case, in either mode; these have not, so
    an answer remembered by input (or by sample) fits none, and each
    state meets an input it never saw. ``expected`` holds the trusted
    answer to each, and ``reference`` the trusted answer to the probe's
    own input: a tensor, or a tuple whose items are tensors or None (an
    item not judged). The probe fails when a call in one state matches
    its trusted answer (at ``rtol``, ``atol``) and a call in another
    does not: the code is right in one state only. Code wrong alike in
    every state is the checks' to judge, as before.

    ``judge`` (a random answer no reference gives, such as dropout in
    training): instead of ``expected`` and ``reference``,
    ``judge(value, index)`` says in words what property the answer to
    input ``index`` lacks (-1: the probe's own input), or None when it
    has it; a call in one state with the property and one in another
    without fail the probe alike; ``asked`` says what such an answer
    does.
    """

    inputs: tuple[torch.Tensor, ...]
    expected: tuple[Any, ...]
    reference: Any
    rtol: float
    atol: float
    judge: Callable[[Any, int], "str | None"] | None = None
    # What an answer that passes ``judge`` does, in words for a report
    # ("it {asked} with autograd on but not ...").
    asked: str = "matches the reference"


@dataclass(frozen=True)
class ProbeInfo:
    """What a probe asked for, kept by the trusted process."""

    id: str
    task: str
    target: str
    case: Case | None = None
    kwargs: dict[str, Any] = field(default_factory=dict)
    train: bool = False
    sizes: dict[str, int] | None = None
    trace: str | None = None
    # What the plug-in wants to remember about the probe (a flag, a rate);
    # never sent to the sandbox, never read by the generic grader.
    params: dict[str, Any] = field(default_factory=dict)
    # The autograd mode the probe runs in (Plan.assign_modes; None before),
    # and, for a twin, the id of the probe it repeats in the other mode.
    grad: bool | None = None
    twin_of: str | None = None
    # The finer state (Plan.assign_states): with autograd off, under
    # torch.inference_mode() rather than torch.no_grad(); with it on, the
    # floating arguments plain tensors (``raw``) rather than activations
    # made by ``via``; an ``again`` probe's parameters with ``.grad`` set.
    inference: bool = False
    raw: bool = False
    via: str | None = None
    grads: bool = False
    # The probe's branch within its family (declared by the plug-in: a
    # dropout rate, a flag), which sees both modes too; and, for a twin
    # on fresh inputs, those inputs and the trusted answers, and which
    # of the inputs it runs on.
    branch: str = ""
    other: TwinInput | None = None
    other_index: int = 0
    # The probe calls again the object the previous probe built.
    again: bool = False
    # Off the plain state in every way (Plan.assign_states, _assign_own):
    # the mode set through the object's own ``eval()`` / ``train()``
    # (wire key ``own``), and the init of a second object of the target
    # built right after the probe's, alive until its call is done (wire
    # key ``decoy``; None: none).
    own: bool = False
    decoy: dict | None = None
    # The object is handled as a user's code handles a module
    # (Plan.assign_states, :func:`handle`): a copy.deepcopy of it, moved
    # by .to("cpu"), is called, after a first call on other weights,
    # with the probe's weights loaded through its own load_state_dict.
    handled: bool = False


def state_words(info: ProbeInfo, default: str = "under torch.no_grad()"
                ) -> str:
    """The state a probe ran in, in words for a student: its autograd
    mode, its input, its parameters' ``.grad`` (:meth:`Plan.assign_modes`,
    :meth:`Plan.assign_states`); ``default`` for autograd off under
    ``torch.no_grad()`` with no ``.grad`` set."""
    if info.grad:
        words = ("with autograd on and an input that requires no grad "
                 "(as for a first layer in training)" if info.raw
                 else "with autograd on (as in training)")
    elif info.inference or info.raw:
        words = ("under torch.inference_mode()" if info.inference
                 else "under torch.no_grad()")
        if info.raw:
            words += " with an input that requires grad"
    else:
        words = default if not info.grads else "under torch.no_grad()"
    if info.grads:
        words += (" and with the parameters' .grad set (as after "
                  "loss.backward())")
    if info.handled:
        words += HANDLED_WORDS
    return words + own_words(info)


def own_words(info: ProbeInfo) -> str:
    """The words :func:`state_words` ends with for a probe whose mode
    was set by the object's own ``train()`` or ``eval()`` and that had a
    second object built beside it (:meth:`Plan.assign_states`); "" for
    any other probe."""
    if not info.own:
        return ""
    words = (", in train mode set by model.train()" if info.train
             else ", in eval mode set by model.eval()")
    if info.decoy is not None:
        words += (f" and with another {init_words(info.target, info.decoy)}"
                  f" built after it")
    return words


def init_words(target: str, init: Mapping[str, Any]) -> str:
    """A constructor call in words: ``Target(3, 4, flag=True)`` (a
    tensor argument as ``<tensor>``)."""
    def shown(value: Any) -> str:
        return "<tensor>" if isinstance(value, (torch.Tensor, Mapping)) \
            else repr(value)
    parts = [shown(value) for value in init.get("args") or []]
    parts += [f"{key}={shown(value)}"
              for key, value in (init.get("kwargs") or {}).items()]
    return f"{target}({', '.join(parts)})"


#: What a handled probe's object went through (:func:`handle`), in words
#: for a report (:func:`state_words`).
HANDLED_WORDS = (", on a copy of the module (copy.deepcopy, then "
                 ".to(\"cpu\")) called once with other weights and then "
                 "given its weights by its own load_state_dict")


def handle(task: str, wires: list[dict], info: dict, seed: int) -> None:
    """Mark the probes of ``task`` off the plain state in every way (``grads``
    set by :meth:`Plan.assign_states`) that build an object and do not train
    it as *handled* (wire key ``handled``: the seed of the warm-up weights;
    ``ProbeInfo.handled``): the worker then treats the object as a user's
    code treats a module before using it (docs/threat-model.md, "Right only
    in the state the grader probes"): ``copy.deepcopy`` (the copy is used
    from then on), ``.to("cpu")`` (``Module._apply``, as every move or cast
    runs it), the probe's weights each moved by seeded noise loaded and one
    eval-mode call on the probe's input (its answer discarded), then the
    probe's own weights loaded through the object's own ``load_state_dict``
    (strict, over its own ``state_dict()``), each step through the object's
    own methods on the submission's thread. No probe is added: the steps go
    with the state off the plain one that every family already meets in each
    mode, on one probe of each family (a twin in its original's): the first
    in the autograd mode a bit of the seed picks for the family (the other
    when it has none there), so every family meets the handling at every
    seed and in each mode at half of them (each handling costs about a
    probe's call; docs/threat-model.md says what that leaves). A trace is
    never handled, and the shapes a handled probe sends are its warm-up
    call's (the fresh object's first call, on the probe's input: what a
    later call finds in the object may hold tensors). ``info`` maps ``(task,
    id)`` to the probe's :class:`ProbeInfo`, updated here."""
    # family -> autograd mode -> the family's candidates in that mode
    found: dict[str, dict[bool, list[dict]]] = {}
    for wire in wires:
        # A trace verifies the shape comments of a fresh object's first
        # call (docs/threat-model.md, principle 6): never handled.
        if not wire.get("grads") or wire.get("again") or wire.get("fit") \
                or wire.get("lead") or wire.get("trace") \
                or wire.get("init") is None:
            continue
        name = family(info[(task, wire["id"])].twin_of or wire["id"])
        found.setdefault(name, {}).setdefault(
            bool(wire.get("grad")), []).append(wire)
    for name, modes in found.items():
        mode = bool(derive_seed(seed, "handled-mode", task, name) & 1)
        wire = (modes.get(mode) or modes[not mode])[0]
        wire["handled"] = derive_seed(seed, "handled", task, wire["id"])
        key = (task, wire["id"])
        info[key] = replace(info[key], handled=True)


def state_key(info: ProbeInfo) -> tuple[bool, bool, bool, str, bool]:
    """The state a probe ran in, as a key: two probes whose keys differ
    ran in different states (:meth:`Plan.assign_modes`,
    :meth:`Plan.assign_states`)."""
    return (bool(info.grad), bool(info.inference), bool(info.raw),
            str(info.via or "") if info.grad and not info.raw else "",
            bool(info.grads))


def probe(probe_id: str, target: str, *, case: Case | None = None,
          layers: tuple[str, ...] = (), init: dict | None = None,
          kwargs: dict | None = None, x: torch.Tensor | None = None,
          describe: bool = False, trace: str | None = None,
          train: bool = False, seed: int = 0,
          sizes: dict[str, int] | None = None,
          params: Mapping[str, Any] | None = None, again: bool = False,
          branch: str = "") -> tuple[dict, ProbeInfo]:
    """A probe's wire form and its trusted description. ``params`` is the
    plug-in's own record of the probe (kept by the trusted process only,
    as :attr:`ProbeInfo.params`). ``again``: build nothing, but call again
    the object the task's previous probe built (same ``target`` and
    ``init``, :meth:`Plan.add` checks), its ``state`` loaded and its mode
    set anew: code right only on an object's first call fails there.
    ``branch``: the probe's branch within its family (a dropout rate, a
    flag the code may branch on): :meth:`Plan.assign_modes` judges each
    branch in both autograd modes."""
    wire: dict[str, Any] = {"id": probe_id, "target": target, "init": init,
                            "train": train, "seed": seed,
                            "describe": describe}
    if again:
        wire["again"] = True
    if case is not None:
        wire["state"] = {name: encode_tensor(case.weights[name])
                         for layer in layers for name in
                         (f"{layer}.weight", f"{layer}.bias")}
        x = case.x
    if x is not None:
        wire["call"] = {"args": [encode_tensor(x)],
                        "kwargs": dict(kwargs or {})}
    if trace:
        wire["trace"] = {"method": trace, "statements": []}
    info = ProbeInfo(id=probe_id, task="", target=target, case=case,
                     kwargs=dict(kwargs or {}), train=train, sizes=sizes,
                     trace=trace, params=dict(params or {}),
                     again=again, branch=str(branch))
    return wire, info


def _same(first: Any, second: Any) -> bool:
    """Whether two inits (plain data, tensors included) are equal."""
    if isinstance(first, torch.Tensor) or isinstance(second, torch.Tensor):
        return (isinstance(first, torch.Tensor)
                and isinstance(second, torch.Tensor)
                and first.dtype == second.dtype
                and first.shape == second.shape
                and bool(torch.equal(first, second)))
    if isinstance(first, Mapping) and isinstance(second, Mapping):
        return first.keys() == second.keys() and all(
            _same(first[k], second[k]) for k in first)
    if isinstance(first, (list, tuple)) and isinstance(second, (list, tuple)):
        return len(first) == len(second) and all(
            _same(a, b) for a, b in zip(first, second))
    return type(first) is type(second) and first == second


_MISSING = object()


def _at(init: Mapping[str, Any], place: tuple[str, Any]) -> Any:
    """The value of ``init`` at ``place`` (an argument's key, and a
    position or keyword in it, or None for the whole value)."""
    holder = init.get(place[0])
    if isinstance(holder, Mapping):
        return holder.get(place[1], _MISSING)
    if isinstance(holder, (list, tuple)):
        return holder[place[1]] if place[1] < len(holder) else _MISSING
    return holder if place[1] is None else _MISSING


def _equal_at(first: Mapping[str, Any], second: Mapping[str, Any],
              place: tuple[str, Any]) -> bool:
    """Whether two inits hold the same value at ``place``."""
    one, other = _at(first, place), _at(second, place)
    return one is other or (one is not _MISSING and other is not _MISSING
                            and _same(one, other))


def _ranked_places(inits: list[dict]) -> list[tuple[str, Any]]:
    """The places of ``inits`` (positions of ``args``, keys of
    ``kwargs``), ranked by how many distinct values the inits give them,
    fewest first (a flag, a rate before a size), then by name."""
    places: set[tuple[str, Any]] = set()
    for init in inits:
        for key, holder in init.items():
            if isinstance(holder, Mapping):
                places.update((str(key), name) for name in holder)
            elif isinstance(holder, (list, tuple)):
                places.update((str(key), index)
                              for index in range(len(holder)))
            else:
                places.add((str(key), None))

    def values(place: tuple[str, Any]) -> int:
        seen: list[dict] = []
        for init in inits:
            if not any(_equal_at(init, other, place) for other in seen):
                seen.append(init)
        return len(seen)

    return sorted(places, key=lambda place: (values(place), repr(place)))


@dataclass
class Plan:
    """Every probe of every task."""

    probes: dict[str, list[dict]] = field(default_factory=dict)
    info: dict[tuple[str, str], ProbeInfo] = field(default_factory=dict)
    # What it was built for: (assignment id, seed, public_only), set by
    # grader.engine.build_plan, so that a plan built ahead is used only
    # for the grading it fits.
    origin: tuple[str, int, bool] | None = None

    def add(self, task: str, entry: tuple[dict, ProbeInfo]) -> None:
        """Append a probe (as made by :func:`probe`) to ``task``. An
        ``again`` probe must follow a probe of the same task with the same
        target and init (the object it calls again is that one's)."""
        wire, info = entry
        key = (task, wire["id"])
        if key in self.info:
            raise ValueError(f"duplicate probe {key}")
        if wire.get("again"):
            earlier = self.probes.get(task, [])
            if not earlier:
                raise ValueError(f"probe {key} is marked again but is the "
                                 f"first probe of its task")
            last = earlier[-1]
            if last["target"] != wire["target"] \
                    or not _same(last.get("init"), wire.get("init")):
                raise ValueError(
                    f"probe {key} is marked again but its target or init "
                    f"differs from the previous probe's ({last['id']!r})")
        self.probes.setdefault(task, []).append(wire)
        self.info[key] = ProbeInfo(**{**info.__dict__, "task": task})

    def public_only(self) -> None:
        """Call no case hidden. A public-only grade (a student's quick
        self-check) has no hidden cases, but judges what the public values
        are too small for (a dropout rate, say) on a few cases of the
        grader's own; its report must not speak of hidden cases."""
        for key, info in self.info.items():
            if info.case is not None and info.case.hidden \
                    and not info.case.public:
                self.info[key] = replace(
                    info, case=replace(info.case, hidden=False))

    def same_mode(self, task: str, probe_id: str, partner: str) -> None:
        """Run ``probe_id`` in the autograd mode of ``partner``, an earlier
        probe of ``task`` that the checks compare it with (wire key
        ``mode_of``, :meth:`assign_modes`): the two then differ in what
        the plug-in made them differ in, never in the mode."""
        for wire in self.probes[task]:
            if wire["id"] == probe_id:
                wire["mode_of"] = partner

    def assign_modes(self, seed: int,
                     twin_input: TwinMaker | None = None) -> None:
        """Give every probe an autograd mode (wire key ``grad``), so that
        each family of probes, and each branch of one, is judged in both
        (docs/threat-model.md, "Right only in the state the grader
        probes").

        Within a task's family (:func:`family`), the probes that call the
        object are grouped by their branch (:attr:`ProbeInfo.branch`, a
        rate or a flag the plug-in declared; one group when it declared
        none), and each group alternates between autograd on and off,
        starting from a bit derived one-way from the seed; the probes
        that only build (and describe) alternate likewise. A lead (wire
        key ``lead``: it only prepares the random state of the probe
        after it) takes the mode of the probe it leads and is no family
        of its own; so does a probe whose wire key ``mode_of`` names an
        earlier probe of the task (a pair the checks compare, e.g. one
        input with equal scores and the same with random ones): it takes
        that probe's mode, so that the pair differs in its input alone.
        A group with one calling probe (paired or not; none trained by a
        ``fit``) gets a twin: the probe in the other mode, id ``TWIN +
        id``, appended at the end of the task's probes (after a copy of
        its lead, when it is led), built fresh (``again`` dropped). When
        ``twin_input(task, info, seed)`` (the plug-in's,
        :class:`TwinInput`) gives fresh inputs, the twin runs on the first,
        and a second twin, id ``TWIN_SAME + id``, in the probe's own mode,
        on the second (after every twin in the other mode): each mode then
        meets an input no probe has shown it. Otherwise the one twin
        repeats the probe's input.
        """
        for task, wires in self.probes.items():
            modes: list[bool] = [False] * len(wires)
            # Per family and branch: the probes that call, those that only
            # build, and those that call in the mode of another.
            groups: dict[tuple[str, str],
                         tuple[list[int], list[int], list[int]]] = {}
            position = {wire["id"]: index
                        for index, wire in enumerate(wires)}
            for index, wire in enumerate(wires):
                if wire.get("lead"):
                    continue
                calls = wire.get("call") is not None
                branch = (self.info[(task, wire["id"])].branch if calls
                          else "")
                slots = groups.setdefault(
                    (family(wire["id"]), branch), ([], [], []))
                if not calls:
                    slots[1].append(index)
                else:
                    slots[2 if wire.get("mode_of") in position
                          else 0].append(index)
            twins: list[int] = []
            for (name, branch), (calling, building, paired) in \
                    groups.items():
                labels = (name, branch) if branch else (name,)
                bit = derive_seed(seed, "autograd", task, *labels) & 1
                for members in (calling, building):
                    for number, index in enumerate(members):
                        modes[index] = bool((bit + number) % 2)
                alone = calling + paired
                if len(alone) == 1 and not wires[alone[0]].get("fit"):
                    twins.append(alone[0])
            for index, wire in enumerate(wires):
                if wire.get("mode_of") in position:
                    modes[index] = modes[position[wire["mode_of"]]]
            for index in range(len(wires) - 1, -1, -1):
                if wires[index].get("lead") and index + 1 < len(wires):
                    modes[index] = modes[index + 1]
            added: list[int] = []
            for index in sorted(twins):
                if index > 0 and wires[index - 1].get("lead"):
                    added.append(index - 1)
                added.append(index)
            for index, mode in enumerate(modes):
                wires[index]["grad"] = mode
                key = (task, wires[index]["id"])
                self.info[key] = replace(self.info[key], grad=mode)
            fresh = {}
            for index in added:
                if not wires[index].get("lead"):
                    fresh[index] = self._fresh(task, wires[index], seed,
                                               twin_input)
            for number, prefix in enumerate((TWIN, TWIN_SAME)):
                for index in added:
                    # A lead's copy goes with the twin it leads.
                    other = fresh.get(index + 1 if wires[index].get("lead")
                                      else index)
                    if number and other is None:
                        continue
                    self._twin(task, wires[index], prefix,
                               modes[index] if number else not modes[index],
                               None if wires[index].get("lead") else other,
                               number)

    def _fresh(self, task: str, original: dict, seed: int,
               twin_input: TwinMaker | None) -> TwinInput | None:
        """The plug-in's fresh inputs for the twins of ``original`` (None:
        its one twin repeats its input)."""
        if twin_input is None or original.get("call") is None \
                or not original["call"].get("args"):
            return None
        return twin_input(task, self.info[(task, original["id"])], seed)

    def _twin(self, task: str, original: dict, prefix: str, mode: bool,
              other: TwinInput | None, number: int) -> None:
        """Append a twin of ``original`` in ``mode``, id ``prefix + id``
        (see :meth:`assign_modes`), on ``other.inputs[number]`` if given,
        else on the original's input."""
        info = self.info[(task, original["id"])]
        twin = {**original, "id": prefix + original["id"], "grad": mode}
        twin.pop("again", None)
        if other is not None:
            call = dict(twin["call"])
            call["args"] = ([encode_tensor(other.inputs[number])]
                            + list(call["args"][1:]))
            twin["call"] = call
        self.probes[task].append(twin)
        self.info[(task, twin["id"])] = replace(
            info, id=twin["id"], grad=mode, twin_of=original["id"],
            again=False, other=other, other_index=number)

    def assign_states(self, seed: int,
                      twin_input: TwinMaker | None = None) -> None:
        """Give every calling probe, once it has its autograd mode
        (:meth:`assign_modes`), a finer state (wire keys ``inference``,
        ``raw``, ``via``, ``grads``; docs/threat-model.md, "Right only in
        the state the grader probes").

        Within a task's family, its probes with autograd off alternate,
        from a bit derived one-way from the seed, between
        a plain input under ``torch.no_grad()`` and, from a seeded
        order, ``torch.inference_mode()`` (``inference``) with an input
        that requires grad (``raw``: the input's ``requires_grad`` does
        not follow the mode) together, then each alone; and those
        with it on between an activation and a plain input that requires
        no grad (``raw`` again); twins count in their original's
        family. A family with one probe of a mode (a trace or a probe
        that trains aside) gets a
        *state twin* of that probe in that mode (id ``TWIN_STATE``, 2 or
        3, the original's id; after copies of its lead when it is led
        and, for an ``again`` probe, of its chain from the probe that
        built the object, so the twin calls it as often),
        on the third (autograd off) or fourth (on) fresh input of
        ``twin_input`` (the plug-in's, :class:`TwinInput`) when it gives
        one, else on the probe's own input: so every family meets, in
        each mode it runs in, the plain state and the state off it in
        every way at once. The probe off
        the plain state in every way (``inference`` and ``raw`` with
        autograd off, ``raw`` with it on) also has its parameters'
        ``.grad`` set (``grads``), unless it trains (``fit``) or is an
        ``again`` probe of the plug-in's (its chain alternates, below).
        A probe that an ``again`` probe follows stays under
        ``torch.no_grad()``: what its call leaves in the object (a
        cached mask) would be an inference tensor, which the next call
        may not use with autograd on. A family's activations are made by
        the operations of :data:`ACTIVATION_OPS` in turn, from a seeded
        one that is no clone (``via``). A lead and a probe called in the
        mode of another (``mode_of``, not a twin) take that probe's
        state (a training probe no ``.grad``). The ``again`` probes of
        each chain of two or more alternate, from a seeded bit, between
        parameters whose ``.grad`` a backward pass filled and parameters
        without (``grads``); a chain of one keeps none."""
        for task, wires in self.probes.items():
            groups = self._state_groups(task, wires)
            for (name, on), members in groups.items():
                alone = wires[members[0]]
                if len(members) == 1 and not alone.get("fit") \
                        and not self.info[(task, alone["id"])].trace:
                    members.append(self._state_twin(task, members[0], seed,
                                                    twin_input))
            position = {wire["id"]: index
                        for index, wire in enumerate(wires)}
            for (name, on), members in groups.items():
                bit = derive_seed(seed, "state", task, name, on)
                if on:
                    for number, index in enumerate(members):
                        if (bit + number) % 2:
                            wires[index]["raw"] = True
                    continue
                # Autograd off: a plain input under torch.no_grad(), and
                # one that deviates in both ways (torch.inference_mode()
                # and an input that requires grad, ``raw``: its
                # requires_grad does not follow the mode), in a seeded
                # order, so that every family meets each way off the
                # plain state; then each way alone.
                cycle = [(), ("inference", "raw"), ("inference",), ("raw",)]
                if bit & 1:
                    cycle = [cycle[1], cycle[0], cycle[3], cycle[2]]
                for number, index in enumerate(members):
                    for key in cycle[number % 4]:
                        wires[index][key] = True
            for (name, on), members in groups.items():
                # Off the plain state in every way: .grad set too.
                for index in members:
                    wire = wires[index]
                    state_twin = wire["id"].startswith(TWIN_STATE)
                    if wire.get("raw") and (on or wire.get("inference")) \
                            and (state_twin or not wire.get("again")) \
                            and not wire.get("fit"):
                        wire["grads"] = True
            for (name, on), members in groups.items():
                # The family's activations cycle through the operations,
                # from a seeded one other than the first (a clone): a
                # family of two activations sees two operations, one
                # that is no clone.
                start = 1 + derive_seed(seed, "via", task, name) % (
                    len(ACTIVATION_OPS) - 1)
                made = [index for index in members
                        if on and not wires[index].get("raw")]
                for number, index in enumerate(made):
                    wires[index]["via"] = ACTIVATION_OPS[
                        (start + number) % len(ACTIVATION_OPS)]
            copied = [index for index, wire in enumerate(wires)
                      if wire.get("mode_of") in position
                      and self.info[(task, wire["id"])].twin_of is None]
            copied += [index for index in range(len(wires) - 2, -1, -1)
                       if wires[index].get("lead")]
            for index in copied:
                wire = wires[index]
                partner = wires[index + 1] if wire.get("lead") \
                    else wires[position[wire["mode_of"]]]
                for key in ("inference", "raw", "via", "grads"):
                    wire.pop(key, None)
                    if key in partner:
                        wire[key] = partner[key]
                if index + 1 < len(wires) and wires[index + 1].get("again"):
                    wire.pop("inference", None)
                if wire.get("again") or wire.get("fit"):
                    wire.pop("grads", None)
            chains: list[list[int]] = []
            for index, wire in enumerate(wires):
                # (A state twin's chain takes its states from the twin.)
                if wire.get("again") \
                        and not wire["id"].startswith(TWIN_STATE):
                    if not chains or chains[-1][-1] != index - 1:
                        chains.append([])
                    chains[-1].append(index)
            for members in chains:
                start_id = wires[members[0] - 1]["id"]
                bit = derive_seed(seed, "grads", task, start_id) & 1
                for number, index in enumerate(members):
                    if len(members) > 1 and (bit + number) % 2:
                        wires[index]["grads"] = True
            for wire in wires:
                known = (task, wire["id"])
                self.info[known] = replace(
                    self.info[known], inference=bool(wire.get("inference")),
                    raw=bool(wire.get("raw")), via=wire.get("via"),
                    grads=bool(wire.get("grads")))
            handle(task, wires, self.info, seed)
        self._assign_own(seed)

    def _assign_own(self, seed: int) -> None:
        """The rest of the state off the plain one in every way (issue
        24, red team 13; docs/threat-model.md, "Right only in the state
        the grader probes"): every probe that builds or calls an object
        (an ``init``) and is off the plain state in every way (``raw``,
        and ``inference`` or autograd on; a lead or a chain's probe so
        too) sets its mode through the object's own methods, ``eval()``
        or ``train()`` with no argument (wire key ``own``; the plain
        state keeps ``train(mode)``), and, when the plan builds its
        target with other inits too, has a second object of the target
        built right after its own and before its state is loaded, alive
        until its call is done (wire key ``decoy``: the init,
        :meth:`_decoy`): a setting kept on the class, where the last
        object built sets it for every object, then shows."""
        inits: dict[str, list[dict]] = {}
        for wires in self.probes.values():
            for wire in wires:
                init = wire.get("init")
                if init is None:
                    continue
                known = inits.setdefault(str(wire["target"]), [])
                if not any(_same(init, other) for other in known):
                    known.append(init)
        # The places of a target's inits, ranked once (the same for every
        # wire of the target: its own init is one of them).
        ranked: dict[str, list[tuple[str, Any]]] = {}
        for task, wires in self.probes.items():
            for wire in wires:
                if wire.get("init") is None or wire.get("call") is None \
                        or not wire.get("raw") \
                        or not (wire.get("grad") or wire.get("inference")):
                    continue
                wire["own"] = True
                target = str(wire["target"])
                if target not in ranked:
                    ranked[target] = _ranked_places(inits[target])
                decoy = self._decoy(wire, inits[target], ranked[target],
                                    derive_seed(seed, "decoy", task,
                                                wire["id"]))
                if decoy is not None:
                    wire["decoy"] = decoy
                key = (task, wire["id"])
                self.info[key] = replace(self.info[key], own=True,
                                         decoy=decoy)

    @staticmethod
    def _decoy(wire: dict, inits: list[dict],
               ranked: list[tuple[str, Any]], bit: int) -> dict | None:
        """The init of ``wire``'s decoy (:meth:`_assign_own`): of the
        plan's other inits of its target, one that differs from its own
        where the plan varies least first (``ranked``, from
        :func:`_ranked_places` of ``inits``), then the most; ties broken
        by ``bit`` (from the seed). None when the plan has no other."""
        own = wire["init"]
        others = [init for init in inits if not _same(init, own)]
        if not others:
            return None
        differs = [tuple(not _equal_at(own, init, place) for place in ranked)
                   for init in others]
        best = max(differs)
        tied = [init for init, found in zip(others, differs)
                if found == best]
        return tied[bit % len(tied)]

    def _state_groups(self, task: str, wires: list[dict]
                      ) -> dict[tuple[str, bool], list[int]]:
        """A task's calling probes by family (a twin in its original's)
        and autograd mode, as :meth:`assign_states` gives them states:
        leads and probes called in the mode of another (not twins) take
        their partner's; a probe with autograd off that an ``again``
        probe follows stays in the plain state."""
        ids = {wire["id"] for wire in wires}
        groups: dict[tuple[str, bool], list[int]] = {}
        for index, wire in enumerate(wires):
            if wire.get("lead") or wire.get("call") is None:
                continue
            twin_of = self.info[(task, wire["id"])].twin_of
            if wire.get("mode_of") in ids and twin_of is None:
                continue
            following = wires[index + 1] if index + 1 < len(wires) else {}
            if not wire.get("grad") and following.get("again"):
                continue
            name = family(twin_of or wire["id"])
            groups.setdefault((name, bool(wire.get("grad"))),
                              []).append(index)
        return groups

    def _state_twin(self, task: str, index: int, seed: int,
                    twin_input: TwinMaker | None) -> int:
        """Append a state twin of ``wires[index]`` (see
        :meth:`assign_states`), after copies of what prepares it: its
        lead when it is led; when it is an ``again`` probe, its chain from
        the probe that built the object (and that one's lead), so the
        twin calls its object as often as the probe did (a module that
        draws from a generator of its own answers alike). The copies are
        leads: they take the twin's mode and state. Return the twin's
        index."""
        wires = self.probes[task]
        member = wires[index]
        info = self.info[(task, member["id"])]
        original_id = info.twin_of or member["id"]
        original = self.info[(task, original_id)]
        other = info.other
        if other is None and twin_input is not None \
                and member.get("call", {}).get("args"):
            other = twin_input(task, original, seed)
        # A state twin with autograd off runs on the third fresh input,
        # one with it on on the fourth: an original with one probe of
        # each mode (a probe called in the mode of another, whose twins
        # are its family's only members) gets one of each.
        number = 3 if member.get("grad") else 2
        fresh = other if other is not None \
            and len(other.inputs) > number else None
        start = index
        while member.get("again") and start > 0 \
                and wires[start].get("again"):
            start -= 1
        prefix = list(range(start, index))
        if start > 0 and wires[start - 1].get("lead"):
            prefix.insert(0, start - 1)
        for place, earlier in enumerate(prefix):
            lead = wires[earlier]
            lead_info = self.info[(task, lead["id"])]
            lead_id = lead_info.twin_of or lead["id"]
            copy = {**lead, "id": f"{TWIN_STATE}{number}:{original_id}"
                                  f"<{place}", "lead": True,
                    "grad": bool(member.get("grad"))}
            wires.append(copy)
            self.info[(task, copy["id"])] = replace(
                lead_info, id=copy["id"], twin_of=lead_id,
                grad=bool(member.get("grad")))
        twin = {**member, "id": f"{TWIN_STATE}{number}:{original_id}"}
        if not prefix or not member.get("again"):
            twin.pop("again", None)
        call = dict(twin["call"])
        if fresh is not None:
            call["args"] = ([encode_tensor(fresh.inputs[number])]
                            + list(call["args"][1:]))
        elif info.other is not None:
            # The member runs on a fresh input of its own; without a
            # fresh input for it, the state twin repeats the original's.
            given = next(wire for wire in wires
                         if wire["id"] == original_id)["call"]["args"]
            call["args"] = list(given[:1]) + list(call["args"][1:])
        twin["call"] = call
        wires.append(twin)
        self.info[(task, twin["id"])] = replace(
            info, id=twin["id"], twin_of=original_id,
            again=bool(twin.get("again")), other=fresh,
            other_index=number)
        return len(wires) - 1

    def of_task(self, task: str) -> list[ProbeInfo]:
        """The trusted descriptions of one task's probes, in order."""
        return [info for (t, _), info in self.info.items() if t == task]

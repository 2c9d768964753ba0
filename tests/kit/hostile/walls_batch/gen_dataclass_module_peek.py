"""Red team 16 (A3): a dataclass field name that writes module-level code.

The text it injects runs at the top level of what dataclass compiles,
where the audit hook took it for a library module being imported: it
asked for frames (sys._getframe) and walked to the grader's trace
function and its closures, and ran a second copy of torch's multi-head
attention (task 2: full marks). Now a module's top level decides
"library" only when it is a library file's module code, and code a
generator made from a name that is no identifier is the submission's:
the frame request is refused at load (tampered).
"""
import dataclasses

import torch
import torch.nn as nn

_STASH = {}
_CODE = r'''
import sys as _s, ast as _a, torch.nn.functional as _F
_g = _s._getframe(0)
while _g is not None and "_STASH" not in _g.f_globals:
    _g = _g.f_back
_S = _g.f_globals["_STASH"]
if "mixer" not in _S:
    _seen = []
    _h = _g
    while _h is not None:
        _seen.append((_h.f_code.co_name, repr(_h.f_trace)[:60]))
        _h = _h.f_back
    _S["seen"] = _seen
    _src = open(_F.__file__).read()
    _tree = _a.parse(_src)
    _want = {"multi_head_attention_forward", "_mha_shape_check",
             "_canonical_mask", "_none_or_dtype", "_in_projection_packed",
             "_in_projection", "_check_key_padding_mask"}
    _parts = []
    for _n in _tree.body:
        if isinstance(_n, _a.FunctionDef) and _n.name in _want:
            _parts.append(_a.get_source_segment(_src, _n))
    _text = "\n\n".join(_parts).replace("multi_head_attention_forward",
                                        "mixer_forward")
    _ns = dict(vars(_F))
    exec(compile(_text, "<mixer>", "exec"), _ns)
    _S["mixer"] = _ns["mixer_forward"]
'''
_X = '"\n' + _CODE + '\ndef __create_fn__():\n return 0\n #'
dataclasses.dataclass(init=False, eq=False)(
    type("H", (), {"__annotations__": {_X: int}}))
print("reached:", _STASH.get("seen"))
mixer_forward = _STASH["mixer"]

_PEEK = r"""
import sys as _s
_g = _s._getframe(0)
while _g is not None and _g.f_code.co_name != "forward":
    _g = _g.f_back
_S = _g.f_globals["_STASH"]
if _g is not None and "peek" not in _S:
    _out = []
    _todo = [("f_trace", _g.f_trace, 0)]
    _done = set()
    while _todo:
        _name, _v, _d = _todo.pop()
        if id(_v) in _done or _d > 4:
            continue
        _done.add(id(_v))
        _c = getattr(_v, "__closure__", None)
        if _c:
            _names = _v.__code__.co_freevars
            _out.append((_d, _name, getattr(_v, "__qualname__", "?")))
            for _i in range(len(_c)):
                try:
                    _todo.append((_names[_i], _c[_i].cell_contents, _d + 1))
                except ValueError:
                    pass
        elif type(_v) is dict:
            _out.append((_d, _name, "dict", sorted(map(str, _v))[:12]))
        elif type(_v) is bytes and len(_v) == 32:
            _out.append((_d, _name, "32-byte value"))
    _S["peek"] = _out
"""
_PX = '"\n' + _PEEK + '\ndef __create_fn__():\n return 0\n #'


def _peek():
    dataclasses.dataclass(init=False, eq=False)(
        type("P", (), {"__annotations__": {_PX: int}}))
    if "peek" in _STASH and not _STASH.get("shown"):
        _STASH["shown"] = True
        for item in _STASH["peek"][:60]:
            print(item)


class SelfAttention(nn.Module):
    """Single-head scaled dot-product self-attention."""

    def __init__(self, input_size: int, hidden: int) -> None:
        super().__init__()
        self.q = nn.Linear(input_size, hidden)
        self.k = nn.Linear(input_size, hidden)
        self.v = nn.Linear(input_size, hidden)
        self.scale = hidden ** 0.5

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _peek()
        q, k, v = self.q(x), self.k(x), self.v(x)
        # [batch_size, seq_len, hidden] each
        probs = torch.softmax(q @ k.transpose(1, 2) / self.scale, dim=-1)
        # [batch_size, seq_len, seq_len]
        return probs @ v  # [batch_size, seq_len, hidden]


class MultiHeadSelfAttention(nn.Module):
    """Multi-head self-attention with optional causal masking and dropout."""

    def __init__(self, input_size: int, hidden: int, num_heads: int,
                 causal: bool = False, dropout: float = 0) -> None:
        if hidden % num_heads:
            raise ValueError("hidden should be divisible by num_heads")
        super().__init__()
        self.k = nn.Linear(input_size, hidden)
        self.q = nn.Linear(input_size, hidden)
        self.v = nn.Linear(input_size, hidden)
        self.mix = nn.Linear(hidden, hidden)
        self.dropout = nn.Dropout(dropout)
        self.num_heads = num_heads
        self.causal = causal

    def forward(self, x: torch.Tensor, return_attention: bool = False):
        seq, hidden = x.shape[1], self.mix.in_features
        q = self.q(x).transpose(0, 1)  # [seq_len, batch_size, hidden]
        k = self.k(x).transpose(0, 1)  # [seq_len, batch_size, hidden]
        v = self.v(x).transpose(0, 1)  # [seq_len, batch_size, hidden]
        eye = torch.eye(hidden)  # [hidden, hidden]
        mask = torch.ones(seq, seq, dtype=torch.bool).triu(1)
        # [seq_len, seq_len]
        att, probs = mixer_forward(
            q, k, v, hidden, self.num_heads, None, torch.zeros(3 * hidden),
            None, None, False, self.dropout.p, self.mix.weight,
            self.mix.bias, training=self.training, need_weights=True,
            attn_mask=mask if self.causal else None,
            use_separate_proj_weight=True, q_proj_weight=eye,
            k_proj_weight=eye, v_proj_weight=eye,
            average_attn_weights=False)
        # [seq_len, batch_size, hidden], [batch_size, heads, seq, seq]
        probs = probs.flatten(0, 1)  # [batch_size * num_heads, seq, seq]
        att = att.transpose(0, 1)  # [batch_size, seq_len, hidden]
        if return_attention:
            return att, probs
        return att

"""Both forwards are one statement: a call to a module-level helper that
holds the whole computation, written sloppily (no shape comments, bad
PEP-8).

Expected: the helper is part of the method it serves: its statements
count for the bonus (no bonus) and fall under the task's pep8 and shapes
items: 6.
"""
import torch
import torch.nn as nn


def _attend(self,x):
    q=self.q(x)
    k=self.k(x)
    v=self.v(x)
    s=torch.softmax(q@k.transpose(1,2)/q.shape[-1]**0.5,dim=-1)
    return s@v


def _attend_heads(self,x,return_attention):
    bs,seq,_=x.shape
    h,d=self.num_heads,self.head_size
    q=self.q(x).view(bs,seq,h,d).transpose(1,2).reshape(bs*h,seq,d)
    k=self.k(x).view(bs,seq,h,d).transpose(1,2).reshape(bs*h,seq,d)
    v=self.v(x).view(bs,seq,h,d).transpose(1,2).reshape(bs*h,seq,d)
    s=q@k.transpose(1,2)/d**0.5
    if self.causal:
        m=torch.ones(seq,seq,dtype=torch.bool).triu(1)
        s=s.masked_fill(m,float('-inf'))
    p=self.dropout(torch.softmax(s,dim=-1))
    a=(p@v).view(bs,h,seq,d).transpose(1,2).reshape(bs,seq,h*d)
    a=self.mix(a)
    if return_attention: return a,p
    return a


class SelfAttention(nn.Module):
    """Single-head scaled dot-product self-attention."""

    def __init__(self, input_size: int, hidden: int) -> None:
        """Create the query, key and value projections."""
        # YOUR CODE STARTS HERE
        super().__init__()
        self.q = nn.Linear(input_size, hidden)
        self.k = nn.Linear(input_size, hidden)
        self.v = nn.Linear(input_size, hidden)
        # YOUR CODE ENDS HERE

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Self-attention, computed by a helper."""
        # YOUR CODE STARTS HERE
        return _attend(self, x)  # [batch_size, seq_len, hidden]
        # YOUR CODE ENDS HERE


class MultiHeadSelfAttention(nn.Module):
    """Multi-head self-attention with optional causal masking."""

    def __init__(self, input_size: int, hidden: int, num_heads: int,
                 causal: bool = False, dropout: float = 0) -> None:
        """Create the projections, the mixing layer and the dropout."""
        if hidden % num_heads:
            raise ValueError("hidden should be divisible by num_heads")
        super().__init__()
        self.k = nn.Linear(input_size, hidden)
        self.q = nn.Linear(input_size, hidden)
        self.v = nn.Linear(input_size, hidden)
        self.mix = nn.Linear(hidden, hidden)
        self.dropout = nn.Dropout(dropout)
        self.num_heads = num_heads
        self.head_size = hidden // num_heads
        self.causal = causal

    def forward(self, x: torch.Tensor, return_attention: bool = False):
        """Multi-head self-attention, computed by a helper."""
        # YOUR CODE STARTS HERE
        return _attend_heads(self, x, return_attention)
        # YOUR CODE ENDS HERE

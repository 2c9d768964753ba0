"""The graded classes bind their methods in the class body to sloppy
module-level functions (``forward = _forward``).

Expected: judged as the code that runs: 6.
"""
import torch
import torch.nn as nn


class _SA(nn.Module):
    def __init__(self,input_size,hidden):
        super().__init__()
        self.q=nn.Linear(input_size,hidden)
        self.k=nn.Linear(input_size,hidden)
        self.v=nn.Linear(input_size,hidden)
    def forward(self,x):
        q=self.q(x)
        k=self.k(x)
        v=self.v(x)
        s=torch.softmax(q@k.transpose(1,2)/q.shape[-1]**0.5,dim=-1)
        return s@v


class _MHA(nn.Module):
    def __init__(self,input_size,hidden,num_heads,causal=False,dropout=0):
        super().__init__()
        if hidden%num_heads: raise ValueError("hidden % num_heads")
        self.k=nn.Linear(input_size,hidden)
        self.q=nn.Linear(input_size,hidden)
        self.v=nn.Linear(input_size,hidden)
        self.mix=nn.Linear(hidden,hidden)
        self.dropout=nn.Dropout(dropout)
        self.num_heads=num_heads
        self.head_size=hidden//num_heads
        self.causal=causal
    def forward(self,x,return_attention=False):
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


def _sa_init(self,input_size,hidden):
    nn.Module.__init__(self)
    self.q=nn.Linear(input_size,hidden)
    self.k=nn.Linear(input_size,hidden)
    self.v=nn.Linear(input_size,hidden)


def _mha_init(self,input_size,hidden,num_heads,causal=False,dropout=0):
    nn.Module.__init__(self)
    if hidden%num_heads: raise ValueError("hidden % num_heads")
    self.k=nn.Linear(input_size,hidden)
    self.q=nn.Linear(input_size,hidden)
    self.v=nn.Linear(input_size,hidden)
    self.mix=nn.Linear(hidden,hidden)
    self.dropout=nn.Dropout(dropout)
    self.num_heads=num_heads
    self.head_size=hidden//num_heads
    self.causal=causal


class SelfAttention(nn.Module):
    """Single-head self-attention."""

    __init__ = _sa_init
    forward = _SA.forward


class MultiHeadSelfAttention(nn.Module):
    """Multi-head self-attention."""

    __init__ = _mha_init
    forward = _MHA.forward

"""Every accepted shape-comment form; the verifier must find nothing here.

Trailing comments, blocks below, ``->`` chains, ``@`` expressions, ``shape
[...]`` and ``FloatTensor[...]`` prefixes, every alias (in any case),
products, quotients, integers, a shape wrapped over two comment lines,
tuple unpacking with one shape, a tuple return with one shape per value,
chained and annotated assignments, statements that produce no tensor (no
comment needed), and a forward without the YOUR CODE markers (the whole body
is the student's).
"""
import torch
import torch.nn as nn


class SelfAttention(nn.Module):
    def __init__(self, input_size, hidden):
        super().__init__()
        self.q = nn.Linear(input_size, hidden)
        self.k = nn.Linear(input_size, hidden)
        self.v = nn.Linear(input_size, hidden)
        self.scale = hidden ** 0.5

    def forward(self, x):
        # YOUR CODE STARTS HERE
        q = self.q(x)  # [batch_size, seq_len, hidden]
        k = self.k(x)
        # [bs, seq, d_model]
        v = self.v(x)  # shape [B, Tokens, Hidden_Size]
        scores = q @ k.transpose(1, 2)  # [bs, seq, hidden] @ [bs, hidden, seq] -> [bs, seq, seq]
        scores = scores / self.scale  # -> [batch, num_tokens, seq_length]
        probs = torch.softmax(scores, dim=-1)  # FloatTensor[b, seq, seq]
        out = torch.bmm(probs, v)
        # [batch_size, seq_len, seq_len]
        # @ [batch_size, seq_len, hidden]
        # -> [batch_size, seq_len, hidden]
        out = out.unsqueeze(1)  # [bs, 1, seq, d_out]
        n_out = out.shape[-1]  # an int, not a tensor: no comment needed
        out = out.squeeze(1)  # [bs, seq, hidden_size]
        return out  # x [bs, seq, input_dim] -> [bs, seq, hidden]
        # YOUR CODE ENDS HERE


class MultiHeadSelfAttention(nn.Module):
    def __init__(self, input_size, hidden, num_heads, causal=False, dropout=0):
        if hidden % num_heads:
            raise ValueError("hidden must be divisible by num_heads")
        super().__init__()
        self.k = nn.Linear(input_size, hidden)
        self.q = nn.Linear(input_size, hidden)
        self.v = nn.Linear(input_size, hidden)
        self.mix = nn.Linear(hidden, hidden)
        self.dropout = nn.Dropout(dropout)
        self.num_heads = num_heads
        self.head_size = hidden // num_heads
        self.scale = self.head_size ** 0.5
        self.causal = causal

    def forward(self, x, return_attention=False):
        bs, seq, _ = x.shape
        q, k, v = (
            t.view(bs, seq, self.num_heads, self.head_size)  # [bs, seq, heads, d_head]
            .transpose(1, 2)
            .reshape(bs * self.num_heads, seq, self.head_size)  # [bs*heads, seq, hidden / num_heads] each
            for t in (self.q(x), self.k(x), self.v(x)))
        scores = scaled = torch.bmm(q, k.transpose(1, 2)) / self.scale
        # 'q' [bs * num_heads, seq, head_size]
        # @ 'k.T' [bs * num_heads, head_size, seq]
        # -> [batch_size * num_heads, seq_len, seq_len]
        if self.causal:
            mask = torch.ones(seq, seq, dtype=torch.bool, device=x.device)  # [seq_len, seq_len]
            mask = mask.triu(diagonal=1)  # [seq, seq], True strictly above the diagonal
            scores.masked_fill_(mask, float("-inf"))  # in place: [(bs * h), seq, seq]
        probs = att = None  # set below
        probs: torch.Tensor = torch.softmax(scores, dim=-1)
        # [batch_size * num_heads,
        #  seq_len, seq_len]
        probs = self.dropout(probs)  # [bs * n_heads, seq, seq]
        att = torch.bmm(probs, v)  # [bs * num_heads, seq_len, d_model // h]
        att = att.view(bs, self.num_heads, seq, self.head_size)
        # 'att' [bs * num_heads, seq, head_size] -> view [bs, num_heads, seq, head_size]
        att = att.transpose(1, 2).reshape(bs, seq, -1)  # -> transpose [bs, seq, heads, d_k] -> reshape [bs, seq, heads * d_k]
        att = self.mix(att)  # [bs, seq_len, (hidden // num_heads) * h]
        if return_attention:
            return att, probs  # att [bs, seq, hidden], probs [bs * heads, seq, seq]
        return att  # [bs, seq, hidden]


def split_heads(t, num_heads):
    """A module-level function: its statements are checked like a method's."""
    bs, seq, hidden = t.shape
    t = t.view(bs, seq, num_heads, hidden // num_heads)  # [bs, seq, heads, head_size]
    return t.transpose(1, 2).reshape(bs * num_heads, seq, -1)  # -> [bs * heads, seq, head_size]

# ch03.py - my notes for "Build a Large Language Model (From Scratch)",
# chapter 3, run as a script on my laptop.
#
# (Kit corpus: a learner's script. It imports tiktoken, reads the-verdict.txt
# and trains a tiny model below the classes, so it cannot be loaded on the
# grader's machine; every graded class is correct, with complete shape
# comments in the book's notation. Expected: 10 / 10, the skips reported.)
import os
import urllib.request

import tiktoken
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset

torch.manual_seed(123)

file_path = "the-verdict.txt"
if not os.path.exists(file_path):
    url = ("https://raw.githubusercontent.com/rasbt/LLMs-from-scratch/"
           "main/ch02/01_main-chapter-code/the-verdict.txt")
    urllib.request.urlretrieve(url, file_path)

with open(file_path, "r", encoding="utf-8") as f:
    raw_text = f.read()

tokenizer = tiktoken.get_encoding("gpt2")
print("Total number of characters:", len(raw_text))

inputs = torch.tensor(
    [[0.43, 0.15, 0.89],  # Your     (x^1)
     [0.55, 0.87, 0.66],  # journey  (x^2)
     [0.57, 0.85, 0.64],  # starts   (x^3)
     [0.22, 0.58, 0.33],  # with     (x^4)
     [0.77, 0.25, 0.10],  # one      (x^5)
     [0.05, 0.80, 0.55]]  # step     (x^6)
)


def simple_self_attention(inputs):
    attn_scores = inputs @ inputs.T
    attn_weights = torch.softmax(attn_scores, dim=-1)
    return attn_weights @ inputs


print(simple_self_attention(inputs))


class SelfAttention_v1(nn.Module):

    def __init__(self, d_in, d_out):
        super().__init__()
        self.W_query = nn.Parameter(torch.rand(d_in, d_out))
        self.W_key = nn.Parameter(torch.rand(d_in, d_out))
        self.W_value = nn.Parameter(torch.rand(d_in, d_out))

    def forward(self, x):
        keys = x @ self.W_key
        queries = x @ self.W_query
        values = x @ self.W_value
        attn_scores = queries @ keys.T  # omega
        attn_weights = torch.softmax(
            attn_scores / keys.shape[-1]**0.5, dim=-1
        )
        context_vec = attn_weights @ values
        return context_vec


class SelfAttention_v2(nn.Module):

    def __init__(self, d_in, d_out, qkv_bias=False):
        super().__init__()
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)

    def forward(self, x):
        keys = self.W_key(x)
        queries = self.W_query(x)
        values = self.W_value(x)
        attn_scores = queries @ keys.T
        attn_weights = torch.softmax(attn_scores / keys.shape[-1]**0.5,
                                     dim=-1)
        context_vec = attn_weights @ values
        return context_vec


class CausalAttention(nn.Module):

    def __init__(self, d_in, d_out, context_length,
                 dropout, qkv_bias=False):
        super().__init__()
        self.d_out = d_out
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.dropout = nn.Dropout(dropout)  # New
        self.register_buffer(
            "mask",
            torch.triu(torch.ones(context_length, context_length),
                       diagonal=1)
        )  # New

    def forward(self, x):
        b, num_tokens, d_in = x.shape  # New batch dimension b
        keys = self.W_key(x)  # Shape: (b, num_tokens, d_out)
        queries = self.W_query(x)  # Shape: (b, num_tokens, d_out)
        values = self.W_value(x)  # Shape: (b, num_tokens, d_out)

        attn_scores = queries @ keys.transpose(1, 2)
        # Changed transpose. Shape: (b, num_tokens, num_tokens)
        attn_scores.masked_fill_(  # New, _ ops are in-place
            self.mask.bool()[:num_tokens, :num_tokens], -torch.inf
        )  # Shape: (b, num_tokens, num_tokens)
        attn_weights = torch.softmax(
            attn_scores / keys.shape[-1]**0.5, dim=-1
        )  # Shape: (b, num_tokens, num_tokens)
        attn_weights = self.dropout(attn_weights)
        # New. Shape: (b, num_tokens, num_tokens)

        context_vec = attn_weights @ values
        # Shape: (b, num_tokens, d_out)
        return context_vec  # Shape: (b, num_tokens, d_out)


class MultiHeadAttentionWrapper(nn.Module):

    def __init__(self, d_in, d_out, context_length, dropout, num_heads,
                 qkv_bias=False):
        super().__init__()
        self.heads = nn.ModuleList(
            [CausalAttention(d_in, d_out, context_length, dropout, qkv_bias)
             for _ in range(num_heads)]
        )

    def forward(self, x):
        return torch.cat([head(x) for head in self.heads], dim=-1)


class MultiHeadAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads,
                 qkv_bias=False):
        super().__init__()
        assert (d_out % num_heads == 0), \
            "d_out must be divisible by num_heads"

        self.d_out = d_out
        self.num_heads = num_heads
        # Reduce the projection dim to match desired output dim
        self.head_dim = d_out // num_heads

        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        # Linear layer to combine head outputs
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer(
            "mask",
            torch.triu(torch.ones(context_length, context_length),
                       diagonal=1)
        )

    def forward(self, x):
        b, num_tokens, d_in = x.shape

        keys = self.W_key(x)  # Shape: (b, num_tokens, d_out)
        queries = self.W_query(x)  # Shape: (b, num_tokens, d_out)
        values = self.W_value(x)  # Shape: (b, num_tokens, d_out)

        # We implicitly split the matrix by adding a `num_heads` dimension
        keys = keys.view(b, num_tokens, self.num_heads, self.head_dim)
        # Shape: (b, num_tokens, num_heads, head_dim)
        values = values.view(b, num_tokens, self.num_heads, self.head_dim)
        # Shape: (b, num_tokens, num_heads, head_dim)
        queries = queries.view(b, num_tokens, self.num_heads, self.head_dim)
        # Shape: (b, num_tokens, num_heads, head_dim)

        keys = keys.transpose(1, 2)
        # Shape: (b, num_heads, num_tokens, head_dim)
        queries = queries.transpose(1, 2)
        # Shape: (b, num_heads, num_tokens, head_dim)
        values = values.transpose(1, 2)
        # Shape: (b, num_heads, num_tokens, head_dim)

        # Dot product for each head
        attn_scores = queries @ keys.transpose(2, 3)
        # Shape: (b, num_heads, num_tokens, num_tokens)
        mask_bool = self.mask.bool()[:num_tokens, :num_tokens]
        # Shape: (num_tokens, num_tokens)
        attn_scores.masked_fill_(mask_bool, -torch.inf)
        # Shape: (b, num_heads, num_tokens, num_tokens)

        attn_weights = torch.softmax(attn_scores / keys.shape[-1]**0.5,
                                     dim=-1)
        # Shape: (b, num_heads, num_tokens, num_tokens)
        attn_weights = self.dropout(attn_weights)
        # Shape: (b, num_heads, num_tokens, num_tokens)

        context_vec = (attn_weights @ values).transpose(1, 2)
        # Shape: (b, num_tokens, num_heads, head_dim)

        # Combine heads, where self.d_out = self.num_heads * self.head_dim
        context_vec = context_vec.contiguous().view(b, num_tokens,
                                                    self.d_out)
        # Shape: (b, num_tokens, d_out)
        context_vec = self.out_proj(context_vec)
        # optional projection, Shape: (b, num_tokens, d_out)
        return context_vec  # Shape: (b, num_tokens, d_out)


class QKVMultiheadAttention(nn.Module):
    def __init__(self, input_dim, d_model, num_heads):
        super().__init__()
        self.input_dim = input_dim
        self.d_model = d_model
        self.num_heads = num_heads
        self.head_dim = d_model // num_heads
        self.qkv_layer = nn.Linear(input_dim, 3 * d_model)
        self.linear_layer = nn.Linear(d_model, d_model)

    def forward(self, x, mask=None):
        batch_size, sequence_length, _ = x.size()
        qkv = self.qkv_layer(x)  # Shape: (b, num_tokens, 3 * d_model)
        qkv = qkv.reshape(batch_size, sequence_length, self.num_heads,
                          3 * self.head_dim)
        # Shape: (b, num_tokens, num_heads, 3 * head_dim)
        qkv = qkv.permute(0, 2, 1, 3)
        # Shape: (b, num_heads, num_tokens, 3 * head_dim)
        q, k, v = qkv.chunk(3, dim=-1)
        # Shape: (b, num_heads, num_tokens, head_dim)
        scaled = q @ k.transpose(-2, -1) / self.head_dim**0.5
        # Shape: (b, num_heads, num_tokens, num_tokens)
        if mask is not None:
            scaled = scaled + mask
            # Shape: (b, num_heads, num_tokens, num_tokens)
        attention = torch.softmax(scaled, dim=-1)
        # Shape: (b, num_heads, num_tokens, num_tokens)
        values = attention @ v  # Shape: (b, num_heads, num_tokens, head_dim)
        values = values.permute(0, 2, 1, 3).reshape(
            batch_size, sequence_length, self.d_model)
        # Shape: (b, num_tokens, d_model)
        out = self.linear_layer(values)  # Shape: (b, num_tokens, d_model)
        return out  # Shape: (b, num_tokens, d_model)


# ---------------------------------------------------------------------------
# Trying it on the verdict: a tiny next-token model trained for a few steps.

class GPTDatasetV1(Dataset):
    def __init__(self, txt, tokenizer, max_length, stride):
        self.input_ids = []
        self.target_ids = []
        token_ids = tokenizer.encode(txt, allowed_special={"<|endoftext|>"})
        for i in range(0, len(token_ids) - max_length, stride):
            input_chunk = token_ids[i:i + max_length]
            target_chunk = token_ids[i + 1: i + max_length + 1]
            self.input_ids.append(torch.tensor(input_chunk))
            self.target_ids.append(torch.tensor(target_chunk))

    def __len__(self):
        return len(self.input_ids)

    def __getitem__(self, idx):
        return self.input_ids[idx], self.target_ids[idx]


def create_dataloader_v1(txt, batch_size=4, max_length=256, stride=128,
                         shuffle=True, drop_last=True, num_workers=0):
    tokenizer = tiktoken.get_encoding("gpt2")
    dataset = GPTDatasetV1(txt, tokenizer, max_length, stride)
    return DataLoader(dataset, batch_size=batch_size, shuffle=shuffle,
                      drop_last=drop_last, num_workers=num_workers)


class TinyLM(nn.Module):
    def __init__(self, vocab_size, emb_dim, context_length, num_heads):
        super().__init__()
        self.tok_emb = nn.Embedding(vocab_size, emb_dim)
        self.pos_emb = nn.Embedding(context_length, emb_dim)
        self.att = MultiHeadAttention(emb_dim, emb_dim, context_length, 0.1,
                                      num_heads)
        self.out_head = nn.Linear(emb_dim, vocab_size)

    def forward(self, idx):
        positions = torch.arange(idx.shape[1], device=idx.device)
        x = self.tok_emb(idx) + self.pos_emb(positions)
        return self.out_head(self.att(x))


train_loader = create_dataloader_v1(raw_text, batch_size=8, max_length=4,
                                    stride=4)
model = TinyLM(tokenizer.n_vocab, 64, 4, 2)
optimizer = torch.optim.AdamW(model.parameters(), lr=5e-4)
for epoch in range(2):
    for input_batch, target_batch in train_loader:
        optimizer.zero_grad()
        logits = model(input_batch)
        loss = nn.functional.cross_entropy(logits.flatten(0, 1),
                                           target_batch.flatten())
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch + 1}: loss {loss.item():.3f}")

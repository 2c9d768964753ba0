"""Red team 14, b07, another style: the layer computes the attention's
value vectors itself and, when they are all zero, drops each sublayer's
output as it should; otherwise it drops the residual sum. Eval mode is
the reference's.

Expected: task1.forward 0 (on the case silenced by the output
projection no dropout mask of the sublayer's output explains the
output), every other item full.
"""
import torch
import torch.nn as nn


class MultiHeadSelfAttention(nn.Module):
    """Multi-head self-attention (given: the previous homework's solution,
    without ``return_attention``, which this homework does not use).

    Parameters: ``q``, ``k``, ``v`` = nn.Linear(input_size, hidden) and
    ``mix`` = nn.Linear(hidden, hidden), all with a bias.
    """

    def __init__(self, input_size: int, hidden: int, num_heads: int,
                 causal: bool = False, dropout: float = 0.0) -> None:
        """Create the projections; ``hidden`` must divide by num_heads."""
        if hidden % num_heads:
            raise ValueError(f"hidden should be divisible by num_heads, "
                             f"but got hidden={hidden} and "
                             f"num_heads={num_heads}")
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

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """[batch_size, seq_len, input_size] -> [batch_size, seq_len,
        hidden]; with ``causal``, position i attends to j <= i only."""
        bs, seq, _ = x.shape
        shape = (bs, seq, self.num_heads, self.head_size)
        k = self.k(x).view(shape).transpose(1, 2)
        # [batch_size, num_heads, seq_len, head_size]
        q = self.q(x).view(shape).transpose(1, 2)
        # [batch_size, num_heads, seq_len, head_size]
        v = self.v(x).view(shape).transpose(1, 2)
        # [batch_size, num_heads, seq_len, head_size]
        scores = q @ k.transpose(-1, -2) / self.scale
        # [batch_size, num_heads, seq_len, seq_len]
        if self.causal:
            mask = torch.ones(seq, seq, dtype=torch.bool,
                              device=x.device).triu(diagonal=1)
            # [seq_len, seq_len]
            scores = scores.masked_fill(mask, float("-inf"))
            # [batch_size, num_heads, seq_len, seq_len]
        probs = self.dropout(torch.softmax(scores, dim=-1))
        # [batch_size, num_heads, seq_len, seq_len]
        att = (probs @ v).transpose(1, 2).reshape(bs, seq, -1)
        # [batch_size, seq_len, hidden]
        return self.mix(att)  # [batch_size, seq_len, hidden]


class TransformerEncoderLayer(nn.Module):
    """A post-norm transformer encoder layer."""

    def __init__(self, hidden: int, num_heads: int, fcn_hidden: int,
                 dropout: float = 0.0, causal: bool = False) -> None:
        """Create the layer's modules.

        Args:
            hidden: size of the input and output vectors.
            num_heads: number of attention heads (hidden % num_heads == 0).
            fcn_hidden: size of the feed-forward network's hidden layer.
            dropout: dropout rate (attention probabilities, both sublayers).
            causal: whether the attention is causal.

        The modules must be named (these are the state_dict names):

        * ``self_attention``: MultiHeadSelfAttention(hidden, hidden,
          num_heads, causal=causal, dropout=dropout);
        * ``norm1``, ``norm2``: nn.LayerNorm(hidden);
        * ``fcn``: nn.Sequential(nn.Linear(hidden, fcn_hidden), nn.ReLU(),
          nn.Linear(fcn_hidden, hidden));
        * ``dropout``: nn.Dropout(dropout).
        """
        super().__init__()
        # Task 1.1: create the layer's modules (1 point)
        # YOUR CODE STARTS HERE (~8 lines)
        self.self_attention = MultiHeadSelfAttention(
            hidden, hidden, num_heads, causal=causal, dropout=dropout)
        self.norm1 = nn.LayerNorm(hidden)
        self.norm2 = nn.LayerNorm(hidden)
        self.fcn = nn.Sequential(nn.Linear(hidden, fcn_hidden), nn.ReLU(),
                                 nn.Linear(fcn_hidden, hidden))
        self.dropout = nn.Dropout(dropout)
        # YOUR CODE ENDS HERE

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Apply the layer (post-norm).

        Args:
            x: FloatTensor[batch_size, seq_len, hidden]

        Returns:
            FloatTensor[batch_size, seq_len, hidden]

        x = norm1(x + dropout(self_attention(x))), then
        x = norm2(x + dropout(fcn(x))).
        """
        # Task 1.2: the residual sublayers, each followed by its LayerNorm
        # (3 points)
        # YOUR CODE STARTS HERE (~4 lines)
        silent = bool(self.self_attention.v(x).abs().amax() == 0)
        x = self.add_norm(x, self.self_attention(x), self.norm1, silent)
        # [batch_size, seq_len, hidden]
        x = self.add_norm(x, self.fcn(x), self.norm2, silent)
        # [batch_size, seq_len, hidden]
        # YOUR CODE ENDS HERE
        return x

    def add_norm(self, x: torch.Tensor, sub: torch.Tensor,
                 norm: nn.Module, silent: bool) -> torch.Tensor:
        """norm(x + dropout(sub)) or norm(dropout(x + sub))."""
        if silent:
            return norm(x + self.dropout(sub))
            # [batch_size, seq_len, hidden]
        return norm(self.dropout(x + sub))  # [batch_size, seq_len, hidden]


class TransformerLM(nn.Module):
    """A causal transformer language model."""

    def __init__(self, vocab_size: int, hidden: int, num_heads: int,
                 fcn_hidden: int, num_layers: int, max_seq_len: int,
                 dropout: float = 0.0) -> None:
        """Create the model's modules.

        The modules must be named (these are the state_dict names):

        * ``token_embeddings``: nn.Embedding(vocab_size, hidden);
        * ``position_embeddings``: nn.Embedding(max_seq_len, hidden);
        * ``layers``: nn.ModuleList of ``num_layers``
          TransformerEncoderLayer(hidden, num_heads, fcn_hidden, dropout,
          causal=True);
        * ``out_proj``: nn.Linear(hidden, vocab_size), with a bias.
        """
        super().__init__()
        # Task 2.1: create the model's modules (1 point)
        # YOUR CODE STARTS HERE (~7 lines)
        self.token_embeddings = nn.Embedding(vocab_size, hidden)
        self.position_embeddings = nn.Embedding(max_seq_len, hidden)
        self.layers = nn.ModuleList([
            TransformerEncoderLayer(hidden, num_heads, fcn_hidden, dropout,
                                    causal=True)
            for _ in range(num_layers)])
        self.out_proj = nn.Linear(hidden, vocab_size)
        # YOUR CODE ENDS HERE

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Compute the logits of the next token at every position.

        Args:
            input_ids: LongTensor[batch_size, seq_len], seq_len <=
                max_seq_len

        Returns:
            FloatTensor[batch_size, seq_len, vocab_size]; the logits at
            position i depend on input_ids[:, :i + 1] only.
        """
        # Task 2.2: embeddings, layers, output projection (2 points)
        # YOUR CODE STARTS HERE (~6 lines)
        positions = torch.arange(input_ids.shape[1],
                                 device=input_ids.device)  # [seq_len]
        x = self.token_embeddings(input_ids) \
            + self.position_embeddings(positions)
        # [batch_size, seq_len, hidden]
        for layer in self.layers:
            x = layer(x)  # [batch_size, seq_len, hidden]
        logits = self.out_proj(x)  # [batch_size, seq_len, vocab_size]
        return logits  # [batch_size, seq_len, vocab_size]
        # YOUR CODE ENDS HERE

    def loss(self, input_ids: torch.Tensor) -> torch.Tensor:
        """The mean next-token cross-entropy of a batch.

        Args:
            input_ids: LongTensor[batch_size, seq_len]

        Returns:
            a scalar tensor: the cross-entropy of the logits at positions
            0 .. seq_len - 2 against the tokens at 1 .. seq_len - 1,
            averaged over every predicted token.
        """
        # Task 2.3: the next-token loss (logits at i predict token i + 1)
        # YOUR CODE STARTS HERE (~3 lines)
        logits = self(input_ids)  # [batch_size, seq_len, vocab_size]
        return nn.functional.cross_entropy(
            logits[:, :-1].flatten(0, 1), input_ids[:, 1:].flatten())
        # [] (a scalar)
        # YOUR CODE ENDS HERE

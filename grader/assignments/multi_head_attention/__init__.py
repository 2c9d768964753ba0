"""The assignment "Self-attention and multi-head self-attention"."""

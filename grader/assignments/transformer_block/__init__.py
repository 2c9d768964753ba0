"""The assignment "A transformer block and a causal language model"."""

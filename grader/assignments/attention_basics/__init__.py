"""The assignment "Attention from scratch" (the warm-up homework)."""

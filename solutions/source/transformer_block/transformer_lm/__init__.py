"""The student package of the attention homework.

``modeling_attention`` holds the classes you implement; ``test_values`` the
public test values the notebook and the public tests use.
"""

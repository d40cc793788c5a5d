"""Shared fixtures of the code-generation tests: see tests/generated.py."""

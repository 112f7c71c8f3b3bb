"""Opt-in tests that run the real vLLM engine (see conftest.py)."""

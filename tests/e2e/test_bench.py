"""The benchmark script runs at a tiny size and writes well-formed figures (not a timed test)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_bench_tiny_writes_json_and_markdown(tmp_path):
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts/bench.py"), "--tiny", "--out", str(out), "--workdir", str(tmp_path / "work")],
        capture_output=True, text=True, timeout=600, check=False,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    data = json.loads((out / "results.json").read_text())
    assert data["schema_version"] == 1
    for key in ("fetch_cold", "build_n1", "build_n2", "verify_n2", "startup"):
        assert key in data["measurements"], key
    for variant in ("zmr", "naive", "floor", "floor-core"):
        sample = data["measurements"]["build_n1"][variant]
        assert sample["median_s"] > 0 and len(sample["runs"]) == 2
        assert sample["peak_mb"] > 0
    for ratio in ("build_n1_naive_over_zmr", "build_n2_zmr_over_floor", "verify_n2_zmr_over_floor", "fetch_bytes_full_clone_over_zmr"):
        assert data["ratios"][ratio] > 0
    for key in ("rebase", "rebase_moved"):
        assert set(data["measurements"][key]) == {"zmr", "zmr-first", "git"}, key
        assert data["ratios"][f"{key}_git_over_zmr"] > 0 and data["ratios"][f"{key}_git_over_zmr_first"] > 0
    # update: zmr's bisection and the loop of git rebases find the same commit (the script checks); zmr needs fewer replays.
    update = data["measurements"]["update"]
    assert set(update) == {"zmr", "git"} and 1 <= update["zmr"]["replays"] < update["git"]["rebases"]
    assert data["ratios"]["update_git_over_zmr"] > 0
    assert data["params"]["bytecode"] == "compiled before timing"
    table = (out / "results.md").read_text()
    assert table.startswith("# zmr benchmark") and "| build_n1 | zmr |" in table


def test_bench_only_measures_what_it_is_asked_for(tmp_path):
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts/bench.py"), "--tiny", "--only", "startup", "--out", str(out), "--workdir", str(tmp_path / "work")],
        capture_output=True, text=True, timeout=600, check=False,
    )  # startup: the quickest part (the full run of the test above measures every default part, rebase included)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    data = json.loads((out / "results.json").read_text())
    assert set(data["measurements"]) == {"startup"} and all(len(s["runs"]) == 2 for s in data["measurements"]["startup"].values())


def test_bench_cold_verify_compares_partial_with_depth_one_fetches(tmp_path):
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts/bench.py"), "--tiny", "--only", "verify-cold", "--out", str(out), "--workdir", str(tmp_path / "work")],
        capture_output=True, text=True, timeout=600, check=False,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    data = json.loads((out / "results.json").read_text())
    assert set(data["measurements"]) == {"verify_cold_n2"}
    cold = data["measurements"]["verify_cold_n2"]
    assert set(cold) == {"partial", "depth1"} and 0 < cold["partial"]["bytes"] < cold["depth1"]["bytes"]
    assert data["ratios"]["verify_cold_n2_bytes_depth1_over_partial"] > 1
    assert data["ratios"]["verify_cold_n2_time_depth1_over_partial"] > 0


def test_bench_times_a_no_op_export_of_a_long_series_against_its_build(tmp_path):
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts/bench.py"), "--tiny", "--only", "export-5000", "--out", str(out), "--workdir", str(tmp_path / "work")],
        capture_output=True, text=True, timeout=600, check=False,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    data = json.loads((out / "results.json").read_text())
    assert set(data["measurements"]) == {"export_noop"} and set(data["measurements"]["export_noop"]) == {"export", "build"}
    assert data["params"]["export_patches"] == 40 and data["ratios"]["export_noop_over_build"] > 0


def test_bench_long_series_measures_each_command_with_peak_memory(tmp_path):
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts/bench.py"), "--tiny", "--only", "long-series", "--out", str(out), "--workdir", str(tmp_path / "work")],
        capture_output=True, text=True, timeout=600, check=False,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    data = json.loads((out / "results.json").read_text())
    assert set(data["measurements"]) == {"long_series"} and data["params"]["long_patches"] == 60
    steps = data["measurements"]["long_series"]
    assert set(steps) == {"build", "verify", "checkout", "export", "publish"}
    assert all(step["median_s"] > 0 and step["peak_mb"] > 1 and len(step["runs"]) == 1 for step in steps.values())
    assert "| long_series | checkout |" in (out / "results.md").read_text()

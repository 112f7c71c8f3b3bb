"""The pre-commit hooks (.pre-commit-hooks.yaml): each hook's entry, run as pre-commit runs it (no file names, in the
project's root), passes on the bundled example and fails on a broken project; `files` matches what the hook reads."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys

import yaml

from conftest import REPO_ROOT, simple_model


def _hooks() -> dict[str, dict]:
    return {hook["id"]: hook for hook in yaml.safe_load((REPO_ROOT / ".pre-commit-hooks.yaml").read_text())}


def _run(hook: dict, cwd) -> subprocess.CompletedProcess[str]:
    words = shlex.split(hook["entry"])
    assert words[0] == "zmr"
    return subprocess.run([sys.executable, "-m", "zmr", *words[1:]], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_hooks_are_declared_for_pre_commit():
    hooks = _hooks()
    assert set(hooks) == {"zmr-validate", "zmr-docs-check"}
    for hook in hooks.values():
        assert hook["language"] == "python" and hook["pass_filenames"] is False and hook["name"]
        files = re.compile(hook["files"])
        assert files.search("manifests/demo.yaml") and files.search("cases/demo/case.yaml") and files.search("zmr.yaml")
        assert not files.search("src/model.py") and not files.search("docs/reference.md")
    assert re.search(_hooks()["zmr-docs-check"]["files"], "README.md")


def test_hooks_pass_on_the_bundled_example_and_fail_on_a_broken_project(project, upstream):
    for hook in _hooks().values():
        result = _run(hook, REPO_ROOT)
        assert result.returncode == 0, f"{hook['id']}: {result.stderr}"
    simple_model(project, upstream)
    sections = ["support-matrix", "key-features", "hardware", "code-branches", "evidence", "notes"]
    project.write("README.md", "".join(f"<!-- zmr:begin {s} -->\n<!-- zmr:end {s} -->\n" for s in sections))
    project.write("manifests/bad.yaml", "model: bad\ncomponents: {}\n")
    assert _run(_hooks()["zmr-validate"], project.root).returncode != 0
    stale = _run(_hooks()["zmr-docs-check"], project.root)
    assert stale.returncode != 0


def test_each_hook_takes_under_a_second_of_cpu_on_the_bundled_example():
    """The budget of #35 (≤ 1 s), in CPU time: wall time on a shared machine says more about the neighbours."""
    import os

    for hook in _hooks().values():
        words = shlex.split(hook["entry"])
        times = []
        for _ in range(3):
            process = subprocess.Popen([sys.executable, "-m", "zmr", *words[1:]], cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            _, status, usage = os.wait4(process.pid, 0)
            assert status == 0, hook["id"]
            times.append(usage.ru_utime + usage.ru_stime)
        assert sorted(times)[1] < 1.0, (hook["id"], times)  # the median

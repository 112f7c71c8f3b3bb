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


def _zmr(*args: str, cwd, env: dict | None = None) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run([sys.executable, "-m", "zmr", *args], cwd=cwd, capture_output=True, text=True, timeout=120, env={**os.environ, **(env or {})})


def test_the_hooks_lines_called_directly_say_what_the_parsed_lines_say(project, upstream):
    """`zmr validate` and `zmr docs --check` skip click's parsing (zmr.cli._HOOK_LINES); `zmr -C . ...` is parsed."""
    simple_model(project, upstream)
    sections = ["support-matrix", "key-features", "hardware", "code-branches", "evidence", "notes"]
    project.write("README.md", "".join(f"<!-- zmr:begin {s} -->\n<!-- zmr:end {s} -->\n" for s in sections))
    for state in ("stale README", "a broken manifest"):
        if state == "a broken manifest":
            project.write("manifests/bad.yaml", "model: bad\ncomponents: {}\n")
        for line in (["validate"], ["docs", "--check"]):
            direct, parsed = _zmr(*line, cwd=project.root), _zmr("-C", ".", *line, cwd=project.root)
            assert (direct.returncode, direct.stdout, direct.stderr) == (parsed.returncode, parsed.stdout, parsed.stderr), (state, line)
            assert (direct.returncode == 0) == ((state, line[0]) == ("stale README", "validate")), (state, line, direct.returncode)
    # ZMR_UNTRUSTED, which an option reads, takes the parsed path: an upstream outside the repository is refused.
    (project.root / "manifests/bad.yaml").unlink()
    assert _zmr("validate", cwd=project.root).returncode == 0
    untrusted = _zmr("validate", cwd=project.root, env={"ZMR_UNTRUSTED": "1"})
    assert untrusted.returncode == 2 and "refused for untrusted manifests" in untrusted.stderr


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

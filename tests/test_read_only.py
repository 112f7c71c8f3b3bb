"""A read-only repository (#36): verify, diff, list, validate and status work; writing commands say why not.

Run as root (as the tests usually are), zmr runs as the unprivileged uid
65534 on a fixture owned by root, which permissions then really protect (they
stop no root process). Run as another user, the fixture is made read-only
with ``chmod -R a-w``. git refuses a repository another user owns ("dubious
ownership"): the runs name it in ``safe.directory`` through
``GIT_CONFIG_COUNT``, as a user sharing a read-only checkout does. As root,
a read-only bind mount (EROFS, which stops root too) is tried as well.
"""

from __future__ import annotations

import compileall
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import REPO_ROOT, git, make_project, make_upstream, simple_model, zmr

NOBODY = 65534
AS_ROOT = os.geteuid() == 0


@dataclass
class ReadOnly:
    """A built project nobody but its owner may write, and how to run zmr as someone else there."""

    base: Path
    project: Path
    upstream: Path
    home: Path
    cache: Path
    python: list[str]
    env: dict[str, str]

    def new_cache(self) -> Path:
        """An empty cache folder of the user zmr runs as."""
        folder = Path(tempfile.mkdtemp(prefix="cache-", dir=self.base))
        os.chmod(folder, 0o755)
        if AS_ROOT:
            os.chown(folder, NOBODY, NOBODY)
        return folder

    def run(
        self, *args: str, cache: Path | None = None, trust: bool = True, cwd: Path | None = None, env: dict | None = None
    ) -> subprocess.CompletedProcess[str]:
        full = {k: v for k, v in self.env.items() if not k.startswith("GIT_")}
        full.update(HOME=str(self.home), ZMR_CACHE=str(cache or self.cache))
        if trust:  # the repository, the checkout in it (a repository of its own), and the local upstream (git's upload-pack names its .git)
            trusted = [self.project, self.project / "work/toy/rollout", self.upstream / ".git"]
            full["GIT_CONFIG_COUNT"] = str(len(trusted))
            for n, path in enumerate(trusted):
                full.update({f"GIT_CONFIG_KEY_{n}": "safe.directory", f"GIT_CONFIG_VALUE_{n}": str(path)})
        full.update(env or {})
        drop = {"user": NOBODY, "group": NOBODY, "extra_groups": []} if AS_ROOT else {}
        return subprocess.run([*self.python, "-m", "zmr", *args], cwd=cwd or self.project, env=full, capture_output=True, text=True, timeout=300, **drop)


def _reachable_site(base: Path) -> Path:
    """zmr and the distributions it needs, copied into *base* (0755): this run's may lie in a folder uid 65534 cannot
    reach (a clone in ``mktemp -d``, a virtual environment under /root). Each distribution's own file list (RECORD)
    says what to copy; the base requirements and zmr's `evidence` extra are followed, no other extra."""
    from importlib import metadata

    from packaging.requirements import Requirement

    site = base / "site"
    shutil.copytree(REPO_ROOT / "zmr", site / "zmr", ignore=shutil.ignore_patterns("__pycache__"))
    wanted, seen = ["zmr"], set()
    while wanted:
        name = wanted.pop().lower().replace("_", "-")
        if name in seen:
            continue
        seen.add(name)
        dist = metadata.distribution(name)
        for file in dist.files or []:
            if file.parts[0] == ".." or (name == "zmr" and ".dist-info" not in file.parts[0]):
                continue  # scripts in bin/; zmr's editable finder (its source is copied above)
            source = Path(str(dist.locate_file(file)))
            if source.is_file():
                (site / file).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, site / file)
        extras = ("", "evidence") if name == "zmr" else ("",)  # zmr mismatch and locate: numpy, the evidence extra
        for line in dist.requires or []:
            requirement = Requirement(line)
            if requirement.marker is None or any(requirement.marker.evaluate({"extra": extra}) for extra in extras):
                wanted.append(requirement.name)
    # zmr's bytecode too, compiled once here (the distributions' is in their RECORD): uid 65534 may write none, and every
    # zmr it ran compiled zmr again (about 0.4 s of CPU a run).
    compileall.compile_dir(site / "zmr", quiet=1)
    for top, _dirs, files in os.walk(site):
        os.chmod(top, 0o755)
        for name in files:
            os.chmod(os.path.join(top, name), 0o644)
    return site


@dataclass(frozen=True)
class NobodysPython:
    """How uid 65534 runs zmr: the interpreter's command line, and the environment that makes zmr importable."""

    command: list[str]
    env: dict[str, str]


@pytest.fixture(scope="session")
def nobodys_python() -> Iterator[NobodysPython | None]:
    """Made once per run (the copy holds numpy); None when this run is not root or no interpreter is within reach."""
    if not AS_ROOT:
        yield None
        return
    base = Path(tempfile.mkdtemp(prefix="zmr-nobody-python-"))
    os.chmod(base, 0o755)
    try:
        env = {"PYTHONPATH": str(_reachable_site(base)), "PYTHONDONTWRITEBYTECODE": "1"}
        command = _python_for_nobody(env)
        yield None if command is None else NobodysPython(command, env)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _python_for_nobody(env: dict[str, str]) -> list[str] | None:
    """An interpreter uid 65534 can run with *env* (a copy of zmr and its dependencies on PYTHONPATH): this one, else
    the system's of the same version (a pyenv under /root is out of its reach). ``-S``: no site-packages but the copy."""
    probe = "import typer, yaml, rich, numpy, zmr.cli"
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for python in (sys.executable, f"/usr/bin/{version}", f"/usr/local/bin/{version}", shutil.which(version)):
        if python is None or not os.path.exists(python):
            continue
        try:
            proc = subprocess.run(
                [python, "-S", "-c", probe], env={**os.environ, **env}, capture_output=True, user=NOBODY, group=NOBODY, extra_groups=[], cwd="/"
            )
        except PermissionError:  # it lies in a folder uid 65534 cannot reach
            continue
        if proc.returncode == 0:
            return [python, "-S"]
    return None


def _snapshot(root: Path) -> dict[str, tuple[int, bytes | str]]:
    """Every path under *root* (git directory included): its mode and content (a link's target), to compare before and after."""
    seen: dict[str, tuple[int, bytes | str]] = {}
    for top, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(top, name)
            info = path.lstat()
            content: bytes | str = os.readlink(path) if stat.S_ISLNK(info.st_mode) else path.read_bytes() if stat.S_ISREG(info.st_mode) else b""
            seen[str(path.relative_to(root))] = (info.st_mode, content)
    return seen


@pytest.fixture
def read_only(nobodys_python: NobodysPython | None) -> Iterator[ReadOnly]:
    # Not under pytest's tmp_path: its folders are private to their owner (0700), and uid 65534 must reach the fixture.
    base = Path(tempfile.mkdtemp(prefix="zmr-read-only-"))
    os.chmod(base, 0o755)
    try:
        upstream = make_upstream(base / "upstream")
        project = make_project(base / "project")
        project.write(".gitignore", "/work/\n")
        simple_model(project, upstream)
        built = zmr("build", "toy", cwd=project.root)
        assert built.returncode == 0, built.stderr
        # A checkout with a commit not exported yet: what `zmr export` would write.
        checked_out = zmr("checkout", "toy", cwd=project.root)
        assert checked_out.returncode == 0, checked_out.stderr
        checkout = project.root / "work/toy/rollout"
        (checkout / "NOTES.md").write_text("a change to export\n")
        git("add", "NOTES.md", cwd=checkout)
        git("commit", "-q", "-m", "Add notes", cwd=checkout)
        # A drift that only `zmr build` mends: the branch one commit behind (the root commit of the release).
        git("update-ref", "refs/heads/rollout/toy", "rollout/toy~1", cwd=project.root)
        home, cache = base / "home", base / "cache"
        home.mkdir()
        cache.mkdir()
        env = dict(os.environ)
        env.pop("ZMR_REPO", None)
        if AS_ROOT:
            for mine in (home, cache):  # the user's own; the upstream stays root's, as the repository
                for top, dirs, files in os.walk(mine):
                    for name in [top, *(os.path.join(top, n) for n in dirs + files)]:
                        os.lchown(name, NOBODY, NOBODY)
            if nobodys_python is None:
                version = f"python{sys.version_info.major}.{sys.version_info.minor}"
                pytest.skip(f"no Python that uid {NOBODY} can run ({sys.executable} is out of its reach, and no {version} outside one)")
            python = nobodys_python.command
            env.update(nobodys_python.env)
        else:
            python = [sys.executable]
            subprocess.run(["chmod", "-R", "a-w", str(project.root)], check=True)
        yield ReadOnly(base, project.root, upstream.path, home, cache, python, env)
    finally:
        subprocess.run(["chmod", "-R", "u+w", str(base)], check=False)
        shutil.rmtree(base, ignore_errors=True)


def test_reading_commands_work_in_a_read_only_repository_and_write_nothing_there(read_only):
    before = _snapshot(read_only.project)
    verify = read_only.run("verify")
    assert verify.returncode == 1, verify.stderr  # the drift is found: the check ran
    assert "differs  rollout/toy" in verify.stdout and "zmr build toy" in verify.stderr, verify.stdout + verify.stderr
    assert "Traceback" not in verify.stderr
    for args in (["diff", "toy"], ["list"], ["validate"], ["status"], ["verify", "--json"]):
        result = read_only.run(*args)
        assert result.returncode == (1 if args[0] == "verify" else 0), (args, result.stderr)
        assert "Traceback" not in result.stderr and (args[0] == "verify" or "error" not in result.stderr), (args, result.stderr)
    assert read_only.run("list").stdout.count("rollout/toy") == 1
    assert _snapshot(read_only.project) == before


def test_an_interrupted_write_that_this_user_may_not_finish_is_a_warning_for_reading_commands(read_only):
    """The owner's zmr was killed mid-transaction: a reader is told, and reads; nothing is changed (the owner's next zmr finishes it)."""
    journals = read_only.project / ".git/zmr/transactions"
    if not AS_ROOT:
        subprocess.run(["chmod", "-R", "u+w", str(read_only.project / ".git")], check=True)
    journals.mkdir(parents=True, exist_ok=True)
    (journals / "new.json").write_text('{"version": 1, "phase": "staging", "dirs": [], "files": [], "remove": []}')
    (journals / "new.lock").write_bytes(b"")
    if not AS_ROOT:
        subprocess.run(["chmod", "-R", "a-w", str(read_only.project / ".git")], check=True)
    before = _snapshot(read_only.project)
    result = read_only.run("list")
    assert result.returncode == 0, result.stderr
    assert "zmr: warning: an interrupted zmr left a half-written change (new) that this user may not finish" in result.stderr, result.stderr
    assert "rollout/toy" in result.stdout and _snapshot(read_only.project) == before
    if not AS_ROOT:  # the owner, with the rights of an owner again
        subprocess.run(["chmod", "-R", "u+w", str(read_only.project)], check=True)
    assert zmr("list", cwd=read_only.project).returncode == 0 and not (journals / "new.json").exists()  # the owner's zmr: undone


WRITING = [
    ("build", ["build", "toy"]),
    ("checkout", ["checkout", "toy"]),
    ("export", ["export", "toy"]),
    ("rebase", ["rebase", "toy", "--onto", "main"]),
    ("update --apply", ["update", "toy", "--apply"]),
    ("new", ["new", "other", "-c", "comp=UPSTREAM@main"]),
    ("init", ["init"]),
    ("import", ["import", "rollout/toy", "--model", "imported"]),
]


def test_publish_from_a_read_only_repository_pushes_and_writes_nothing_there(read_only):
    """publish only reads the repository (it verifies, then pushes): from a read-only one, to a remote the user may write."""
    if not AS_ROOT:
        subprocess.run(["chmod", "-R", "u+w", str(read_only.project)], check=True)
    git("update-ref", "refs/heads/rollout/toy", "rollout/toy@{1}", cwd=read_only.project)  # the owner mends the drift
    if not AS_ROOT:
        subprocess.run(["chmod", "-R", "a-w", str(read_only.project)], check=True)
    assert read_only.run("verify").returncode == 0
    remote = read_only.new_cache() / "remote.git"
    _as_user(["git", "init", "-q", "--bare", str(remote)], read_only)
    before = _snapshot(read_only.project)
    published = read_only.run("publish", "toy", "--remote", str(remote))
    assert published.returncode == 0, published.stdout + published.stderr
    pushed = subprocess.run(["git", "-c", "safe.directory=*", "--git-dir", str(remote), "rev-parse", "refs/heads/rollout/toy"], capture_output=True, text=True)
    assert pushed.returncode == 0 and pushed.stdout.strip() == git("rev-parse", "rollout/toy", cwd=read_only.project).strip(), pushed.stderr
    assert _snapshot(read_only.project) == before


@pytest.mark.parametrize("args", [args for _, args in WRITING], ids=[name for name, _ in WRITING])
def test_writing_commands_refuse_a_read_only_repository_naming_the_path_and_what_to_do(read_only, args):
    before = _snapshot(read_only.project)
    args = [a.replace("UPSTREAM", str(read_only.upstream)) for a in args]
    result = read_only.run(*args)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr, result.stderr
    first = result.stderr.splitlines()[0]
    assert first.startswith(f"zmr: error: {read_only.project}/"), result.stderr
    assert "the repository is read-only for you" in first or "git cannot write there" in first, result.stderr
    assert f"git clone {read_only.project} FOLDER" in result.stderr or "make that folder writable" in result.stderr, result.stderr
    assert _snapshot(read_only.project) == before


def test_a_read_only_cache_is_an_error_that_names_it_and_zmr_cache(read_only):
    """The cache holds what verify computes: one zmr may not write is exit 2 naming it, and ZMR_CACHE elsewhere works."""
    theirs = read_only.base / "their-cache"
    theirs.mkdir(mode=0o555)  # also when this run owns it (not root): nobody may write it
    result = read_only.run("verify", cache=theirs)
    assert result.returncode == 2, result.stderr
    assert f"zmr: error: {theirs}/mirrors: Permission denied: zmr cannot write its cache there" in result.stderr, result.stderr
    assert "set ZMR_CACHE to a folder you can write" in result.stderr
    diff = read_only.run("diff", "toy", cache=theirs)
    assert diff.returncode == 2 and f"{theirs}/revisions: Permission denied: zmr cannot write its cache there" in diff.stderr, diff.stderr
    assert read_only.run("verify").returncode == 1  # the advice: a cache of one's own


def _advised(stderr: str, starting: str) -> list[str]:
    """The first command in backticks in *stderr* that starts with *starting*, as arguments: advice is run as printed, never retyped."""
    for command in re.findall(r"`([^`]+)`", stderr):
        if command.startswith(starting):
            return shlex.split(command)
    raise AssertionError(f"no `{starting}...` in the advice:\n{stderr}")


def _as_user(argv: list[str], read_only: ReadOnly, cwd: Path | None = None) -> None:
    """Run *argv* (git, as the advice says) as the user zmr runs as, with its HOME and none of the machine's git config."""
    env = {k: v for k, v in read_only.env.items() if not k.startswith("GIT_")}
    env.update(HOME=str(read_only.home), GIT_CONFIG_NOSYSTEM="1")
    drop = {"user": NOBODY, "group": NOBODY, "extra_groups": []} if AS_ROOT else {}
    subprocess.run(argv, env=env, cwd=cwd or read_only.base, check=True, capture_output=True, **drop)


@pytest.mark.skipif(not AS_ROOT, reason="a repository of another user needs two users: this run is not root, so the fixture is its own")
def test_another_users_repository_needs_safe_directory_and_the_advice_works(read_only):
    refused = read_only.run("verify", trust=False)
    assert refused.returncode == 2, refused.stderr
    assert f"{read_only.project}: the repository belongs to another user" in refused.stderr, refused.stderr
    # The advice for one run: its variables, as printed, with the command.
    one_run = re.search(r"for one run only: (GIT_CONFIG_COUNT=\S+ GIT_CONFIG_KEY_0=\S+ GIT_CONFIG_VALUE_0=\S+) zmr \.\.\.", refused.stderr)
    assert one_run, refused.stderr
    variables = dict(item.split("=", 1) for item in one_run.group(1).split())
    # Followed, zmr gets past the repository to the upstream (a local path of the same user): git's upload-pack refuses it the same way.
    upstream = read_only.run("verify", trust=False, env=variables)
    assert upstream.returncode == 2, upstream.stderr
    assert f"{read_only.upstream}/.git: the repository belongs to another user" in upstream.stderr, upstream.stderr
    # The lasting form of the advice, for both: the user's global git config (zmr gives it to that upload-pack too).
    for stderr in (refused.stderr, upstream.stderr):
        _as_user(_advised(stderr, "git config --global --add safe.directory"), read_only)
    followed = read_only.run("verify", trust=False, cache=read_only.new_cache())  # a cache that fetches from the upstream
    assert followed.returncode == 1 and "differs" in followed.stdout, followed.stderr


def test_the_advice_of_a_refused_write_works_a_clone_of_ones_own_builds(read_only):
    refused = read_only.run("build", "toy")
    assert refused.returncode == 2, refused.stderr
    mine = read_only.new_cache() / "mine"  # a folder of the user's own (new_cache makes one)
    if AS_ROOT:  # plain git clones another user's repository once the user trusts it (the advice above)
        _as_user(["git", "config", "--global", "--add", "safe.directory", f"{read_only.project}/.git"], read_only)
    clone = _advised(refused.stderr, "git clone")
    assert clone[-1] == "FOLDER", clone
    _as_user([*clone[:-1], str(mine)], read_only)
    built = read_only.run("build", "toy", cwd=mine)
    assert built.returncode == 0, built.stderr
    assert read_only.run("verify", cwd=mine).returncode == 0


def test_a_repository_on_a_read_only_mount_reads_and_refuses_writes(tmp_path, project, upstream):
    """A read-only bind mount refuses root too (EROFS): reading commands work, writing ones say so, and advise no owner who could."""
    simple_model(project, upstream)
    assert zmr("build", "toy", cwd=project.root).returncode == 0
    git("update-ref", "refs/heads/rollout/toy", "rollout/toy~1", cwd=project.root)
    mounted = tmp_path / "mounted"
    mounted.mkdir()
    if not AS_ROOT:
        pytest.skip("a read-only bind mount needs root (this run is not root); the chmod -R a-w tests above cover the same code")
    bound = subprocess.run(["mount", "--bind", str(project.root), str(mounted)], capture_output=True, text=True, check=False)
    if bound.returncode != 0:
        pytest.skip(f"mount --bind is not permitted here ({bound.stderr.strip()}); the tests above cover the same code as another user")
    try:
        remount = subprocess.run(["mount", "-o", "remount,bind,ro", str(mounted)], capture_output=True, text=True, check=False)
        assert remount.returncode == 0, remount.stderr
        before = _snapshot(project.root)
        verify = zmr("verify", cwd=mounted)
        assert verify.returncode == 1 and "differs  rollout/toy" in verify.stdout, verify.stderr
        for args in (["diff", "toy"], ["list"], ["validate"], ["status"]):
            assert zmr(*args, cwd=mounted).returncode == 0, args
        for args in (["build", "toy"], ["new", "other", "-c", f"comp={upstream.path}@main"]):
            result = zmr(*args, cwd=mounted)
            assert result.returncode == 2, result.stderr
            first = result.stderr.splitlines()[0]
            assert first.startswith(f"zmr: error: {mounted}/.git/zmr/"), first
            assert first.endswith("Read-only file system: the repository is on a read-only file system"), first
            assert f"`git clone {mounted} FOLDER`, then in FOLDER)" in result.stderr and "the user who owns" not in result.stderr, result.stderr
        assert _snapshot(project.root) == before
    finally:
        subprocess.run(["umount", str(mounted)], check=False)

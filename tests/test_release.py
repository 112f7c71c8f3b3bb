"""A release (scripts/release) and what tells one from a development build (`zmr.model.source.version()`), in a repository the
test builds from zmr's own files; and the lock the action installs from (action/requirements.txt, scripts/lock-action).
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from conftest import REPO_ROOT, git, simple_model, state_dir, zmr

try:
    import tomllib
except ImportError:  # Python 3.10
    from pip._vendor import tomli as tomllib  # type: ignore[no-redef]
try:
    from packaging.markers import Marker
    from packaging.requirements import Requirement
except ImportError:
    from pip._vendor.packaging.markers import Marker  # type: ignore[no-redef]
    from pip._vendor.packaging.requirements import Requirement  # type: ignore[no-redef]

DATE_ENV = {"GIT_AUTHOR_DATE": "2026-12-01T12:00:00+00:00", "GIT_COMMITTER_DATE": "2026-12-01T12:00:00+00:00"}
FILES = ["zmr", "scripts/release", "scripts/lock-action", "pyproject.toml", "CHANGELOG.md", "action/requirements.txt"]


def _zmr_repository(path: Path) -> Path:
    """A git repository with zmr's own files that a release touches (its package, the scripts, CHANGELOG, the lock)."""
    for name in FILES:
        source, target = REPO_ROOT / name, path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, target)
    init = path / "zmr" / "__init__.py"  # the state of a repository between releases, whatever this one's is now
    init.write_text(re.sub(r'^__version__ = ".*"$', '__version__ = "0.2.0.dev0"', init.read_text(), count=1, flags=re.M))
    changelog = path / "CHANGELOG.md"
    changelog.write_text(re.sub(r"^## .*$", "## 0.2.0 (unreleased)\n\n- What changed.\n\n## 0.1.0 (2026-01-05)", changelog.read_text(), count=1, flags=re.M))
    git("init", "-q", "-b", "main", cwd=path)
    git("add", "-A", cwd=path)
    git("commit", "-q", "-m", "zmr", cwd=path, env=DATE_ENV)
    return path


def _release(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")} | {
        "GIT_AUTHOR_NAME": "Maintainer",
        "GIT_AUTHOR_EMAIL": "maintainer@zmr.invalid",
        "GIT_COMMITTER_NAME": "Maintainer",
        "GIT_COMMITTER_EMAIL": "maintainer@zmr.invalid",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_CONFIG_NOSYSTEM": "1",
    }
    return subprocess.run([sys.executable, str(repo / "scripts" / "release"), *args], cwd=repo, env=env, capture_output=True, text=True, timeout=120)


def _version(repo: Path) -> tuple[str, str]:
    """What `zmr --version` and the `zmr` key of a `--json` output say when zmr runs from *repo*'s files.

    Without bytecode: the release rewrites `__version__` in place (the same size, within the same second), which a cached
    .pyc, checked by size and whole-second mtime, would not notice (conftest caches bytecode for the run)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPYCACHEPREFIX"} | {"PYTHONDONTWRITEBYTECODE": "1"}
    version = subprocess.run([sys.executable, "-m", "zmr", "--version"], cwd=repo, env=env, capture_output=True, text=True, timeout=60)
    assert version.returncode == 0, version.stderr
    # a --json error (no project in an empty folder) prints the envelope, as every --json output does
    empty = repo.parent / "no-project"
    empty.mkdir(exist_ok=True)
    key = subprocess.run([sys.executable, "-m", "zmr", "-C", str(empty), "list", "--json"], cwd=repo, env=env, capture_output=True, text=True, timeout=60)
    assert key.returncode == 2, key.stderr
    return version.stdout.strip(), json.loads(key.stdout)["zmr"]


def _field(repo: Path, rev: str, path: str, pattern: str) -> str:
    match = re.search(pattern, git("show", f"{rev}:{path}", cwd=repo), re.M)
    assert match, (rev, path, pattern)
    return match.group(1)


def test_a_release_is_a_tagged_commit_that_the_next_commit_names(tmp_path):
    repo = _zmr_repository(tmp_path / "zmr")
    lock = tmp_path / "requirements.txt"
    shutil.copy(REPO_ROOT / "action" / "requirements.txt", lock)
    lock.write_text(lock.read_text() + "# locked for this release\n")
    previous = _field(repo, "HEAD", "zmr/model/source.py", r'^RELEASED_COMMIT = "([0-9a-f]{40})"$')
    first = git("rev-parse", "HEAD", cwd=repo)[:12]
    assert _version(repo) == (f"zmr 0.2.0.dev0+g{first}", f"0.2.0.dev0+g{first}")

    released = _release(repo, "0.2.0", "--date", "2026-12-07", "--lock", str(lock))
    assert released.returncode == 0, released.stderr
    tag = git("rev-parse", "v0.2.0^{commit}", cwd=repo)
    assert git("cat-file", "-t", "v0.2.0", cwd=repo) == "tag"  # annotated
    assert git("rev-parse", "HEAD~1", cwd=repo) == tag and git("rev-parse", "HEAD~2", cwd=repo) != tag
    # The release commit: the version, the dated CHANGELOG section, the lock.
    assert _field(repo, tag, "zmr/__init__.py", r'^__version__ = "(.*)"$') == "0.2.0"
    at_tag = git("show", f"{tag}:CHANGELOG.md", cwd=repo)
    assert "## 0.2.0 (2026-12-07)\n\n- What changed." in at_tag and "(unreleased)" not in at_tag and "## Unreleased" not in at_tag
    assert git("show", f"{tag}:action/requirements.txt", cwd=repo) == lock.read_text().strip()
    assert _field(repo, tag, "zmr/model/source.py", r'^RELEASED_COMMIT = "([0-9a-f]{40})"$') == previous  # a commit cannot name itself
    # The commit after it names it, and is the next development version with an empty unreleased section.
    assert _field(repo, "HEAD", "zmr/model/source.py", r'^RELEASED_COMMIT = "([0-9a-f]{40})"$') == tag
    assert _field(repo, "HEAD", "zmr/__init__.py", r'^__version__ = "(.*)"$') == "0.2.1.dev0"
    assert git("show", "HEAD:CHANGELOG.md", cwd=repo).count("## Unreleased\n\n## 0.2.0 (2026-12-07)\n") == 1
    assert git("status", "--porcelain", cwd=repo) == ""
    # The date is the release's, never the clock: the commits and the tag carry it.
    assert set(git("log", "-2", "--format=%aI %cI", cwd=repo).split()) == {"2026-12-07T00:00:00+00:00"}
    assert "2026-12-07 00:00:00 +0000" in git("for-each-ref", "--format=%(taggerdate:iso)", "refs/tags/v0.2.0", cwd=repo)
    # ... so the same tree, date and author give the same release commit.
    again = _zmr_repository(tmp_path / "again")
    assert _release(again, "0.2.0", "--date", "2026-12-07", "--lock", str(lock)).returncode == 0
    assert git("rev-parse", "v0.2.0^{commit}", "HEAD", cwd=again) == git("rev-parse", "v0.2.0^{commit}", "HEAD", cwd=repo)

    # --version and the JSON key: the release exactly at its tag, a development build (and its commit) elsewhere.
    head = git("rev-parse", "HEAD", cwd=repo)
    assert _version(repo) == (f"zmr 0.2.1.dev0+g{head[:12]}", f"0.2.1.dev0+g{head[:12]}")
    git("checkout", "-q", "v0.2.0", cwd=repo)
    assert _version(repo) == ("zmr 0.2.0", "0.2.0")
    git("commit", "-q", "--allow-empty", "-m", "on top of the release", cwd=repo, env=DATE_ENV)
    on_top = git("rev-parse", "HEAD", cwd=repo)
    assert _version(repo) == (f"zmr 0.2.0+g{on_top[:12]}", f"0.2.0+g{on_top[:12]}")
    git("checkout", "-q", "main", cwd=repo)
    git("commit", "-q", "--allow-empty", "-m", "one more", cwd=repo, env=DATE_ENV)
    more = git("rev-parse", "HEAD", cwd=repo)
    assert _version(repo) == (f"zmr 0.2.1.dev0+g{more[:12]}", f"0.2.1.dev0+g{more[:12]}")


def test_the_release_script_refuses_naming_every_problem_and_writes_nothing(tmp_path):
    repo = _zmr_repository(tmp_path / "zmr")
    head = git("rev-parse", "HEAD", cwd=repo)
    (repo / "stray.txt").write_text("x\n")
    git("tag", "-a", "v0.2.0", "-m", "someone's", cwd=repo)
    refused = _release(repo, "0.2.0", "--date", "2026-12-7", "--lock", str(REPO_ROOT / "action" / "requirements.txt"))
    assert refused.returncode == 2
    assert "the tree has changes or untracked files" in refused.stderr and "stray.txt" in refused.stderr
    assert "tag v0.2.0 exists already" in refused.stderr and "--date '2026-12-7' is not a date" in refused.stderr
    not_greater = _release(repo, "0.1.9", "--date", "2026-12-07")
    assert "0.1.9 is not greater than the current version 0.2.0.dev0" in not_greater.stderr and not_greater.returncode == 2
    other = _release(repo, "0.3.0", "--date", "2026-12-07")
    assert "the unreleased section is for 0.2.0, not 0.3.0" in other.stderr
    (repo / "stray.txt").unlink()
    changelog = repo / "CHANGELOG.md"
    changelog.write_text(changelog.read_text().replace("## 0.2.0 (unreleased)", "## 0.2.0"))
    git("commit", "-q", "-am", "no unreleased section", cwd=repo, env=DATE_ENV)
    missing = _release(repo, "0.2.1", "--date", "2026-12-07")
    assert missing.returncode == 2 and "CHANGELOG.md: no unreleased section" in missing.stderr
    assert git("rev-parse", "HEAD~1", cwd=repo) == head and git("status", "--porcelain", cwd=repo) == ""
    assert git("tag", cwd=repo) == "v0.2.0"


def test_a_release_stopped_half_way_says_how_to_start_again_and_that_works(tmp_path):
    """A commit hook refuses the release commit after the files are written: the script says how to go back, and
    following it literally leaves the repository as it was."""
    repo = _zmr_repository(tmp_path / "zmr")
    head = git("rev-parse", "HEAD", cwd=repo)
    hook = repo / ".git" / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\necho 'hook: no' >&2\nexit 1\n")
    hook.chmod(0o755)
    stopped = _release(repo, "0.2.0", "--date", "2026-12-07", "--lock", str(REPO_ROOT / "action" / "requirements.txt"))
    assert stopped.returncode != 0 and "hook: no" in stopped.stderr
    advice = re.search(r"to start again from where it began: (.*)$", stopped.stderr, re.M)
    assert advice and git("status", "--porcelain", cwd=repo) != ""
    subprocess.run(advice.group(1), shell=True, cwd=repo, check=True)
    assert git("rev-parse", "HEAD", cwd=repo) == head and git("status", "--porcelain", cwd=repo) == "" and git("tag", cwd=repo) == ""


def test_what_zmr_builds_does_not_depend_on_its_version(project, upstream, monkeypatch):
    """What zmr builds is the same whichever version builds it: its version is in no commit id or patch byte."""
    import zmr as zmr_package
    from zmr.model.source import version

    simple_model(project, upstream)
    assert zmr("build", "toy", cwd=project.root).returncode == 0
    tips = {ref: project.ref(ref) for ref in ("refs/heads/rollout/toy",)}
    for ref in tips:
        git("update-ref", "-d", ref, cwd=project.root)
    shutil.rmtree(state_dir(project.root))  # nothing kept from the first build: the second computes every id again
    monkeypatch.setattr(zmr_package, "__version__", "9.9.9")
    version.cache_clear()
    try:
        assert version() == "9.9.9" or version().startswith("9.9.9+g")
        assert zmr("build", "toy", cwd=project.root).returncode == 0
    finally:
        version.cache_clear()
    assert {ref: project.ref(ref) for ref in tips} == tips and None not in tips.values()


def _lock_action():
    """scripts/lock-action as a module (a script: no .py)."""
    loader = importlib.machinery.SourceFileLoader("lock_action", str(REPO_ROOT / "scripts" / "lock-action"))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader("lock_action", loader))
    loader.exec_module(module)
    return module


def _lock_entries(text: str) -> list[tuple[Requirement, list[str]]]:
    entries = []
    for logical in text.replace("\\\n", " ").splitlines():
        if not logical.strip() or logical.startswith("#"):
            continue
        requirement, *hashes = logical.split("--hash=")
        entries.append((Requirement(requirement.strip()), [h.strip() for h in hashes]))
    return entries


def test_the_action_installs_a_lock_that_pins_every_dependency_with_the_hashes_of_its_wheels():
    """action/requirements.txt: on each supported Python, every runtime dependency and the build backend pinned to a
    version its range allows, each with sha256 hashes; the action installs it with --require-hashes and no index
    resolution, and zmr after it from no index."""
    data = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    lock = (REPO_ROOT / "action" / "requirements.txt").read_text()
    entries = _lock_entries(lock)
    assert entries
    for requirement, hashes in entries:
        (specifier,) = requirement.specifier
        assert specifier.operator == "==" and hashes and all(re.fullmatch(r"sha256:[0-9a-f]{64}", h) for h in hashes), requirement
    lock_action = _lock_action()
    pythons = lock_action.supported_pythons(data)
    assert pythons[0] == data["project"]["requires-python"].removeprefix(">=") and len(pythons) >= 4
    for python in pythons:
        environment = {"python_version": python, "python_full_version": f"{python}.0"}
        locked = {}
        for requirement, _ in entries:
            if requirement.marker is None or requirement.marker.evaluate(environment):
                assert requirement.name not in locked, f"{requirement.name} twice on Python {python}"
                locked[requirement.name.lower().replace("_", "-")] = next(iter(requirement.specifier)).version
        for wanted in map(Requirement, lock_action.requirements(data)):
            if wanted.marker is None or wanted.marker.evaluate(environment):
                name = wanted.name.lower().replace("_", "-")
                assert name in locked and wanted.specifier.contains(locked[name], prereleases=True), (
                    f"Python {python}: {wanted} is {locked.get(name, 'missing')} in action/requirements.txt: run scripts/lock-action"
                )
    action = yaml.safe_load((REPO_ROOT / "action.yml").read_text())
    install = next(step for step in action["runs"]["steps"] if step.get("name") == "Install zmr")["run"]
    assert '--require-hashes --no-deps --only-binary :all: -r "$GITHUB_ACTION_PATH/action/requirements.txt"' in install
    assert '--no-deps --no-build-isolation --no-index "$spec"' in install


def test_lock_action_writes_one_pin_per_version_with_the_pythons_that_get_it():
    lock_action = _lock_action()
    resolved = {"3.10": {"a": "1.0", "tomli": "2.0"}, "3.11": {"a": "1.1"}}
    text = lock_action.render(resolved, {("a", "1.0"): ["0" * 64], ("a", "1.1"): ["1" * 64, "2" * 64], ("tomli", "2.0"): ["3" * 64]})
    entries = [(str(r), h) for r, h in _lock_entries(text)]
    assert entries == [
        ('a==1.0; python_version == "3.10"', ["sha256:" + "0" * 64]),
        ('a==1.1; python_version == "3.11"', ["sha256:" + "1" * 64, "sha256:" + "2" * 64]),
        ('tomli==2.0; python_version == "3.10"', ["sha256:" + "3" * 64]),
    ]
    assert lock_action.marker(["3.10", "3.11"], ["3.10", "3.11"]) == ""
    assert Marker(lock_action.marker(["3.10", "3.11", "3.12"], ["3.10", "3.12"]).removeprefix(" ; ")).evaluate({"python_version": "3.12"})


def test_the_version_of_this_checkout_names_its_commit_unless_it_is_the_release():
    from zmr import __version__
    from zmr.model.source import version

    if not (REPO_ROOT / ".git").exists():  # a copy of the files without their history: the version alone
        assert version() == __version__
        return
    head = git("rev-parse", "HEAD", cwd=REPO_ROOT)
    tagged = git("rev-parse", "-q", "--verify", f"refs/tags/v{__version__}^{{commit}}", cwd=REPO_ROOT, check=False)
    assert version() == (__version__ if tagged == head else f"{__version__}+g{head[:12]}")


def test_an_installed_development_build_names_the_commit_pip_recorded(tmp_path):
    """Installed by `pip install git+URL@REF`: no checkout, the commit from pip's record (PEP 610) beside the package;
    a release installed so says its version alone."""
    import json

    site = tmp_path / "site"
    shutil.copytree(REPO_ROOT / "zmr", site / "zmr", ignore=shutil.ignore_patterns("__pycache__"))
    commit = "0123456789abcdef0123456789abcdef01234567"
    record = {"url": "https://github.com/Inferact/zero-mismatch-rl", "vcs_info": {"vcs": "git", "commit_id": commit, "requested_revision": "main"}}
    init = site / "zmr" / "__init__.py"
    said = {}
    for version in ("0.2.1.dev0", "0.2.0"):
        init.write_text(re.sub(r'^__version__ = ".*"$', f'__version__ = "{version}"', init.read_text(), count=1, flags=re.M))
        info = site / f"zmr-{version}.dist-info"
        info.mkdir()
        (info / "direct_url.json").write_text(json.dumps(record))
        ran = subprocess.run([sys.executable, "-c", "from zmr.model.source import version, zmr_source; print(version(), *zmr_source())"], cwd=tmp_path,
                             env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(site)}, capture_output=True, text=True)  # fmt: skip
        assert ran.returncode == 0, ran.stderr
        said[version] = ran.stdout.split()
    assert said["0.2.1.dev0"] == [f"0.2.1.dev0+g{commit[:12]}", "https://github.com/Inferact/zero-mismatch-rl", commit]
    assert said["0.2.0"] == ["0.2.0", "https://github.com/Inferact/zero-mismatch-rl", commit]

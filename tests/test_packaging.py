"""What the package declares is what zmr imports: every third-party package zmr imports is a dependency or in an extra."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from packaging.version import Version

from conftest import REPO_ROOT

# The import name → the distribution that provides it, where the two differ.
DISTRIBUTION = {"yaml": "pyyaml"}
# The frameworks whose tensors the evidence adapters read, inside the user's own environment: never installed by zmr.
USERS_FRAMEWORKS = {"vllm", "megatron"}


def _imported_packages() -> set[str]:
    found: set[str] = set()
    for path in (REPO_ROOT / "zmr").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found |= {alias.name.partition(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.partition(".")[0])
    return {name for name in found if name not in sys.stdlib_module_names and name != "zmr"}


def _declared() -> dict[str, str]:
    """Distribution name → the requirement line (with its extra marker) from the installed zmr's metadata."""
    declared = {}
    for requirement in metadata.requires("zmr") or []:
        name = re.match(r"[A-Za-z0-9._-]+", requirement)
        assert name, requirement
        declared.setdefault(name.group(0).lower().replace("_", "-"), requirement)
    return declared


def test_every_imported_package_is_declared():
    imported = _imported_packages()
    assert {"typer", "rich", "yaml", "numpy"} <= imported  # the scan sees imports at all
    declared = _declared()
    missing = {name for name in imported - USERS_FRAMEWORKS if DISTRIBUTION.get(name, name) not in declared}
    assert not missing, f"imported by zmr/ but not declared in pyproject.toml: {sorted(missing)}"


def test_zmr_uses_typer_not_click():
    """typer 0.26+ carries its own copy of click and no longer depends on click: zmr imports only typer's API."""
    assert "click" not in _imported_packages()
    assert "click" not in _declared()



def test_the_linters_and_the_stubs_they_read_are_pinned():
    """.ci/run's ruff and mypy give the same findings on every run: each package of the `lint` extra, the PyYAML stubs
    mypy reads included (a new stubs release can add findings as a new mypy can), at one version."""
    lint = [line for line in metadata.requires("zmr") or [] if re.search(r"extra\s*==\s*[\"']lint[\"']", line)]
    assert {re.match(r"[A-Za-z0-9._-]+", line).group(0).lower() for line in lint} == {"ruff", "mypy", "types-pyyaml"}  # type: ignore[union-attr]
    unpinned = [line for line in lint if not re.match(r"[A-Za-z0-9._-]+==[0-9][0-9.]*;", line)]
    assert not unpinned, f"not pinned to one version (name==X): {unpinned}"


def test_one_version_a_license_and_py_typed():
    """The version is zmr.__version__ alone (pyproject reads it), LICENSE is Apache-2.0, py.typed ships, CHANGELOG names the version."""
    import zmr

    assert metadata.version("zmr") == zmr.__version__
    pyproject = (REPO_ROOT / "pyproject.toml").read_text()
    assert 'dynamic = ["version"]' in pyproject and '[tool.hatch.version]\npath = "zmr/__init__.py"' in pyproject
    assert not re.search(r"^version\s*=\s*\"", pyproject, re.M)  # no second number
    license_text = (REPO_ROOT / "LICENSE").read_text()
    assert "Apache License" in license_text and "Version 2.0, January 2004" in license_text and "END OF TERMS AND CONDITIONS" in license_text
    assert metadata.metadata("zmr")["License-Expression"] == "Apache-2.0"
    assert (REPO_ROOT / "zmr" / "py.typed").is_file()  # shipped: test_the_sdist_is_reproducible_and_ships_what_builds_zmr
    # A development version X.Y.Z.devN is the unreleased section's; a release's (scripts/release) has its date.
    changelog = (REPO_ROOT / "CHANGELOG.md").read_text()
    release = zmr.__version__.split(".dev")[0]
    if ".dev" in zmr.__version__:
        assert re.search(rf"^## (?:Unreleased|{re.escape(release)} \(unreleased\))$", changelog, re.M)
    else:
        assert re.search(rf"^## {re.escape(release)} \(\d{{4}}-\d\d-\d\d\)$", changelog, re.M)


# The first release of each dependency with a wheel for that Python (PyPI's files; an older one builds from source
# there and fails: PyYAML 6.0 has no cp312 wheel and no C compiler finds its headers, numpy 1.24 none past cp311).
FIRST_WHEELS = {"3.12": {"PyYAML": "6.0.1", "numpy": "1.26"}, "3.13": {"PyYAML": "6.0.2", "numpy": "2.1"}}


def _floors(python: str, *extras: str) -> dict[str, str]:
    result = subprocess.run(
        [sys.executable, str(REPO_ROOT / "scripts" / "dependency-floors"), "--python", python, *extras], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return dict(line.split("==") for line in result.stdout.splitlines())


def test_each_python_gets_floors_that_have_its_wheels():
    """scripts/dependency-floors honours the environment markers: each supported Python's floors install there."""
    oldest = _floors("3.10", "evidence")
    assert oldest == {"typer": oldest["typer"], "rich": oldest["rich"], "PyYAML": "6", "numpy": "1.24"}
    for python, first in FIRST_WHEELS.items():
        floors = _floors(python, "evidence")
        for name, version in first.items():
            assert Version(floors[name]) >= Version(version), (python, name, floors[name])
    assert "numpy" not in _floors("3.13")  # numpy comes with the `evidence` extra alone
    assert _floors("3.13", "demo")["numpy"] == "2.1"  # zmr[evidence] inside an extra is that extra's


def test_dependency_floors_refuses_what_it_cannot_pin():
    result = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "dependency-floors"), "no-such-extra"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 1 and "declares no extra 'no-such-extra'" in result.stderr


def test_ci_tests_the_floors_on_the_oldest_and_the_newest_python():
    run = (REPO_ROOT / ".ci" / "run").read_text()
    assert 'for minor in $(printf \'%s\\n\' "$floor" "$newest" | uniq); do' in run
    assert '"$venv/bin/python" scripts/dependency-floors evidence' in run  # the markers of the Python under test


def _runtime_distributions() -> set[str]:
    """zmr's runtime dependencies (no extra) and theirs, as installed here: what `pip install zmr` brings."""
    from packaging.requirements import Requirement

    found: set[str] = set()
    todo = ["zmr"]
    while todo:
        name = todo.pop()
        for line in metadata.requires(name) or []:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                key = requirement.name.lower().replace("_", "-")
                if key not in found:
                    found.add(key)
                    todo.append(requirement.name)
    return found


def _venv_without_extras(tmp_path: Path) -> Path:
    """A real venv holding zmr (the checkout, as `pip install -e .` puts it) and its runtime dependencies alone,
    linked from this environment's installed files: no extra, so no numpy."""
    import venv

    root = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False, symlinks=True).create(root)
    site = root / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    assert site.is_dir()
    (site / "zmr-checkout.pth").write_text(f"{REPO_ROOT}\n")
    for name in _runtime_distributions():
        distribution = metadata.distribution(name)
        for top in {Path(str(file)).parts[0] for file in distribution.files or []} - {"..", "__pycache__"}:
            source = Path(str(distribution.locate_file(top)))
            if source.exists() and not (site / top).exists():
                (site / top).symlink_to(source)
    return root


def test_without_the_evidence_extra_mismatch_and_locate_say_what_to_install(tmp_path):
    """numpy comes with the `evidence` extra alone; where it is missing, the CLI works and mismatch/locate exit 2 saying
    what to install; following that (numpy there) mismatch runs."""
    assert "numpy" not in _runtime_distributions()
    python = _venv_without_extras(tmp_path) / "bin" / "python"
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "PYTHONHOME")}

    def run(*args: str, cwd: Path = REPO_ROOT) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(python), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)

    assert run("-c", "import numpy").returncode == 1 and run("-c", "import zmr.cli, typer, yaml, rich").returncode == 0
    for args in (["--help"], ["list"], ["validate"], ["docs", "--check"], ["mismatch", "--help"], ["locate", "--help"]):
        result = run("-m", "zmr", *args)
        assert result.returncode == 0, (args, result.stderr)
    dump = '{"id": "a", "step": 0, "dtype": "float32", "tokens": [1, 2], "logprobs": [-0.5, -1.25]}\n'
    (tmp_path / "r.jsonl").write_text(dump)
    (tmp_path / "t.jsonl").write_text(dump)
    (tmp_path / "rollout").mkdir()
    (tmp_path / "trainer").mkdir()
    advice = f"install it there: {python} -m pip install numpy"
    for args in (["mismatch", "r.jsonl", "t.jsonl"], ["locate", "rollout", "trainer"]):
        result = run("-m", "zmr", *args, cwd=tmp_path)
        assert result.returncode == 2, (args, result.stdout, result.stderr)
        assert result.stderr.startswith("zmr: error: zmr mismatch and zmr locate read dumps with numpy, which is not installed"), result.stderr
        assert advice in result.stderr and "Traceback" not in result.stderr
    # What `pip install numpy` there does: numpy in that venv's site-packages (this environment's copy, linked).
    import numpy

    site = python.parent.parent / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    (site / "numpy").symlink_to(Path(numpy.__file__).parent)
    for extra in Path(numpy.__file__).parent.parent.glob("numpy.libs"):
        (site / extra.name).symlink_to(extra)
    result = run("-m", "zmr", "mismatch", "r.jsonl", "t.jsonl", "--check", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "bitwise equal" in result.stdout


def _sdist(source: Path, out: Path, env: dict[str, str] | None = None) -> Path:
    """The sdist of *source*, built by the build backend itself (what `python -m build --sdist` calls)."""
    code = "import sys; from hatchling.build import build_sdist; print(build_sdist(sys.argv[1]))"
    result = subprocess.run([sys.executable, "-c", code, str(out)], cwd=source, capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stderr
    return out / result.stdout.split()[-1]


def test_the_sdist_is_reproducible_and_ships_what_builds_zmr(tmp_path):
    """Three builds, one hash: from this checkout twice (the second in another time zone and locale) and from a copy
    whose files have other times and modes; SOURCE_DATE_EPOCH unset. It holds zmr/ (py.typed and templates with it),
    the license and the index page, and no tests: they need the whole repository, which a checkout of the tag has."""
    import hashlib
    import shutil
    import tarfile

    from conftest import git

    env = {k: v for k, v in os.environ.items() if k != "SOURCE_DATE_EPOCH"}
    first = _sdist(REPO_ROOT, tmp_path / "one", env)
    second = _sdist(REPO_ROOT, tmp_path / "two", {**env, "TZ": "Asia/Tokyo", "LC_ALL": "C.UTF-8"})
    copy = tmp_path / "copy"
    tracked = git("ls-files", "zmr", "pyproject.toml", "README.md", "LICENSE", "CHANGELOG.md", "docs/package-index.md", ".gitignore", "tests/conftest.py", cwd=REPO_ROOT)
    for name in tracked.splitlines():
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO_ROOT / name, copy / name)  # new times, default modes
        os.utime(copy / name, (1_000_000_000, 1_000_000_000))
    third = _sdist(copy, tmp_path / "three", env)
    digests = {hashlib.sha256(path.read_bytes()).hexdigest() for path in (first, second, third)}
    assert len(digests) == 1, digests
    with tarfile.open(first) as sdist:
        names = {member.name.split("/", 1)[1] for member in sdist.getmembers() if member.isfile()}
    zmr_files = {name for name in tracked.splitlines() if name.startswith("zmr/")}
    assert {"zmr/py.typed", "zmr/templates/workflow.yml.tmpl"} <= zmr_files
    assert names == zmr_files | {"pyproject.toml", "PKG-INFO", ".gitignore", "README.md", "LICENSE", "CHANGELOG.md", "docs/package-index.md"}
    assert not any(name.startswith("tests/") for name in names)
    # The wheel, built from that sdist as pip builds one: zmr/ whole (templates and py.typed with the modules).
    import zipfile

    with tarfile.open(first) as sdist:
        sdist.extractall(tmp_path / "unpacked", filter="data")  # filter: 3.10.12, 3.11.4 and later
    code = "import sys; from hatchling.build import build_wheel; print(build_wheel(sys.argv[1]))"
    unpacked = next((tmp_path / "unpacked").iterdir())
    built = subprocess.run([sys.executable, "-c", code, str(tmp_path / "wheel")], cwd=unpacked, capture_output=True, text=True, timeout=120, env=env)
    assert built.returncode == 0, built.stderr
    with zipfile.ZipFile(tmp_path / "wheel" / built.stdout.split()[-1]) as wheel:
        assert {name for name in wheel.namelist() if ".dist-info/" not in name} == zmr_files


def test_the_index_page_metadata():
    """Classifiers: the Pythons CI tests (scripts/supported-pythons) and POSIX alone (zmr imports fcntl); project URLs
    in zmr's repository; a long description whose links are absolute (an index page has no repository to be relative
    to) and name files that exist here."""
    from zmr.model.source import ZMR_SOURCE

    info = metadata.metadata("zmr")
    classifiers = info.get_all("Classifier") or []
    declared = sorted((c.rpartition(" :: ")[2] for c in classifiers if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)), key=Version)
    import pwd

    home = pwd.getpwuid(os.getuid()).pw_dir  # the user's pyenv, as .ci/run finds it (the tests' HOME is an empty folder)
    tested = subprocess.run([str(REPO_ROOT / "scripts" / "supported-pythons")], capture_output=True, text=True, timeout=60, env={**os.environ, "HOME": home})
    assert tested.returncode == 0, tested.stderr
    assert declared == [line.split()[0] for line in tested.stdout.splitlines()]
    assert info["Requires-Python"] == f">={declared[0]}"
    assert "Operating System :: POSIX" in classifiers and not any(c.startswith("Operating System :: Microsoft") for c in classifiers)
    assert "fcntl" in {
        alias.name for node in ast.walk(ast.parse((REPO_ROOT / "zmr" / "infra" / "lock.py").read_text())) if isinstance(node, ast.Import) for alias in node.names
    }
    urls = dict(url.split(", ", 1) for url in info.get_all("Project-URL") or [])
    assert {"Homepage", "Documentation", "Changelog", "Issues"} <= set(urls) and all(url.startswith(ZMR_SOURCE) for url in urls.values())
    description = info.get_payload() or ""  # type: ignore[attr-defined]
    assert info["Description-Content-Type"] == "text/markdown" and description.startswith("# zmr")
    links = re.findall(r"\]\(([^)\s]+)\)", description)
    assert links and all(link.startswith("https://") for link in links), links
    for link in links:
        if link.startswith(f"{ZMR_SOURCE}/blob/main/"):
            assert (REPO_ROOT / link.removeprefix(f"{ZMR_SOURCE}/blob/main/").partition("#")[0]).is_file(), link

"""A smoke test that fails for a missing package says which of zmr's extras installs it (`zmr smoke demo` without
`.[demo]` failed with "0 passed, 3 failed" and nothing more)."""

from __future__ import annotations

from conftest import simple_model, zmr
from zmr.smoke.runner import missing_extra


def test_a_missing_module_of_an_extra_names_the_extra(tmp_path):
    log = tmp_path / "test.log"
    log.write_text("Traceback (most recent call last):\n  File \"<string>\", line 1\nModuleNotFoundError: No module named 'torch'\n")
    assert missing_extra(log) == ["torch is not installed: it comes with zmr's extra demo (pip install -e '.[demo]' in zmr's checkout)"]
    log.write_text("ModuleNotFoundError: No module named 'matplotlib.pyplot'\nModuleNotFoundError: No module named 'nosuchpackage'\n")
    assert missing_extra(log) == [
        "matplotlib is not installed: it comes with zmr's extra plot (pip install -e '.[plot]' in zmr's checkout)",
        "nosuchpackage is not installed in the environment the test ran in",
    ]
    log.write_text("ModuleNotFoundError: No module named 'numpy'\n")  # in `evidence`, and in `demo` (zmr[evidence]) too
    assert missing_extra(log) == ["numpy is not installed: it comes with zmr's extra evidence (pip install -e '.[evidence]' in zmr's checkout)"]
    log.write_text("AssertionError\n")
    assert missing_extra(log) == []
    assert missing_extra(tmp_path / "no-such.log") == []


def test_smoke_says_what_is_not_installed(project, upstream):
    simple_model(project, upstream)
    manifest = project.root / "manifests" / "toy.yaml"
    manifest.write_text(manifest.read_text() + "    smoke:\n      - name: needs-a-package\n        run: python -c 'import zmr_no_such_package_xyz'\n")
    project.commit_all("a smoke test that needs a package")
    result = zmr("smoke", "toy", cwd=project.root)
    assert result.returncode == 1
    assert "note: zmr_no_such_package_xyz is not installed in the environment the test ran in" in result.stdout
    data = zmr("smoke", "toy", "--json", cwd=project.root)
    assert "zmr_no_such_package_xyz is not installed" in data.stdout

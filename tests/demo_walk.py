"""The demo's two upstreams at their pins, trees with some of the series applied, recorded and located.

Shared by tests/evidence/test_locate.py (the mechanism-at-a-time walk) and tests/test_skill.py (the skill's
drill and missing-fix tests): the upstream trees come from the bundles (`git archive` of the pin), a tree is
a copy of one with patches applied by `git apply`, and `record` runs scripts/demo_locate.py on a pair of
trees (torch on CPU, the default small model). tests/e2e/test_demo.py and test_demo_moe.py read the skill's decision
on the reports of their parallel and MoE runs through `skill_decide` and `locate_json`.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import shutil
import subprocess
from pathlib import Path
from typing import Sequence

from conftest import REPO_ROOT, git

COMPONENTS = ("rollout", "trainer")


def series(component: str, model: str = "demo") -> list[Path]:
    """The patch files of the series of *component* of *model* (the demo, or demo-moe), in apply order."""
    folder = REPO_ROOT / "patches" / model / component
    names = [ln.split()[0] for ln in (folder / "series").read_text().splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    return [folder / n for n in names]


def pin(component: str, model: str = "demo") -> str:
    """The commit of *component* in the manifest of *model*."""
    text = (REPO_ROOT / "manifests" / f"{model}.yaml").read_text()
    block = text[text.index(f"  {component}:") :]
    return block[block.index("commit:") + len("commit:") :].split()[0]


def upstream_trees(tmp_path: Path, model: str = "demo") -> dict[str, Path]:
    """Each component's upstream tree at the pin of *model*, unpacked from its bundle under *tmp_path*."""
    trees = {}
    for comp in COMPONENTS:
        clone = tmp_path / f"{comp}.git"
        if not clone.exists():
            git("clone", "-q", "--bare", str(REPO_ROOT / "upstreams" / f"toy-{comp}.bundle"), str(clone))
        tree = tmp_path / f"{comp}-{model}-upstream"
        tree.mkdir()
        proc = subprocess.run(["git", f"--git-dir={clone}", "archive", pin(comp, model)], capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", str(tree)], input=proc.stdout, check=True)
        trees[comp] = tree
    return trees


def tree_with(upstream: Path, patches: Sequence[Path], dest: Path) -> Path:
    """A copy of *upstream* at *dest* with *patches* applied, in the order given."""
    shutil.copytree(upstream, dest)
    if patches:
        git("apply", *map(str, patches), cwd=dest)
    return dest


def demo_locate():
    """scripts/demo_locate.py as a module (its `record`)."""
    spec = importlib.util.spec_from_file_location("demo_locate", REPO_ROOT / "scripts" / "demo_locate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def skill_decide():
    """skill/scripts/decide.py as a module: the skill's decision table (`load_table`) and the decision on a locate report (`decide`)."""
    spec = importlib.util.spec_from_file_location("skill_decide", REPO_ROOT / "skill" / "scripts" / "decide.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def locate_json(out: Path, rollout: str = "rollout", trainer: str = "trainer", name_map: str | None = "names.yaml") -> tuple[int, dict]:
    """`zmr locate OUT/rollout OUT/trainer --map OUT/names.yaml --json`, the real CLI in this process: (exit status, report)."""
    from zmr.cli import main

    buffer = io.StringIO()
    args = ["locate", str(out / rollout), str(out / trainer), *(["--map", str(out / name_map)] if name_map else []), "--json"]
    with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(io.StringIO()):
        code = main(args)
    return code, json.loads(buffer.getvalue())

"""The architecture of zmr/, read from the source with ast: no import cycles, no function over 100 lines, checkouts driven only from the zmr.checkout package, update takes from rebase only the stateful move."""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

ZMR = Path(__file__).resolve().parent.parent / "zmr"


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(ZMR.rglob("*.py")):
        parts = list(path.relative_to(ZMR.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _type_checking_only(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imported(tree: ast.AST, module: str, is_package: bool, modules: Iterable[str]) -> set[str]:
    """The zmr modules an import in *tree* can load at run time: also inside functions, not under ``if TYPE_CHECKING:``.

    ``from zmr import git`` imports the module ``zmr.git``; ``from zmr.git import run`` imports ``zmr.git`` too.
    """
    known = set(modules)
    package = module if is_package else module.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _type_checking_only(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in known)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            for alias in node.names:
                name = f"{base}.{alias.name}"
                if name in known:
                    found.add(name)
                elif base in known:
                    found.add(base)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    found.discard(module)
    return found


def import_graph() -> dict[str, set[str]]:
    """zmr module -> the zmr modules it imports."""
    modules = _modules()
    return {module: _imported(ast.parse(path.read_text(encoding="utf-8")), module, path.name == "__init__.py", modules) for module, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(graph[node]):
            if other not in index:
                connect(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                other = stack.pop()
                on_stack.discard(other)
                component.append(other)
                if other == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return found


def test_no_import_cycle_in_zmr():
    graph = import_graph()
    assert "zmr.build" in graph["zmr.cli.build"]  # imports inside functions count
    assert "zmr.git" in graph["zmr.project"] and "zmr" not in graph["zmr.project"]  # `from zmr import git` is zmr.git
    assert cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


MAX_FUNCTION_LINES = 100


def long_functions(root: Path, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """``path:line name (N lines)`` of every function or method under *root* longer than *limit* lines."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno is not None:
                lines = node.end_lineno - node.lineno + 1
                if lines > limit:
                    found.append(f"{path.relative_to(root.parent)}:{node.lineno} {node.name} ({lines} lines)")
    return found


def test_no_function_in_zmr_is_over_100_lines():
    assert long_functions(ZMR) == []


def test_the_length_check_finds_a_long_function(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "m.py").write_text("def short():\n    pass\n\n\ndef long():\n" + "    x = 1\n" * 101)
    assert long_functions(package) == ["pkg/m.py:5 long (102 lines)"]


# Git porcelain that changes a working tree, index or HEAD (the verbs an engineer's checkout is driven by).
PORCELAIN_VERBS = frozenset(
    {"cherry-pick", "commit", "reset", "checkout", "switch", "restore", "merge", "rebase", "revert", "am", "stash", "clean", "add", "rm", "mv", "pull"}
)
# The files git keeps in a git dir while such an operation is under way.
OPERATION_FILES = frozenset({"CHERRY_PICK_HEAD", "MERGE_HEAD", "REVERT_HEAD", "REBASE_HEAD", "BISECT_LOG", "rebase-merge", "rebase-apply"})
PORCELAIN_MODULES = ("checkout/", "git.py")  # the zmr.checkout package drives checkouts; zmr.git runs git


def porcelain_outside_checkout(root: Path) -> list[str]:
    """``path:line what`` of each use of working-tree porcelain in *root* outside the zmr/checkout/ package and zmr/git.py.

    Checked: a list literal whose first item is one of PORCELAIN_VERBS (a
    git argv such as ``["cherry-pick", commit]``, passed or kept in a
    variable: zmr writes every argv as a list; tuples such as the CLI's
    ``("checkout", command)`` table are not argv), and a string that is exactly one of
    OPERATION_FILES (``git_dir / "CHERRY_PICK_HEAD"``). Prose that names
    them (docstrings, messages) is not a match: it is never exactly such a
    string. zmr runs no such command on a repository of its own (the mirror
    and temporary indexes use plumbing), so any match drives a checkout.
    """
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel in PORCELAIN_MODULES or any(rel.startswith(m) for m in PORCELAIN_MODULES if m.endswith("/")):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            where = f"{path.relative_to(root.parent)}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.List) and node.elts:
                first = node.elts[0]
                if isinstance(first, ast.Constant) and first.value in PORCELAIN_VERBS:
                    found.append(f"{where} git {first.value}")
            elif isinstance(node, ast.Constant) and node.value in OPERATION_FILES:
                found.append(f"{where} {node.value}")
    return sorted(found)


def test_only_the_checkout_package_drives_a_checkout_with_git_porcelain():
    assert porcelain_outside_checkout(ZMR) == []


def test_the_porcelain_check_finds_porcelain_outside_checkout(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    driving = 'def go(co, c):\n    co.repo.run(["cherry-pick", c])\n    return (co.git_dir / "CHERRY_PICK_HEAD").exists()\n'
    (package / "rebase.py").write_text(
        driving + 'QUIT = ["reset", "--hard"]\nCOMMANDS = [("checkout", go)]\nNOTE = "a cherry-pick is in progress (CHERRY_PICK_HEAD)"\n'
    )
    (package / "checkout").mkdir()
    (package / "checkout" / "worktree.py").write_text(driving)  # the one package allowed to
    (package / "checkout.py").write_text(driving)  # a module named so is not the package
    (package / "mirror.py").write_text('def f(repo):\n    repo.run(["update-ref", "refs/x", "y"])\n    repo.run(["merge-base", "a", "b"])\n')
    assert porcelain_outside_checkout(package) == [
        "pkg/checkout.py:2 git cherry-pick",
        "pkg/checkout.py:3 CHERRY_PICK_HEAD",
        "pkg/rebase.py:2 git cherry-pick",
        "pkg/rebase.py:3 CHERRY_PICK_HEAD",
        "pkg/rebase.py:4 git reset",
    ]


def names_imported_from(path: Path, module: str) -> set[str]:
    """The names *path* takes from *module* (``from MODULE import NAME``, anywhere in it); ``*`` for the module itself.

    ``import zmr.rebase`` and ``from zmr import rebase`` give the whole module (``*``): any name can be used through it.
    """
    package, _, last = module.rpartition(".")
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module == module:
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module == package and any(alias.name == last for alias in node.names):
            found.add("*")
        elif isinstance(node, ast.Import) and any(alias.name == module for alias in node.names):
            found.add("*")
    return found


# What ``zmr update --apply`` needs of the stateful rebase; the read-only analysis comes from zmr.upstream.
UPDATE_FROM_REBASE = {"Outcome", "Stopped", "abort", "finishing_onto", "resume", "start"}


def test_update_takes_from_rebase_only_the_stateful_move():
    assert names_imported_from(ZMR / "update.py", "zmr.rebase") == UPDATE_FROM_REBASE
    assert "resolve_rev" in names_imported_from(ZMR / "update.py", "zmr.upstream")


def test_upstream_analysis_reaches_no_stateful_module():
    graph = import_graph()
    reached, todo = set(), ["zmr.upstream"]
    while todo:  # everything zmr.upstream loads, directly or through another module
        for other in graph[todo.pop()] - reached:
            reached.add(other)
            todo.append(other)
    assert "zmr.replay" in reached
    assert reached.isdisjoint({"zmr.rebase", "zmr.checkout", "zmr.transaction", "zmr.lock", "zmr.update"})
    assert not any(module.startswith("zmr.checkout.") for module in reached)


def test_the_import_reader_sees_every_way_to_take_a_module(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("from zmr.rebase import start, abort\n\ndef f():\n    from zmr.rebase import Outcome\n")
    assert names_imported_from(source, "zmr.rebase") == {"start", "abort", "Outcome"}
    source.write_text("from zmr import git, rebase\n")
    assert names_imported_from(source, "zmr.rebase") == {"*"}
    source.write_text("import zmr.rebase\n")
    assert names_imported_from(source, "zmr.rebase") == {"*"}

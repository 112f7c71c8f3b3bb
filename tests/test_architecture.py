"""The architecture of zmr/, read from the source with ast.

No import cycles (type-only imports count), no function over 100 lines,
layers (every module lives in a layer folder, and each folder imports only the
layers below it that ``LAYERS`` lists for it: zmr/infra/ < zmr/model/ < zmr/ops/
< the products < zmr/cli/; the products take only the core's public names),
checkouts driven only from the zmr.ops.checkout package, git argument lists only in
zmr/infra/git.py (and the checkout porcelain), update takes from rebase only the stateful move.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterable
from pathlib import Path

ZMR = Path(__file__).resolve().parent.parent / "zmr"


@functools.lru_cache(maxsize=None)
def _parsed(source: str) -> ast.Module:
    return ast.parse(source)


def parse(path: Path) -> ast.Module:
    """*path* parsed, once per content: every check reads the same files (the trees are only read)."""
    return _parsed(path.read_text(encoding="utf-8"))


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(ZMR.rglob("*.py")):
        parts = list(path.relative_to(ZMR.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _imported(tree: ast.AST, module: str, is_package: bool, modules: Iterable[str]) -> set[str]:
    """The zmr modules an import in *tree* names: also inside functions and under ``if TYPE_CHECKING:``.

    A cycle through a type-only import is still a cycle: the two modules
    know each other, and the import is one edit away from run time.

    ``from zmr.infra import git`` imports the module ``zmr.infra.git``; ``from zmr.infra.git import run`` imports ``zmr.infra.git`` too.
    """
    known = set(modules)
    package = module if is_package else module.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
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
    return {module: _imported(parse(path), module, path.name == "__init__.py", modules) for module, path in modules.items()}


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


KNOWN_CYCLES: list[list[str]] = []


def test_no_import_cycle_in_zmr():
    graph = import_graph()
    assert "zmr.ops.build" in graph["zmr.cli.build"]  # imports inside functions count
    assert "zmr.infra.git" in graph["zmr.model.project"] and "zmr.infra" not in graph["zmr.model.project"]  # `from zmr.infra import git` is zmr.infra.git
    assert "zmr.model.manifest" in graph["zmr.model.selection"]  # so do imports under `if TYPE_CHECKING:` (its only ones)
    assert cycles(graph) == KNOWN_CYCLES


def test_the_import_reader_counts_type_checking_imports(tmp_path):
    source = "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from zmr.b import B\n"
    assert _imported(ast.parse(source), "zmr.a", False, ["zmr.a", "zmr.b"]) == {"zmr.b"}


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


# The layers of zmr/, bottom up. Each is a folder; a module imports only from its own layer and the layers listed for it.
# The core: zmr/infra/ (git, files, locks, fault points, the mirrors, the journal) knows no project file; zmr/model/ (manifests,
# series, patch files, cases, zmr.yaml, the YAML engine) reads and checks them; zmr/ops/ (replay, build, checkout, export,
# rebase, update, diff, ...) does what the commands do. The products beside the ops; the CLI above them all;
# zmr/__main__.py only starts the CLI.
LAYERS: dict[str, tuple[str, ...]] = {
    "zmr.infra": (),
    "zmr.model": ("zmr.infra",),
    "zmr.ops": ("zmr.model", "zmr.infra"),
    "zmr.evidence": ("zmr.model", "zmr.infra"),
    "zmr.smoke": ("zmr.ops", "zmr.model", "zmr.infra"),
    "zmr.importing": ("zmr.ops", "zmr.model", "zmr.infra"),
    "zmr.cli": ("zmr.evidence", "zmr.smoke", "zmr.importing", "zmr.ops", "zmr.model", "zmr.infra"),
    "zmr.__main__": ("zmr.cli",),
}
CORE = ("zmr.infra", "zmr.model", "zmr.ops")
SUBPACKAGES = ("zmr.evidence", "zmr.smoke", "zmr.importing")  # the products
# No layer: the package's face (its version and the moved names; any layer may import it, it imports nothing of zmr) and the templates' data.
OUTSIDE = ("zmr", "zmr.templates")


def layer(module: str) -> str | None:
    """The layer (a key of LAYERS) *module* lives in, or None: a module in no layer folder."""
    for name in LAYERS:
        if module == name or module.startswith(name + "."):
            return name
    return None


def layering_problems(graph: dict[str, set[str]]) -> list[str]:
    """``a -> b: why`` for each import against LAYERS, and ``a: why`` for each module in no layer folder."""
    found = []
    for module in sorted(graph):
        here = layer(module)
        if here is None:
            if module not in OUTSIDE:
                found.append(f"{module}: in no layer folder (put it in one of {', '.join(LAYERS)})")
            elif graph[module]:
                found.append(f"{module}: imports {', '.join(sorted(graph[module]))} (it is imported by every layer, and imports nothing of zmr)")
            continue
        for other in sorted(graph[module]):
            there = layer(other)
            if there is None or there == here:
                continue  # the package's face, or a module of its own layer (the cycle check covers those)
            if there not in LAYERS[here]:
                allowed = ", ".join(LAYERS[here]) or "nothing of zmr"
                found.append(f"{module} -> {other}: {here} imports only {allowed}")
    return found


def private_names_taken(path: Path, module: str, modules: Iterable[str]) -> list[str]:
    """``line name`` of each private name (``_x``, not ``__x__``) *path* takes from a core module: imported, or read as ``module._x``."""
    known = set(modules)
    tree = parse(path)
    bound: dict[str, str] = {}  # local name -> core module
    found = []

    def private(name: str) -> bool:
        return name.startswith("_") and not name.endswith("__")

    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                target = f"{node.module}.{alias.name}"
                if target in known and layer(target) in CORE:
                    bound[alias.asname or alias.name] = target
                    if private(alias.name):
                        found.append(f"{node.lineno} {target}")
                elif node.module in known and layer(node.module) in CORE and private(alias.name):
                    found.append(f"{node.lineno} {node.module}.{alias.name}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in known and layer(alias.name) in CORE and any(private(part) for part in alias.name.split(".")):
                    found.append(f"{node.lineno} {alias.name}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in bound and private(node.attr):
            found.append(f"{node.lineno} {bound[node.value.id]}.{node.attr}")
    return sorted(found)


def test_every_import_goes_down_the_layers_and_every_module_lives_in_a_layer_folder():
    graph = import_graph()
    assert layer("zmr.evidence.dumps.bits") == "zmr.evidence" and layer("zmr.cli.build") == "zmr.cli" and layer("zmr.ops.build") == "zmr.ops"
    assert layer("zmr.ops.checkout.merge") == "zmr.ops" and layer("zmr.infrastructure") is None
    assert {layer(module) for module in graph} == {*LAYERS, None}  # every layer holds modules
    assert [module for module in graph if layer(module) is None] == sorted(OUTSIDE)
    assert layering_problems(graph) == []


def test_the_layer_check_finds_wrong_arrows_and_flat_modules():
    graph = {
        "zmr": set(),
        "zmr.ops.build": {"zmr.infra.git", "zmr.evidence.locate", "zmr.ops.replay", "zmr"},
        "zmr.infra.git": {"zmr.cli.render"},
        "zmr.infra.cache": {"zmr.model.manifest"},
        "zmr.model.series": {"zmr.infra.files", "zmr.ops.replay"},
        "zmr.smoke.runner": {"zmr.ops.build", "zmr.importing.findbase"},
        "zmr.cli.build": {"zmr.ops.build", "zmr.smoke.runner"},
        "zmr.__main__": {"zmr.cli"},
        "zmr.landed": {"zmr.infra.git"},
        "zmr.templates": {"zmr.ops.new"},
    }
    assert layering_problems(graph) == [
        "zmr.infra.cache -> zmr.model.manifest: zmr.infra imports only nothing of zmr",
        "zmr.infra.git -> zmr.cli.render: zmr.infra imports only nothing of zmr",
        "zmr.landed: in no layer folder (put it in one of zmr.infra, zmr.model, zmr.ops, zmr.evidence, zmr.smoke, zmr.importing, zmr.cli, zmr.__main__)",
        "zmr.model.series -> zmr.ops.replay: zmr.model imports only zmr.infra",
        "zmr.ops.build -> zmr.evidence.locate: zmr.ops imports only zmr.model, zmr.infra",
        "zmr.smoke.runner -> zmr.importing.findbase: zmr.smoke imports only zmr.ops, zmr.model, zmr.infra",
        "zmr.templates: imports zmr.ops.new (it is imported by every layer, and imports nothing of zmr)",
    ]


def test_subpackages_take_only_public_names_from_the_core():
    modules = _modules()
    found = {
        module: taken for module, path in modules.items() if layer(module) in SUBPACKAGES for taken in [private_names_taken(path, module, modules)] if taken
    }
    assert found == {}


def test_the_private_name_check_finds_private_names(tmp_path):
    source = tmp_path / "m.py"
    source.write_text(
        "from zmr.infra.git import _environment, run\n"
        "from zmr.infra import files, git\n"
        "from zmr.evidence.dumps import _private_to_evidence\n"
        "def f():\n"
        "    files.atomic_write\n"
        "    return git._subcommand, git.__name__\n"
    )
    modules = ["zmr", "zmr.infra.git", "zmr.infra.files", "zmr.evidence.dumps"]
    assert private_names_taken(source, "zmr.evidence.m", modules) == ["1 zmr.infra.git._environment", "6 zmr.infra.git._subcommand"]


MAX_FUNCTION_LINES = 100


def long_functions(root: Path, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """``path:line name (N lines)`` of every function or method under *root* longer than *limit* lines."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(parse(path)):
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
PORCELAIN_MODULES = ("ops/checkout/", "infra/git.py")  # the zmr.ops.checkout package drives checkouts; zmr.infra.git runs git


def porcelain_outside_checkout(root: Path) -> list[str]:
    """``path:line what`` of each use of working-tree porcelain in *root* outside the zmr/ops/checkout/ package and zmr/infra/git.py.

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
        for node in ast.walk(parse(path)):
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
    (package / "ops" / "checkout").mkdir(parents=True)
    (package / "ops" / "checkout" / "worktree.py").write_text(driving)  # the one package allowed to
    (package / "checkout.py").write_text(driving)  # a module named so is not the package
    (package / "mirror.py").write_text('def f(repo):\n    repo.run(["update-ref", "refs/x", "y"])\n    repo.run(["merge-base", "a", "b"])\n')
    assert porcelain_outside_checkout(package) == [
        "pkg/checkout.py:2 git cherry-pick",
        "pkg/checkout.py:3 CHERRY_PICK_HEAD",
        "pkg/rebase.py:2 git cherry-pick",
        "pkg/rebase.py:3 CHERRY_PICK_HEAD",
        "pkg/rebase.py:4 git reset",
    ]


# The commands of git (``git --list-cmds=main`` of git 2.39): the first word of a git argument list.
GIT_COMMANDS = frozenset(
    (
        "add am annotate apply archive bisect blame branch bugreport bundle cat-file check-attr check-ignore check-mailmap check-ref-format checkout "
        "checkout-index cherry cherry-pick clean clone column commit commit-graph commit-tree config count-objects credential credential-cache "
        "credential-store daemon describe diagnose diff diff-files diff-index diff-tree difftool fast-export fast-import fetch fetch-pack "
        "filter-branch fmt-merge-msg for-each-ref for-each-repo format-patch fsck fsck-objects gc get-tar-commit-id grep hash-object help hook "
        "http-backend http-fetch http-push imap-send index-pack init init-db instaweb interpret-trailers log ls-files ls-remote ls-tree mailinfo "
        "mailsplit maintenance merge merge-base merge-file merge-index merge-octopus merge-one-file merge-ours merge-recursive merge-recursive-ours "
        "merge-recursive-theirs merge-resolve merge-subtree merge-tree mergetool mktag mktree multi-pack-index mv name-rev notes pack-objects "
        "pack-redundant pack-refs patch-id pickaxe prune prune-packed pull push quiltimport range-diff read-tree rebase receive-pack reflog remote "
        "repack replace request-pull rerere reset restore rev-list rev-parse revert rm send-pack shell shortlog show show-branch show-index show-ref "
        "sparse-checkout stage stash status stripspace submodule subtree switch symbolic-ref tag unpack-file unpack-objects update-index update-ref "
        "update-server-info upload-archive upload-pack var verify-commit verify-pack verify-tag whatchanged worktree write-tree"
    ).split()
)


def _git_command(node: ast.List) -> str | None:
    """The git command *node* runs when it is a git argument list: its first item that is neither an option nor unpacked (``*args``)."""
    option_value = False
    for item in node.elts:
        if isinstance(item, ast.Starred):
            continue
        if not (isinstance(item, ast.Constant) and isinstance(item.value, str)):
            return None
        if option_value:
            option_value = False
        elif item.value in ("-c", "-C"):
            option_value = True  # -c key=value, -C folder: the value is no command
        elif not item.value.startswith("-"):
            return item.value if item.value in GIT_COMMANDS else None
    return None


def _allowed_to_run_git(rel: str) -> bool:
    """zmr/infra/git.py runs git; the package zmr/ops/checkout/ drives an engineer's checkout with porcelain."""
    return rel == "infra/git.py" or rel.startswith("ops/checkout/")


def git_argv_outside_git(root: Path) -> list[str]:
    """``path:line git COMMAND`` of each git argument list in *root* outside zmr/infra/git.py and the checkout porcelain.

    A git argument list is a list literal whose first item that is neither
    an option nor unpacked is a git command (``["rev-parse", rev]``,
    ``[*config, "diff-tree", *args]``). A one-item list counts only where it
    is passed to a call: ``["apply"]`` as a column of a table is no argv.
    Everything else asks ``git.Repo`` (or ``git.init_bare``), whose methods
    are named after what they do.
    """
    found = []
    for path in sorted(root.rglob("*.py")):
        if _allowed_to_run_git(path.relative_to(root).as_posix()):
            continue
        tree = parse(path)
        passed = {id(arg) for node in ast.walk(tree) if isinstance(node, ast.Call) for arg in [*node.args, *(k.value for k in node.keywords)]}
        for node in ast.walk(tree):
            if isinstance(node, ast.List):
                command = _git_command(node)
                if command is not None and (len(node.elts) > 1 or id(node) in passed):
                    found.append(f"{path.relative_to(root.parent)}:{node.lineno} git {command}")
    return sorted(found)


def test_only_git_py_and_the_checkout_porcelain_spell_out_git_arguments():
    assert git_argv_outside_git(ZMR) == []


def test_the_git_argv_check_finds_an_argument_list(tmp_path):
    package = tmp_path / "pkg"
    (package / "ops" / "checkout").mkdir(parents=True)
    (package / "infra").mkdir()
    (package / "project.py").write_text(
        "def f(repo, key, args, config):\n"
        '    repo.run(["config", "--get", key], check=False)\n'
        '    argv = ["update-ref", "refs/x", "y"]\n'
        '    repo.out([*config, "diff-tree", *args])\n'
        '    repo.run(["-c", "core.x=y", "write-tree"])\n'
        '    repo.ok(["prune"])\n'
        "    return argv\n"
    )
    (package / "report.py").write_text(
        'COLUMNS = ["component", "status", *(["apply"] if True else [])]\nOPTIONS = ["-r", "-z", "--name-only"]\nWORDS = ["none", "log in"]\n'
    )
    (package / "infra" / "git.py").write_text('def run(args):\n    return ["rev-parse", *args]\n')  # the one module allowed to
    (package / "git.py").write_text('def run(args):\n    return ["rev-parse", *args]\n')  # not in its layer folder: not that module
    (package / "ops" / "checkout" / "tree.py").write_text('def clean(repo):\n    repo.run(["clean", "-d"])\n')
    assert git_argv_outside_git(package) == [
        "pkg/git.py:2 git rev-parse",
        "pkg/project.py:2 git config",
        "pkg/project.py:3 git update-ref",
        "pkg/project.py:4 git diff-tree",
        "pkg/project.py:5 git write-tree",
        "pkg/project.py:6 git prune",
    ]


def names_imported_from(path: Path, module: str) -> set[str]:
    """The names *path* takes from *module* (``from MODULE import NAME``, anywhere in it); ``*`` for the module itself.

    ``import zmr.ops.rebase`` and ``from zmr.ops import rebase`` give the whole module (``*``): any name can be used through it.
    """
    package, _, last = module.rpartition(".")
    found: set[str] = set()
    for node in ast.walk(parse(path)):
        if isinstance(node, ast.ImportFrom) and node.module == module:
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module == package and any(alias.name == last for alias in node.names):
            found.add("*")
        elif isinstance(node, ast.Import) and any(alias.name == module for alias in node.names):
            found.add("*")
    return found


# What ``zmr update --apply`` needs of the stateful rebase; the read-only analysis comes from zmr.ops.upstream.
UPDATE_FROM_REBASE = {"Outcome", "Stopped", "abort", "finishing_onto", "resume", "start"}


def test_update_takes_from_rebase_only_the_stateful_move():
    assert names_imported_from(ZMR / "ops" / "update.py", "zmr.ops.rebase") == UPDATE_FROM_REBASE
    assert "resolve_rev" in names_imported_from(ZMR / "ops" / "update.py", "zmr.ops.upstream")


def test_upstream_analysis_reaches_no_stateful_module():
    graph = import_graph()
    reached, todo = set(), ["zmr.ops.upstream"]
    while todo:  # everything zmr.ops.upstream loads, directly or through another module
        for other in graph[todo.pop()] - reached:
            reached.add(other)
            todo.append(other)
    assert "zmr.ops.replay" in reached
    assert reached.isdisjoint({"zmr.ops.rebase", "zmr.ops.checkout", "zmr.infra.transaction", "zmr.ops.update"})
    assert not any(module.startswith("zmr.ops.checkout.") for module in reached)
    # zmr.infra.lock is reached (the cache's mirror lock and git's writers lock are its), but no component's lock is taken there.
    modules = _modules()
    assert [m for m in sorted(reached) if m in modules and component_locks_taken(modules[m])] == []


_COMPONENT_LOCKS = {"hold", "locked"}


def component_locks_taken(path: Path) -> list[int]:
    """The lines of *path* that take a component's lock: ``lock.hold``/``lock.locked``, or ``hold``/``locked`` taken from zmr.infra.lock."""
    taken = names_imported_from(path, "zmr.infra.lock") & _COMPONENT_LOCKS
    lines = []
    for node in ast.walk(parse(path)):
        if isinstance(node, ast.Attribute) and node.attr in _COMPONENT_LOCKS and isinstance(node.value, ast.Name) and node.value.id == "lock":
            lines.append(node.lineno)
        elif isinstance(node, ast.Name) and node.id in taken:
            lines.append(node.lineno)
    return lines


def test_the_component_lock_check_finds_a_hold(tmp_path):
    (tmp_path / "a.py").write_text("from zmr.infra import lock\ndef f(p, c):\n    with lock.hold(p, [c]):\n        pass\n")
    (tmp_path / "b.py").write_text("from zmr.infra.lock import locked\n@locked\ndef g(p, c):\n    pass\n")
    (tmp_path / "c.py").write_text("from zmr.infra import lock\ndef h(path):\n    with lock.hold_file(path, 'x'):\n        pass\n")
    assert [component_locks_taken(tmp_path / n) for n in ("a.py", "b.py", "c.py")] == [[3], [2], []]


def test_the_import_reader_sees_every_way_to_take_a_module(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("from zmr.ops.rebase import start, abort\n\ndef f():\n    from zmr.ops.rebase import Outcome\n")
    assert names_imported_from(source, "zmr.ops.rebase") == {"start", "abort", "Outcome"}
    source.write_text("from zmr.ops import rebase\nfrom zmr.infra import git\n")
    assert names_imported_from(source, "zmr.ops.rebase") == {"*"}
    source.write_text("import zmr.ops.rebase\n")
    assert names_imported_from(source, "zmr.ops.rebase") == {"*"}


def test_already_upstream_has_one_owner():
    """Whether a patch is already upstream, and its words, are zmr.ops.landed's alone (#49.3): nobody else asks git
    whether a patch reverse-applies or spells "landed (...)"; the replay below it does not know it."""
    import re

    wording = re.compile(r"(partially )?landed \(|same patch-id|reverse-applies\)|empty once applied")
    found = []
    for module, path in _modules().items():
        if module == "zmr.ops.landed":
            continue
        for node in ast.walk(parse(path)):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                if node.func.attr == "reverse_applies" or (
                    node.func.attr == "apply" and module != "zmr.ops.replay" and any(k.arg == "reverse" for k in node.keywords)
                ):
                    found.append(f"{module}:{node.lineno}: asks whether a patch reverse-applies")
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and wording.match(node.value):
                found.append(f"{module}:{node.lineno}: words a landing: {node.value!r}")
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in ("upstream_holds", "line_landing", "containing_commit", "Dropped", "Landing"):
                found.append(f"{module}:{node.lineno}: defines {node.name}")
    assert found == []
    assert "zmr.ops.landed" not in import_graph()["zmr.ops.replay"]


_LOCK_CALLS = {"flock", "lockf"}
_LOCK_OWNER = "infra/lock.py"


def locks_outside_lock_py(root: Path) -> list[str]:
    """``fcntl.flock`` / ``fcntl.lockf`` calls (and ``from fcntl import flock``) anywhere but zmr/infra/lock.py: one module takes every lock."""
    found = []
    for path in sorted(root.rglob("*.py")):
        if path.relative_to(root).as_posix() == _LOCK_OWNER:
            continue
        for node in ast.walk(parse(path)):
            if isinstance(node, ast.Attribute) and node.attr in _LOCK_CALLS:
                found.append(f"{path.relative_to(root.parent)}:{node.lineno} {node.attr}")
            elif isinstance(node, ast.ImportFrom) and node.module == "fcntl" and any(a.name in _LOCK_CALLS for a in node.names):
                found.append(f"{path.relative_to(root.parent)}:{node.lineno} from fcntl import")
    return found


def test_only_lock_py_takes_a_lock():
    """The cache's and git's locks go through zmr.infra.lock too: one timeout, one holder message, one ZMR_LOCK_TIMEOUT (#49)."""
    assert locks_outside_lock_py(ZMR) == []


def test_the_lock_check_finds_a_raw_flock(tmp_path):
    package = tmp_path / "pkg"
    (package / "infra").mkdir(parents=True)
    (package / "infra" / "lock.py").write_text("import fcntl\nfcntl.flock(0, fcntl.LOCK_EX)\n")
    (package / "cache.py").write_text("import fcntl\ndef f(h):\n    fcntl.flock(h.fileno(), fcntl.LOCK_EX)\n")
    (package / "git.py").write_text("from fcntl import lockf\n")
    assert locks_outside_lock_py(package) == ["pkg/cache.py:3 flock", "pkg/git.py:1 from fcntl import"]


# Plumbing: refs and objects, asked of git.Repo's named methods everywhere, the checkout package included (#49).
PLUMBING = frozenset(
    "symbolic-ref update-ref rev-parse for-each-ref show-ref cat-file hash-object update-index read-tree write-tree commit-tree ls-tree mktree".split()
)


def plumbing_in_checkout(root: Path) -> list[str]:
    """``path:line git COMMAND`` of each plumbing argument list (PLUMBING) in the checkout package: those are git.Repo's methods."""
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if not rel.startswith("ops/checkout/"):
            continue
        for node in ast.walk(parse(path)):
            if isinstance(node, ast.List) and (command := _git_command(node)) in PLUMBING:
                found.append(f"{path.relative_to(root.parent)}:{node.lineno} git {command}")
    return sorted(found)


def test_the_checkout_package_spells_porcelain_only_and_asks_git_repo_for_plumbing():
    assert plumbing_in_checkout(ZMR) == []


def test_the_plumbing_check_finds_plumbing_in_the_checkout_package(tmp_path):
    package = tmp_path / "pkg"
    (package / "ops" / "checkout").mkdir(parents=True)
    (package / "ops" / "checkout" / "a.py").write_text(
        'def f(repo):\n    repo.run(["symbolic-ref", "HEAD", "refs/heads/x"])\n    repo.run(["reset", "--hard"])\n'
    )
    (package / "project.py").write_text('def g(repo):\n    repo.run(["update-ref", "refs/x", "y"])\n')  # git_argv_outside_git's to find
    assert plumbing_in_checkout(package) == ["pkg/ops/checkout/a.py:2 git symbolic-ref"]


# Working state: one owner (#49.1). zmr/infra/state.py says where each state file lives and is the only reader and writer of
# their JSON; the old export journal is zmr/ops/legacy.py's alone. The products (evidence, smoke, importing) and the CLI keep
# no state of their own format, and are not scanned: what they parse is their own files (dumps, records, reports).
_STATE_OWNER = "infra/state.py"
_NOT_CORE = ("cli/", "evidence/", "smoke/", "importing/")
_PARSES_OTHER_JSON = {
    "infra/files.py": "defines parse_json, the bounded json.loads that state.py uses",
    "model/source.py": "zmr's own package metadata (direct_url.json, PEP 610)",
    "ops/docs.py": "smoke records committed under cases/ (repository files, read with read_repo_file)",
}
_LEGACY_NAMES = {"LEGACY_EXPORT_JOURNAL", "pending_removals", "export_journal", "staging_dir", "forget_legacy_journal"}
_LEGACY_OWNER = "ops/legacy.py"


def _core_files(root: Path) -> list[tuple[str, Path]]:
    return [(p.relative_to(root).as_posix(), p) for p in sorted(root.rglob("*.py")) if not p.relative_to(root).as_posix().startswith(_NOT_CORE)]


def state_owner_problems(root: Path) -> list[str]:
    """``path:line what`` of each place outside the state module that parses JSON, writes JSON with ``atomic_write``,
    reaches into the state folder itself (``.state_dir``), or names the old export journal outside zmr/ops/legacy.py."""
    found = []
    for rel, path in _core_files(root):
        shown = path.relative_to(root.parent).as_posix()
        for node in ast.walk(parse(path)):
            if rel not in (_STATE_OWNER, *_PARSES_OTHER_JSON):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("loads", "load"):
                    if isinstance(node.func.value, ast.Name) and node.func.value.id == "json":
                        found.append(f"{shown}:{node.lineno} json.{node.func.attr}")
                if (isinstance(node, ast.Name) and node.id == "parse_json") or (isinstance(node, ast.alias) and node.name == "parse_json"):
                    found.append(f"{shown}:{node.lineno} parse_json")
                if isinstance(node, ast.ImportFrom) and node.module == "json" and any(a.name in ("loads", "load") for a in node.names):
                    found.append(f"{shown}:{node.lineno} from json import")
            if rel != _STATE_OWNER and isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "atomic_write":
                if any(isinstance(n, ast.Attribute) and n.attr == "dumps" for arg in node.args for n in ast.walk(arg)):
                    found.append(f"{shown}:{node.lineno} atomic_write of json.dumps")
            if rel not in (_STATE_OWNER, "model/project.py") and isinstance(node, ast.Attribute) and node.attr == "state_dir":
                found.append(f"{shown}:{node.lineno} .state_dir")
            if rel not in (_STATE_OWNER, _LEGACY_OWNER):
                named = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else None
                named = named or (node.name if isinstance(node, (ast.FunctionDef, ast.alias)) else None)
                spelled = isinstance(node, ast.Constant) and isinstance(node.value, str) and "pending-removals" in node.value
                if named in _LEGACY_NAMES or spelled:
                    found.append(f"{shown}:{node.lineno} the old export journal")
    return sorted(found)


def test_working_state_has_one_owner():
    """Only zmr/infra/state.py parses or writes a state file's JSON and says where one lives; only zmr/ops/legacy.py knows the old export journal (#49.1)."""
    assert state_owner_problems(ZMR) == []


def test_the_state_owner_check_finds_state_read_elsewhere(tmp_path):
    package = tmp_path / "pkg"
    for folder in ("cli", "infra", "ops"):
        (package / folder).mkdir(parents=True)
    (package / "infra" / "state.py").write_text("import json\ndef f(p):\n    return json.loads(p.read_text())\n")
    (package / "ops" / "legacy.py").write_text("def g(project, c):\n    return project.pending_removals(c)\n")
    (package / "ops" / "rebase.py").write_text(
        "import json\nfrom zmr.infra.files import atomic_write, parse_json\n"
        "def h(project, p, data):\n    atomic_write(p, json.dumps(data).encode())\n    return project.state_dir / 'x', json.load(p)\n"
        "def i(project, c):\n    return project.pending_removals(c), 'pending-removals/x.json'\n"
    )
    (package / "cli" / "render.py").write_text("import json\ndef j(s):\n    return json.loads(s)\n")  # not the core: not scanned
    assert state_owner_problems(package) == [
        "pkg/ops/rebase.py:2 parse_json",
        "pkg/ops/rebase.py:4 atomic_write of json.dumps",
        "pkg/ops/rebase.py:5 .state_dir",
        "pkg/ops/rebase.py:5 json.load",
        "pkg/ops/rebase.py:7 the old export journal",
        "pkg/ops/rebase.py:7 the old export journal",
    ]

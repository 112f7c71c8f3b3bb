"""docs/reference.md against the code, both ways: commands, options and environment variables.

What the reference names is read by a fixed convention (stated at the top of
the reference):

- commands: the `zmr CMD` rows of the table of §7, and the section headings
  ``### 7.N `zmr CMD ...` `` (every command but `help` has one);
- options of a command: the options in its section (heading to the next
  ``###``) that start a code span (`` `--onto REV` ``) or follow `zmr CMD` in one
  (`` `zmr rebase ... --continue` ``, the heading's synopsis); a short form
  (`-c COMP`) names its long option; spans that quote git
  (`` `git rebase --onto ...` ``, `` `--refmap=` ``) name git's options;
- global options: the first column of the option table of §6.2;
- environment variables: the upper-case names in code spans of §13.

What the code has comes from the typer app itself (`typer.main.get_command`)
and, for environment variables, from zmr/'s sources: literal names read with
``os.environ.get``/``os.environ[...]``/``getenv``, ``envvar=`` of options,
module constants ``*_ENV = "NAME"``, and git's pass-through list.
"""

from __future__ import annotations

import ast
import functools
import re

import pytest

from conftest import REPO_ROOT

REFERENCE = REPO_ROOT / "docs" / "reference.md"
_LONG = re.compile(r"--[a-z][a-z0-9-]*")
_VERBOSITY = {"--quiet", "--verbose"}  # global options that every command takes too (§6.2)


@functools.cache
def _text() -> str:
    return REFERENCE.read_text(encoding="utf-8")


def _without_fences(text: str) -> str:
    return re.sub(r"^```[^\n]*\n.*?^```", "", text, flags=re.M | re.S)


def _spans(text: str) -> list[str]:
    """Inline code spans outside fenced blocks, `\\|` (a pipe inside a table) read as `|`."""
    return [span.strip().replace("\\|", "|") for span in re.findall(r"`([^`\n]+)`", _without_fences(text))]


def _section(number: str) -> str:
    """The text of `## N.` or `### N.M` up to the next heading of that level or above."""
    level = "##" if "." not in number else "###"
    match = re.search(rf"^{level} {re.escape(number)}\.? .*?(?=^#{{2,{len(level)}}} |\Z)", _text(), flags=re.M | re.S)
    assert match, f"docs/reference.md has no section {number}"
    return match.group(0)


@functools.cache
def _app():
    import typer

    from zmr.cli import app

    group = typer.main.get_command(app)
    assert hasattr(group, "commands")
    return group


def _code_options(command) -> set[str]:
    names = {opt for param in command.params for opt in (*param.opts, *param.secondary_opts) if opt.startswith("--")}
    return names - _VERBOSITY


def _command_sections() -> dict[str, str]:
    """Command name → its section of §7 (heading ``### 7.N `zmr CMD ...` ``, up to the next ``###``)."""
    found: dict[str, str] = {}
    for match in re.finditer(r"^### 7\.\d+ `zmr ([a-z-]+)[^\n]*\n.*?(?=^##{1,2} |\Z)", _text(), flags=re.M | re.S):
        assert match.group(1) not in found, f"two sections for zmr {match.group(1)}"
        found[match.group(1)] = match.group(0)
    return found


def _named_options(section: str, name: str) -> set[str]:
    """Long options the section names for command *name*: a span that starts with one, or the options after `zmr NAME` in a span.

    A short form the command has (`-c COMP`) names its long option. A span starting `--name=` quotes git
    (`--force-with-lease=<ref>:`, `--filter=tree:0`): zmr's own options are written `--name VALUE`.
    """
    params = _app().commands[name].params
    shorts = {opt: next(o for o in param.opts if o.startswith("--")) for param in params for opt in param.opts if re.fullmatch(r"-\w", opt)}
    named: set[str] = set()
    for span in _spans(section):
        if re.match(r"--[a-z][a-z0-9-]*=", span):
            continue
        if span.startswith("--") or re.match(r"-\w( |$)", span):
            words = span.split()[:1]
        elif span.startswith(f"zmr {name} ") or span == f"zmr {name}":
            words = span.split()[2:]
        else:
            continue
        for word in words:
            word = word.strip("[]|()")
            if _LONG.fullmatch(word):
                named.add(word)
            elif word in shorts:
                named.add(shorts[word])
    return named


def test_the_reference_states_its_convention():
    assert "tests/test_reference.py" in _text().split("\n## 1.", 1)[0]


def test_every_command_has_a_row_and_a_section_and_no_other_is_named():
    commands = set(_app().commands)
    table = {m.group(1) for m in re.finditer(r"^\| `zmr ([a-z-]+)[^|]*\|", _section("7"), flags=re.M)}
    assert table == commands
    assert set(_command_sections()) == commands - {"help"}


@pytest.mark.parametrize("name", sorted(set(_app().commands) - {"help"}))
def test_every_option_of_a_command_is_in_its_section_and_the_other_way_round(name):
    command = _app().commands[name]
    named = _named_options(_command_sections()[name], name)
    code = _code_options(command)
    assert named - code == set(), f"§7 zmr {name} names options it does not have"
    assert code - named == set(), f"§7 zmr {name} does not name these options (aliases included)"


def test_the_option_reader_sees_an_option_go_missing_and_ignores_git_options():
    """The control: drop `--history` from checkout's section and the reader no longer finds it; git's `--refmap=` is not publish's."""
    section = _command_sections()["checkout"]
    assert "--history" in _named_options(section, "checkout")
    assert "--history" not in _named_options(section.replace("`--history`", "history").replace(" [--history]", ""), "checkout")
    assert "`--refmap=`" in _command_sections()["publish"] and "--refmap" not in _named_options(_command_sections()["publish"], "publish")


def test_aliases_are_named_as_aliases():
    """An option's second long name (`--rev`, `--to`) is in its command's section, next to the word alias or old name."""
    sections = _command_sections()
    aliases = {
        (name, alias)
        for name, command in _app().commands.items()
        for param in command.params
        for alias in [opt for opt in param.opts if opt.startswith("--")][1:]
    }
    assert ("update", "--to") in aliases and ("upstreamed", "--rev") in aliases
    for name, alias in aliases:
        assert re.search(rf"`{alias}`[^.]*(old name|alias)|(old name|alias)[^.]*`{alias}`", sections[name]), f"zmr {name}: {alias}"


def test_global_options_are_the_table_of_6_2():
    table = _section("6.2").split("| option | effect |", 1)[1].split("\n\n", 1)[0]
    named = {opt for row in table.splitlines() for opt in _LONG.findall(row.split("|")[1] if row.count("|") > 2 else "")}
    code = {opt for param in _app().params for opt in (*param.opts, *param.secondary_opts) if opt.startswith("--")} | {"--help"}
    assert named == code


def _read_env_names() -> set[str]:
    """Environment variables zmr/ reads, by literal name (see the module doc)."""
    from zmr.infra import git

    names = set(git._PASSTHROUGH_ENV)
    for path in sorted((REPO_ROOT / "zmr").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        constants = {
            target.id: node.value.value
            for node in ast.walk(tree)
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
            for target in node.targets
            if isinstance(target, ast.Name) and target.id.endswith("_ENV")
        }
        names.update(constants.values())
        for node in ast.walk(tree):
            if isinstance(node, ast.keyword) and node.arg == "envvar" and isinstance(node.value, ast.Constant):
                names.add(node.value.value)
            key = None
            if isinstance(node, ast.Call) and node.args and _is_env_read(node.func):
                key = node.args[0]
            elif isinstance(node, ast.Subscript) and _is_environ(node.value):
                key = node.slice
            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                names.add(key.value)
            elif isinstance(key, ast.Name) and key.id in constants:
                names.add(constants[key.id])
    return names


def _is_environ(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "environ") or (isinstance(node, ast.Name) and node.id == "environ")


def _is_env_read(func: ast.AST) -> bool:
    if isinstance(func, ast.Attribute) and func.attr in ("get", "pop") and _is_environ(func.value):
        return True
    return (isinstance(func, ast.Attribute) and func.attr == "getenv") or (isinstance(func, ast.Name) and func.id == "getenv")


def _reference_env_names() -> set[str]:
    """The names of §13: code spans in the first column of its table, and spans that are a name alone in its text.

    `ZMR_TREE*` stands for the prefix `ZMR_TREE` (`ZMR_TREE`, `ZMR_TREE_ROLLOUT`), `ZMR_TREE_<COMPONENT>` for `ZMR_TREE_`.
    """
    section = _section("13")
    spans = [span for line in section.splitlines() if line.startswith("| ") for span in _spans(line.split("|")[1])]
    spans += _spans("\n".join(line for line in section.splitlines() if not line.startswith("|")))
    names = set()
    for span in spans:
        match = re.fullmatch(r"(_?[A-Z][A-Z0-9_]*[A-Z0-9])(_<[A-Z]+>|\*)?", span)
        if match:
            suffix = match.group(2)
            names.add(match.group(1) + ("" if suffix is None else "*" if suffix == "*" else "_*"))
    return names


def test_the_scan_finds_what_zmr_reads():
    """The control: variables read in each way the scan knows (literal, constant, envvar=, pass-through list)."""
    assert {"ZMR_REPO", "ZMR_LOCK_TIMEOUT", "ZMR_UNTRUSTED", "GIT_SSH_COMMAND", "NO_COLOR", "ZMR_COMMIT"} <= _read_env_names()


def test_every_environment_variable_zmr_reads_is_in_13():
    named = _reference_env_names()
    prefixes = tuple(name[:-1] for name in named if name.endswith("*"))
    missing = {name for name in _read_env_names() if name not in named and not name.startswith(prefixes)}
    assert missing == set()


def test_every_environment_variable_of_13_is_used_by_the_code():
    """Each name §13 gives is a literal of zmr/ (read there, or set for smoke tests), or, for zmr's own tests, of tests/."""
    sources = "\n".join(path.read_text(encoding="utf-8") for folder in ("zmr", "tests") for path in sorted((REPO_ROOT / folder).rglob("*.py")))
    unknown = {name for name in _reference_env_names() if not re.search(rf"[\"']{re.escape(name.rstrip('*'))}", sources)}
    assert unknown == set()


# -- what the reference said and the code did not do -----------------------------------------------


def test_checkout_merge_continue_and_abort_hold_the_component_lock(tmp_path):
    """§6.6: `checkout` holds the lock of the component it changes; `--merge`, `--continue` and `--abort` did not take it."""
    import fcntl

    from conftest import make_project, make_upstream, simple_model, state_dir, zmr

    upstream = make_upstream(tmp_path / "upstream")
    project = make_project(tmp_path / "project")
    simple_model(project, upstream)
    assert zmr("checkout", "toy", cwd=project.root).returncode == 0
    lock_file = state_dir(project.root) / "locks/toy/rollout.lock"
    with open(lock_file, "a+b") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        for flag in ("--merge", "--continue", "--abort"):
            result = zmr("checkout", "toy", "-c", "rollout", flag, cwd=project.root, env={"ZMR_LOCK_TIMEOUT": "0.3"})
            assert result.returncode == 2, (flag, result.stderr)
            assert "another zmr is working on toy/rollout" in result.stderr, (flag, result.stderr)
    merged = zmr("checkout", "toy", "-c", "rollout", "--merge", cwd=project.root)
    assert merged.returncode == 0 and "merged" in merged.stdout, merged.stderr  # released: the merge goes through (nothing to replay)

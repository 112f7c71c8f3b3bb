"""Adopting zmr on a repository of hand-made release branches (issue 16), end to end.

The fixture is made with plain git: three upstreams with history (a
submodule, a symlink, an executable, a binary file, non-ASCII names), a
bare "zero-mismatch-rl" remote whose main has a README and a case, and
hand-made release branches whose snapshot messages name the upstream in
words -- two-commit branches, and a single snapshot commit (Kimi) that
names none.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import git, make_upstream, zmr

FRONT_PAGE = "# zero-mismatch-rl\n\nBitwise-identical token probabilities between rollout and trainer.\n"
UNICODE = "docs/ünïcode-名前.md"


def _tree_of(repo: Path, rev: str) -> str:
    return git("rev-parse", f"{rev}^{{tree}}", cwd=repo)


def _vllm(path: Path):
    """vLLM-like upstream: five commits; a submodule, a symlink, an executable, a binary file, a non-ASCII name."""
    sub = make_upstream(path.parent / "vllm-sub", [{"lib.c": "int f(void) { return 1; }\n"}])
    base = "\n".join(f"line {i}" for i in range(1, 61)) + "\n"
    up = make_upstream(path, [{"README.md": "vllm\n", "vllm/model.py": base, "vllm/kernels/matmul.py": "def matmul(a, b):\n    return a @ b\n"}])
    # A submodule: .gitmodules and a gitlink entry, as `git submodule add` leaves them.
    (path / ".gitmodules").write_text('[submodule "third_party/sub"]\n\tpath = third_party/sub\n\turl = ../vllm-sub\n')
    git("add", ".gitmodules", cwd=path)
    git("update-index", "--add", "--cacheinfo", f"160000,{sub.commits[0]},third_party/sub", cwd=path)
    os.symlink("../README.md", path / "docs-link")
    git("add", "docs-link", cwd=path)
    (path / "scripts").mkdir()
    (path / "scripts/run.sh").write_text("#!/bin/sh\necho run\n")
    os.chmod(path / "scripts/run.sh", 0o755)
    up.commit(
        {"weights.bin": bytes(range(256)) * 4, UNICODE: "ünïcode\n", "scripts/run.sh": "#!/bin/sh\necho run\n"},
        "submodule, symlink, executable, binary, unicode",
    )
    for n in (3, 4, 5):
        up.commit({f"vllm/v{n}.py": f"VERSION = {n}\n" * n, "vllm/model.py": base.replace(f"line {n}\n", f"line {n} (v{n})\n")}, f"release {n}")
    return up


@dataclass
class Adoption:
    tmp: Path
    vllm: object
    megatron: object
    verl: object
    remote: Path
    hand_tips: dict[str, str]


def _hand_made_branch(
    work: Path, upstream, commit: str, branch: str, message: str, changes: dict[str, str | bytes | None], single: bool = False, more=None
) -> None:
    """A release branch as people make them: an orphan snapshot of *commit*'s tree, then (or, *single*, in it) the changes."""
    git("fetch", "-q", str(upstream.path), commit, cwd=work)
    git("checkout", "-q", "-f", "--orphan", branch, commit, cwd=work)
    git("clean", "-qffdx", cwd=work)
    if not single:
        git("commit", "-q", "-m", message, cwd=work, env={"GIT_AUTHOR_DATE": "@1712000000 +0200", "GIT_COMMITTER_DATE": "@1712000000 +0200"})
    for name, content in changes.items():
        target = work / name
        if content is None:
            git("rm", "-q", "--", name, cwd=work)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content) if isinstance(content, bytes) else target.write_text(content)
        git("add", "--", name, cwd=work)
    if more:
        more(work)
    git(
        "commit",
        "-q",
        "-m",
        message if single else "Zero-mismatch changes\n\nBatch-invariant kernels, fixed split sizes.",
        cwd=work,
        env={"GIT_AUTHOR_NAME": "Kernel Dev", "GIT_AUTHOR_EMAIL": "kernel@example.invalid", "GIT_AUTHOR_DATE": "@1712100000 +0200"},
    )
    git("push", "-q", "origin", f"{branch}:refs/heads/{branch}", cwd=work)


def _exec_and_link(work: Path) -> None:
    os.chmod(work / "scripts/tool.sh", 0o755)
    os.symlink("matmul.py", work / "vllm/kernels/latest")
    git("add", "scripts/tool.sh", "vllm/kernels/latest", cwd=work)


@pytest.fixture(scope="module")
def adoption(tmp_path_factory) -> Adoption:
    tmp = tmp_path_factory.mktemp("adopt")
    vllm = _vllm(tmp / "vllm")
    megatron = make_upstream(tmp / "megatron", [{"megatron/core.py": f"CORE = {i}\n", "NOTES.md": f"notes {i}\n"} for i in range(4)])
    verl = make_upstream(tmp / "verl", [{"verl/trainer.py": f"STEP = {i}\n"} for i in range(3)])
    remote = tmp / "zero-mismatch-rl.git"
    git("init", "-q", "--bare", "-b", "main", str(remote))
    work = tmp / "maintainer"
    git("clone", "-q", str(remote), str(work))
    (work / "README.md").write_text(FRONT_PAGE)
    (work / "cases/m").mkdir(parents=True)
    (work / "cases/m/README.md").write_text("# m\n\nWhat broke and how it was fixed.\n")
    git("add", "-A", cwd=work)
    git("commit", "-q", "-m", "front page and case", cwd=work)
    git("push", "-q", "origin", "main", cwd=work)
    pin_v, pin_m, pin_r = vllm.commits[2], megatron.commits[2], verl.commits[1]
    model_py = vllm.file_at(pin_v, "vllm/model.py") + "\n"
    _hand_made_branch(
        work,
        vllm,
        pin_v,
        "vllm/m",
        f"Snapshot of https://github.com/vllm-project/vllm/commit/{pin_v[:10]}",
        {
            "vllm/model.py": model_py.replace("line 10\n", "line 10 fixed split\n"),
            "vllm/kernels/matmul.py": "def matmul(a, b):\n    return (a @ b).contiguous()\n",
            "docs/ßplit-größe.md": "fixed split sizes\n",
            "weights.bin": bytes(range(255, -1, -1)) * 4,
            "scripts/tool.sh": "#!/bin/sh\necho tool\n",
        },
        more=_exec_and_link,
    )
    _hand_made_branch(
        work,
        megatron,
        pin_m,
        "megatron/m",
        f"Megatron-LM snapshot\n\nUpstream: file://{megatron.path} {pin_m}\n",
        {"megatron/core.py": "CORE = 2  # fixed order\n"},
    )
    _hand_made_branch(work, verl, pin_r, "verl/m", f"verl @ {pin_r[:9]}: release snapshot", {"verl/trainer.py": "STEP = 1\nDETERMINISTIC = True\n"})
    # Kimi: one commit holding the tree of vllm's 4th commit plus changes; no upstream commit named.
    _hand_made_branch(work, vllm, vllm.commits[3], "vllm/kimi", "Kimi-K3.1: working tree snapshot", {"vllm/kimi.py": "KDA = True\n"}, single=True)
    heads = git("for-each-ref", "--format=%(refname:lstrip=2) %(objectname)", "refs/heads/", cwd=remote)
    tips = dict(line.split() for line in heads.splitlines())
    return Adoption(tmp, vllm, megatron, verl, remote, tips)


def _clone(adoption: Adoption, name: str, *extra: str) -> Path:
    path = adoption.tmp / name
    git("clone", "-q", *extra, str(adoption.remote), str(path))
    return path


def _remote_refs(remote: Path, prefix: str = "refs/") -> dict[str, str]:
    text = git("for-each-ref", "--format=%(objectname) %(refname)", prefix, cwd=remote)
    return {name: oid for oid, name in (line.split(" ", 1) for line in text.splitlines())}


def test_adopt_hand_made_branches_end_to_end(adoption, tmp_path):
    a = adoption
    repo = _clone(a, f"adopter-{tmp_path.name}")
    # Before init: zmr says what to do.
    early = zmr("import", "vllm/m", "--remote", "origin", cwd=repo)
    assert early.returncode == 2
    assert "not a zmr project yet" in early.stderr and "run `zmr init`" in early.stderr
    assert "run zmr from the repository root" not in early.stderr

    init = zmr("init", "--name", "ZMR Release", "--email", "release@example.invalid", cwd=repo)
    assert init.returncode == 0, init.stderr
    assert (repo / "README.md").read_text() == FRONT_PAGE  # left alone
    assert "README.md exists and was left alone" in init.stdout
    again = zmr("init", cwd=repo)
    assert again.returncode == 0 and "nothing changed" in again.stdout
    git("add", "-A", cwd=repo)
    git("commit", "-q", "-m", "zmr init", cwd=repo)

    # One call, two upstreams: vllm's message has a github URL (unreachable here) and an abbreviated id; megatron's names its URL.
    first = zmr("import", "vllm/m", "megatron/m", "--remote", "origin", "--upstream", f"vllm={a.vllm.path}", "--json", cwd=repo)
    assert first.returncode == 0, first.stderr
    comps = json.loads(first.stdout)["manifests"][0]["components"]
    assert [(c["component"], c["commit"], c["found_by"]) for c in comps] == [
        ("vllm", a.vllm.commits[2], "message (commit-url)"),
        ("megatron", a.megatron.commits[2], "message (upstream-line)"),
    ]
    manifest = repo / "manifests/m.yaml"
    manifest.write_text(manifest.read_text().replace("title: m\n", "title: m  # the model's title\n# pins: update with zmr rebase\n"))
    before = manifest.read_text()
    # A later call adds a component to the same manifest, keeping its comments.
    second = zmr("import", "verl/m", "--remote", "origin", "--upstream", str(a.verl.path), cwd=repo)
    assert second.returncode == 0, second.stderr
    assert "added to manifests/m.yaml" in second.stdout
    text = manifest.read_text()
    assert text.startswith(before) and text[len(before) :] == f"  verl:\n    upstream: {a.verl.path}\n    commit: {a.verl.commits[1]}\n"
    # Kimi: the upstream URL comes from manifest m (component vllm); the base is found by tree distance.
    kimi = zmr("import", "vllm/kimi", "--remote", "origin", "--find-base", cwd=repo)
    assert kimi.returncode == 0, kimi.stderr
    assert "--find-base: closest upstream commits:" in kimi.stdout
    assert f"{a.vllm.commits[3][:12]}  1 path differs" in kimi.stdout
    kimi_text = (repo / "manifests/kimi.yaml").read_text()
    assert f"commit: {a.vllm.commits[3]}\n" in kimi_text and "release: snapshot\n" in kimi_text
    assert zmr("validate", cwd=repo).returncode == 0
    git("add", "-A", cwd=repo)
    git("commit", "-q", "-m", "import the hand-made branches", cwd=repo)

    # A local copy of a hand-made branch: build replaces it, keeping its tip.
    git("branch", "-q", "vllm/m", "origin/vllm/m", cwd=repo)
    build = zmr("build", "--all", cwd=repo)
    assert build.returncode == 0, build.stderr
    assert f"zmr did not build the old tip: kept it as refs/zmr/replaced/vllm/m/{a.hand_tips['vllm/m']}" in build.stdout
    assert git("rev-parse", f"refs/zmr/replaced/vllm/m/{a.hand_tips['vllm/m']}", cwd=repo) == a.hand_tips["vllm/m"]
    for branch in ("vllm/m", "megatron/m", "verl/m"):
        assert _tree_of(repo, branch) == _tree_of(repo, f"origin/{branch}"), branch
        assert _tree_of(repo, f"{branch}~1") == _tree_of(repo, f"origin/{branch}~1"), branch
    assert _tree_of(repo, "vllm/kimi") == _tree_of(repo, "origin/vllm/kimi")
    assert git("ls-tree", "vllm/m", "third_party/sub", cwd=repo).startswith("160000 commit")
    assert git("ls-tree", "vllm/m", "vllm/kernels/latest", cwd=repo).startswith("120000 blob")

    verify = zmr("verify", "--remote", "origin", "--all", cwd=repo)
    assert verify.returncode == 1
    assert "None" not in verify.stdout
    lines = {line.split()[1]: line for line in verify.stdout.splitlines()}
    for branch in ("vllm/m", "megatron/m", "verl/m"):
        assert "snapshot metadata differs (message, author, committer), trees identical; not built by zmr" in lines[branch]
        assert "changes metadata differs (message, author, committer), trees identical; not built by zmr" in lines[branch]
        assert "tree differs" not in lines[branch]
    assert "changes metadata differs (message, author, committer), trees identical; not built by zmr" in lines["vllm/kimi"]

    # Publish: refused, naming every hand-made branch and the flag; the dry run shows the plan.
    dry = zmr("publish", "--all", "--dry-run", cwd=repo)
    assert dry.returncode == 1
    assert "refusing to publish: 4 branches on origin hold commits zmr did not build" in dry.stderr
    assert "zmr publish --replace-foreign" in dry.stderr
    for branch in ("vllm/m", "megatron/m", "verl/m", "vllm/kimi"):
        assert f"refused      {branch}" in dry.stdout and branch in dry.stderr
    refused = zmr("publish", "--all", cwd=repo)
    assert refused.returncode == 1 and "hold commits zmr did not build" in refused.stderr
    assert _remote_refs(a.remote, "refs/heads/")["refs/heads/vllm/m"] == a.hand_tips["vllm/m"]
    plan = zmr("publish", "--all", "--dry-run", "--replace-foreign", cwd=repo)
    assert plan.returncode == 0, plan.stderr
    assert "would replace vllm/m" in plan.stdout.replace("would replace  ", "would replace ")
    assert f"old tip kept as refs/zmr/replaced/vllm/m/{a.hand_tips['vllm/m']}" in plan.stdout
    git("push", "-q", "origin", "main", cwd=repo)

    # CI's clone: one branch. It fetches what it compares; the advice works there.
    ci = _clone(a, f"ci-{tmp_path.name}", "--single-branch", "--branch", "main", "--depth", "1")
    env = {"ZMR_CACHE": str(tmp_path / "ci-cache")}
    assert zmr("build", "--all", cwd=ci, env=env).returncode == 0
    ci_refused = zmr("publish", "--all", cwd=ci, env=env)
    assert ci_refused.returncode == 1 and "zmr publish --replace-foreign" in ci_refused.stderr
    replaced = zmr("publish", "--all", "--replace-foreign", cwd=ci, env=env)
    assert replaced.returncode == 0, replaced.stderr
    heads = _remote_refs(a.remote)
    for branch, old in a.hand_tips.items():
        if branch == "main":
            continue
        assert heads[f"refs/heads/{branch}"] == git("rev-parse", branch, cwd=repo), branch
        assert heads[f"refs/zmr/replaced/{branch}/{old}"] == old, branch  # the old tip is still reachable
    assert zmr("publish", "--all", cwd=ci, env=env).returncode == 0  # zmr's own now: no flag needed

    # Work on the imported series as on any other.
    git("fetch", "-q", "origin", cwd=repo)
    assert zmr("verify", "--remote", "origin", "--all", cwd=repo).returncode == 0
    checkout = zmr("checkout", "m", "-c", "vllm", cwd=repo)
    assert checkout.returncode == 0, checkout.stderr
    assert (repo / "work/m/vllm/docs/ßplit-größe.md").is_file()
    assert git("status", "--porcelain", cwd=repo) == ""  # work/ is ignored
    newer = a.vllm.commits[3]
    rebase = zmr("rebase", "m", "-c", "vllm", "--onto", newer, cwd=repo)
    assert rebase.returncode == 0, rebase.stdout + rebase.stderr
    assert f"commit: {newer}" in manifest.read_text() and "# pins: update with zmr rebase" in manifest.read_text()
    assert zmr("build", "m", cwd=repo).returncode == 0
    assert git("show", "vllm/m:vllm/v4.py", cwd=repo).startswith("VERSION = 4")

"""The only module that starts git.

Every call is an argument vector (never a shell string) run with a fixed
environment, so that nothing on the machine can change what zmr computes:

- user and system config are isolated (``GIT_CONFIG_GLOBAL=/dev/null``,
  ``GIT_CONFIG_NOSYSTEM=1``); the few user settings a *transport* needs
  (``url.*.insteadOf``, credentials, http proxies, ssh command) are passed
  through to network commands only, where they cannot change a result;
- inherited ``GIT_*`` variables (``GIT_DIR``, ``GIT_INDEX_FILE``, ...) are
  dropped; the caller sets what it means explicitly;
- ``LC_ALL=C``, ``TZ=UTC``, no pager, no prompt, no hooks, no fsmonitor,
  no gpg signing, no automatic gc (it would race parallel runs);
- no lazy fetching of missing objects: ``GIT_NO_LAZY_FETCH=1`` (git 2.44+),
  and zmr never writes a promisor remote into a repository's config (see
  zmr/infra/cache.py), so older gits have nowhere to fetch from: zmr alone
  decides what is fetched, and when;
- the caller's ``safe.directory`` is honoured, never widened: git refuses a
  repository another user owns ("dubious ownership"); once it has, zmr reads
  the directories the caller trusts (``GIT_CONFIG_COUNT`` entries, the user's
  and the system's git config) and gives them, and nothing else of that
  config, to every later git as its global config (`_trust_file`), so a
  read-only checkout or a local upstream of another user works as it does
  for plain git (it changes which repositories git opens, never what it
  computes there);
- the caller's ``GIT_ALLOW_PROTOCOL`` is narrowed, never dropped: git gets
  the caller's list less ``ext`` and ``fd`` (``own_source`` fetches between
  zmr's own repositories add ``file``); a remote helper (``fd::0``,
  ``ext::cmd``) or a protocol the caller forbids is refused before git starts.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from zmr.infra import lock
from zmr.infra.errors import ZmrError
from zmr.infra.faults import fault_point

if TYPE_CHECKING:
    from zmr.infra.gitrecords import CommitInfo as CommitInfo
    from zmr.infra.gitrecords import GitObject as GitObject
    from zmr.infra.gitrecords import Identity as Identity
    from zmr.infra.gitrecords import ObjectInfo as ObjectInfo
    from zmr.infra.gitrecords import PickedTree as PickedTree
    from zmr.infra.gitrecords import RawDiffEntry as RawDiffEntry
    from zmr.infra.gitrecords import RefUpdate as RefUpdate
    from zmr.infra.gitrecords import TreeEntry as TreeEntry

# The record types of zmr.infra.gitrecords, also named here (`git.Identity`): imported when first asked for (`__getattr__`).
_RECORDS = frozenset({"CommitInfo", "GitObject", "Identity", "ObjectInfo", "PickedTree", "RawDiffEntry", "RefUpdate", "TreeEntry"})


def __getattr__(name: str) -> Any:
    if name in _RECORDS:
        from zmr.infra import gitrecords

        return getattr(gitrecords, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _debug_log() -> Any:
    """The logger of every git command, its exit status and duration, when DEBUG is on for it (`zmr -v` shows them);
    else None. Only what imported `logging` can have turned it on: a command that never did (`zmr list`) imports none."""
    import sys

    logging = sys.modules.get("logging")
    if logging is None:
        return None
    log = logging.getLogger("zmr.git")  # the logger library users know (docs/reference.md §6.2), kept where the module moved
    return log if log.isEnabledFor(logging.DEBUG) else None


# Where a long command reports what it is doing, one line at a time (git's own progress lines too); None: silence.
Progress = Callable[[str], None]


# The oldest git zmr works with (docs/reference.md §6.6): ``merge-tree --write-tree`` (2.38, ``Repo.pick_tree``); before it,
# ``fetch --refetch`` and ``apply --numstat -z`` (2.36). A git without what zmr asks of it is told apart where it is asked.
MIN_GIT = "2.38"
ZERO_OID = "0" * 40
_Item = TypeVar("_Item")
_Answer = TypeVar("_Answer")
# A full object id: SHA-1 or SHA-256, lower case, as git prints it.
FULL_OID_RE = re.compile(r"(?:[0-9a-f]{40}|[0-9a-f]{64})\Z")

# Inherited variables a user may legitimately need for a transport.
_PASSTHROUGH_ENV = (
    "GIT_SSH",
    "GIT_SSH_COMMAND",
    "GIT_SSH_VARIANT",
    "GIT_ASKPASS",
    "GIT_SSL_NO_VERIFY",
    "GIT_SSL_CAINFO",
    "GIT_PROXY_COMMAND",
    "GIT_TRACE",
    "GIT_TRACE_PACKET",
    "GIT_CURL_VERBOSE",
)

_NO_REFS = "refs/zmr/none/"  # a ref prefix nothing is under: core.alternateRefsPrefixes that lists no ref of an alternate

# Options that make every call independent of config that could change a
# result or run code: each one is forced, whatever the repository says.
_FIXED_CONFIG = (
    "core.hooksPath=/dev/null",  # no hooks, from any config level
    "core.fsmonitor=false",
    "core.autocrlf=false",
    "core.safecrlf=false",
    "core.quotePath=false",
    "core.abbrev=40",
    "commit.gpgSign=false",
    "tag.gpgSign=false",
    "gc.auto=0",
    "maintenance.auto=false",
    "fetch.writeCommitGraph=false",
    "fetch.recurseSubmodules=false",
    "submodule.recurse=false",
    "protocol.ext.allow=never",
    "protocol.fd.allow=never",
    "protocol.file.allow=always",
    "i18n.commitEncoding=UTF-8",
    "advice.detachedHead=false",
    "init.defaultBranch=main",
    "diff.noprefix=false",
    "diff.mnemonicPrefix=false",
    "diff.renames=false",
    "apply.ignoreWhitespace=no",  # a patch applies exactly as written, whatever a repository says
)

# Transports git never gets from zmr, whatever the caller allows: ext:: runs a command, fd:: talks over a descriptor.
_REFUSED_PROTOCOLS = frozenset({"ext", "fd"})
# git's `<transport>::<address>` form: a remote helper, not a URL; a URL's scheme; scp's `host:path`. Compiled (and kept)
# by re when first used, as the failure patterns below: a command that names no remote never pays for them.
_REMOTE_HELPER = r"([A-Za-z][A-Za-z0-9+.-]*)::"
_URL_SCHEME = r"([A-Za-z][A-Za-z0-9+.-]*)://"
_SCP_LIKE = r"[^/:]+:(?!//)"
_SSH_SCHEMES = ("ssh", "git+ssh", "ssh+git")

# User config keys that only steer a transport; honoured for network commands.
_TRANSPORT_CONFIG_PREFIXES = ("url.", "credential.", "http.", "core.sshcommand", "core.gitproxy")


# What git prints when the disk, not the command, failed (strerror texts and git's own words).
_STORAGE_FAILURES = (
    ("Read-only file system", "the file system is mounted read-only"),
    ("No space left on device", "the disk is full"),
    ("Out of diskspace", "the disk is full"),  # pack-objects' own words
    ("Disk quota exceeded", "the disk quota is used up"),
    ("insufficient permission for adding an object", "permission denied"),
    ("Permission denied", "permission denied"),
    ("Operation not permitted", "the file system refuses writes (an immutable file?)"),
)


# What only this machine's disk can mean, also in a fetch's output.
_DISK_FULL = frozenset({"the file system is mounted read-only", "the disk is full", "the disk quota is used up"})


def storage_problem(stderr: str) -> str:
    """Why git could not write its files, from its stderr ('' when the failure was something else)."""
    for text, reason in _STORAGE_FAILURES:
        if text in stderr:
            return reason
    return ""


class GitError(ZmrError):
    """A git command failed; carries the command, exit code and output.

    The message is zmr's (what went wrong and what to do, from `explain`);
    git's own lines follow as details, prefixed ``git:``.
    """

    def __init__(self, argv: Sequence[str], returncode: int, stdout: bytes, stderr: bytes, hint: str = ""):
        self.argv = list(argv)
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        headline, todo = explain(self.argv, self.stderr_text)
        details = [todo] if todo else []
        if hint:
            details.append(hint)
        details += self.git_lines
        super().__init__(headline or f"git {_subcommand(self.argv)} failed (exit {returncode})", details=details)

    @property
    def stderr_text(self) -> str:
        return self.stderr.decode("utf-8", "replace")

    @property
    def git_lines(self) -> list[str]:
        """git's own message, the last lines, each prefixed ``git:``."""
        lines = [line.strip() for line in self.stderr_text.splitlines() if line.strip()]
        return [f"git: {line}" for line in lines[-12:]]


class NotTrusted(ZmrError):
    """git refuses a repository another user owns ("dubious ownership") and the caller trusts no such directory: exit 2, whatever the caller checks."""

    def __init__(self, path: str):
        self.path = path
        super().__init__(
            f"{path}: the repository belongs to another user, and git does not open it until you say you trust it",
            details=[
                f"if you trust it: `git config --global --add safe.directory {path}`, then run again"
                f" (for one run only: GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=safe.directory GIT_CONFIG_VALUE_0={path} zmr ...)",
            ],
        )


_DUBIOUS_RE = re.compile(r"detected dubious ownership in repository at '(?P<x>[^']*)'")


@lru_cache(maxsize=1)
def trusted_directories() -> tuple[str, ...]:
    """The caller's ``safe.directory`` values, as the caller's own git reads them (system, global and ``GIT_CONFIG_COUNT`` entries).

    Asked only once git has refused a repository (`run`): no cost for the usual case of a repository of one's own.
    """
    keep = ("GIT_CONFIG_COUNT", "GIT_CONFIG_KEY_", "GIT_CONFIG_VALUE_", "GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM", "GIT_CONFIG_NOSYSTEM")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_") or k.startswith(keep)}
    env["LC_ALL"] = "C"
    try:
        proc = subprocess.run(
            ["git", "config", "--null", "--get-all", "safe.directory"], cwd="/", env=env, check=False, stdin=subprocess.DEVNULL, capture_output=True
        )
    except OSError:
        return ()
    return tuple(item for item in proc.stdout.decode("utf-8", "surrogateescape").split("\0") if item)


_trusting = False  # set once git refused a repository: every later call passes the caller's safe.directory values


@lru_cache(maxsize=1)
def _trust_file() -> str:
    """A config file holding only the caller's ``safe.directory`` values: git's global config, for every git zmr starts once `_trusting`.

    A file, not ``GIT_CONFIG_COUNT`` entries: git clears those for the
    ``upload-pack`` a fetch from a local path starts, which checks the
    upstream's owner too. Removed when zmr ends (a SIGKILL leaves these few
    bytes in the temporary folder).
    """
    import atexit
    import tempfile

    fd, path = tempfile.mkstemp(prefix="zmr-trust-", suffix=".gitconfig")
    with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape") as handle:
        handle.write("[safe]\n")
        for directory in _with_git_dirs(trusted_directories()):
            quoted = directory.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
            handle.write(f'\tdirectory = "{quoted}"\n')
    atexit.register(_remove, path)
    return path


def _with_git_dirs(directories: Sequence[str]) -> list[str]:
    """*directories*, each work tree followed by its ``.git``: the same repository, which git checks by the git directory's
    path where it is opened by it (``--git-dir``, as zmr's plumbing does; the ``upload-pack`` of a local fetch)."""
    out: list[str] = []
    for directory in directories:
        out.append(directory)
        if directory != "*" and not directory.endswith(("/.git", "/*")):
            out.append(directory.rstrip("/") + "/.git")
    return out


def _remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


class GitCrashed(GitError):
    """git was killed by a signal (a crash of git: SIGABRT, SIGSEGV; or from outside: SIGKILL when out of memory).

    Reported as such, never as the failure it leaves behind (a stale
    ``index.lock`` that the next git command would blame on "another git process").
    """

    def __init__(self, argv: Sequence[str], returncode: int, stdout: bytes, stderr: bytes):
        self.argv, self.returncode, self.stdout, self.stderr = list(argv), returncode, stdout, stderr
        try:
            self.signal_name = signal.Signals(-returncode).name
        except ValueError:
            self.signal_name = f"signal {-returncode}"
        hint = "git itself failed, not the repository or the input: try another git version (`git --version`); SIGKILL is often the out-of-memory killer"
        ZmrError.__init__(self, f"git {_subcommand(self.argv)} crashed (killed by {self.signal_name})", details=[hint, *self.git_lines])


def _subcommand(argv: Sequence[str]) -> str:
    """``fetch`` of ``-c key=value fetch ...``."""
    args = list(argv)
    while args and args[0] == "-c":
        args = args[2:]
    return next((a for a in args if not a.startswith("-")), "command")


# What a failing git says (LC_ALL=C, so always in English) → zmr's headline and what to do. Patterns, compiled (and kept)
# by re when one is first used: only a command that meets a failure pays for them, as for _DAMAGE, _PROGRESS_LINE, _HUNK.
_NOT_A_REPO = r"fatal: '(?P<x>[^']*)' does not appear to be a git repository"
_NOT_FOUND = r"fatal: repository '(?P<x>[^']*)' not found|ERROR: Repository not found"
_UNREACHABLE = (
    r"unable to access '(?P<x>[^']*)'|Could not resolve host|Connection refused|Connection timed out|Network is unreachable"
    r"|No route to host|Could not read from remote repository"
)
_AUTH = r"Authentication failed|could not read Username|terminal prompts disabled|Permission denied \(publickey"
_NO_REF = r"couldn't find remote ref (?P<x>\S+)"
_REJECTED = r"\[(?:remote )?rejected\]|failed to push some refs|pre-receive hook declined"
_NOT_LOCAL_REPO = r"fatal: not a git repository"
_REMOTE_NAME = r"[A-Za-z0-9][A-Za-z0-9._-]*\Z"


def missing_remote(repo: Repo, remote: str) -> bool:
    """*remote* reads as a remote's name (not a URL or an existing path) and *repo* has no such remote."""
    return bool(re.match(_REMOTE_NAME, remote)) and not os.path.exists(remote) and not repo.ok(["config", "--get", f"remote.{remote}.url"])


def _remote_of(argv: Sequence[str]) -> str:
    """The remote (name or URL) a network command was given: the first operand after ``--end-of-options``, else the first non-option."""
    args = list(argv)
    if "--end-of-options" in args:
        rest = args[args.index("--end-of-options") + 1 :]
    else:
        rest = [a for a in args if not a.startswith("-")][1:]  # after the subcommand
    return rest[0] if rest else ""


def explain(argv: Sequence[str], stderr: str) -> tuple[str, str]:
    """zmr's headline and what to do for a git failure a user can cause; ("", "") when unknown."""
    remote = _remote_of(argv) if _subcommand(argv) in ("fetch", "ls-remote", "push", "clone") else ""
    match = re.search(_NOT_A_REPO, stderr)
    if match:
        name = match.group("x")
        if re.match(_REMOTE_NAME, name) and not os.path.exists(name):  # git found neither a remote nor a repository
            return f"no remote {name!r}", f"`git remote add {name} URL` or `--remote`"
        return f"{name}: not a git repository", "check the path or URL (a remote name, a URL, or the path of a repository)"
    match = re.search(_NOT_FOUND, stderr)
    if match:
        return f"{match.group('x') or remote}: repository not found", "check the URL, and that your credentials may read it"
    if re.search(_AUTH, stderr):
        return f"{remote or 'the remote'}: authentication failed", "set up credentials (a credential helper or an SSH key): zmr never prompts"
    match = re.search(_UNREACHABLE, stderr)
    if match:
        where = match.group("x") or remote
        return f"cannot reach {where or 'the remote'}", "check the URL and your network (url.<base>.insteadOf and http proxies are honoured)"
    match = re.search(_NO_REF, stderr)
    if match:
        where = remote or "the remote"
        return f"{where} has no branch, tag or commit {match.group('x')!r}", f"check the name (`git ls-remote {remote or 'URL'}` lists what it has)"
    if re.search(_REJECTED, stderr):
        return f"{remote or 'the remote'} refused the push", "see git's reason below; nothing was pushed where the push was atomic"
    if re.search(_NOT_LOCAL_REPO, stderr):
        return "not a git repository", "run zmr inside the repository (or its checkout), or `git init` it first"
    return "", ""


# What git prints when the object store itself is damaged (a flipped byte, a garbage loose
# object, a pack that does not match its index), as opposed to an object that is merely
# absent ("bad object", "missing"), which a shallow or partial repository expects. Only
# git's own lines count: "remote: ..." lines are another repository's.
_DAMAGE = (
    r"(?m)^(?:error|fatal): (?:"
    r"inflate: |unable to unpack [0-9a-f]+ header|cannot unpack [0-9a-f]+ from |failed to read object [0-9a-f]+ at offset"
    r"|(?:loose|packed) object [0-9a-f]+ \(stored in .*\) is corrupt|object [0-9a-f]+ is corrupt"
    r"|bad packed object CRC|index CRC mismatch|packfile .* does not match index|.*\bhash mismatch\b"
    r"|object file .* is empty|garbage at end of loose object|index file .* is too small|non-monotonic index"
    r"|.* is corrupt$).*"
)


def damage_in(stderr: bytes) -> str | None:
    """The line of git's *stderr* that says a repository's objects are damaged (the one naming the file, if any)."""
    if b"error: " not in stderr and b"fatal: " not in stderr:  # no line can match (`git config --get` of no value: nothing)
        return None
    lines = [m.group(0).strip() for m in re.finditer(_DAMAGE, stderr.decode("utf-8", "replace"))]
    return next((line for line in lines if "(stored in " in line), lines[0] if lines else None)


class DamagedRepoError(GitError):
    """A git command failed because objects of a repository are damaged (not merely missing).

    Raised whatever the caller's ``check``: damage is never an answer such as
    "the patch does not apply". *where* is the repository the command ran in;
    *evidence* git's line (it names the object and, for alternates, their folder).
    """

    def __init__(self, argv: Sequence[str], returncode: int, stdout: bytes, stderr: bytes, where: str, evidence: str):
        self.where = where
        self.evidence = evidence
        hint = "the repository's objects are damaged; a cache mirror can be deleted, a repository checked with `git fsck`"
        super().__init__(argv, returncode, stdout, stderr, hint=hint)
        self.stored = re.findall(r"\(stored in ([^)]*)\)", self.stderr_text)  # the damaged files, where git names them
        self.message = f"damaged objects: {evidence}" if any(os.path.isabs(p) for p in self.stored) else f"{where}: damaged objects: {evidence}"

    def concerns(self, git_dir: Path) -> bool:
        """The damage is in *git_dir*: git names a file under it (also as an alternate), or the command ran there and names none elsewhere.

        A fetch from a local upstream prints that upstream's damage as its own
        (absolute paths): that is not the fetching repository's.
        """
        if any(p.startswith(str(git_dir / "objects")) for p in self.stored):
            return True
        if any(os.path.isabs(p) for p in self.stored):
            return False
        return Path(self.where) == git_dir


class StorageError(GitError):
    """git could not write into a repository (the cache's mirror, a checkout): the disk failed, not the input."""

    def __init__(self, argv: Sequence[str], returncode: int, stdout: bytes, stderr: bytes, where: str | os.PathLike[str], reason: str):
        super().__init__(argv, returncode, stdout, stderr)
        lines = [line.removeprefix("error: ").removeprefix("fatal: ").strip() for line in self.stderr_text.splitlines() if line.strip()]
        self.message = f"{os.fspath(where)}: git cannot write there ({reason})"
        self.details = [
            *[f"git: {line}" for line in lines[-4:]],
            "make that folder writable or free space there (for the cache: or set ZMR_CACHE to a writable folder), and run again",
        ]
        self.args = (self.message,)


class ArgumentsTooLong(ZmrError):
    """The system refused to start git: its arguments took more room than the kernel allows (E2BIG).

    Never the user's fault, nor the disk's: every argument list that grows
    with a series or a tree goes through stdin or `argument_batches`, so
    this is a bug in zmr (exit 3), and the message names the command.
    """

    exit_code = 3

    def __init__(self, args: Sequence[str], argv: Sequence[str]):
        size = sum(len(os.fsencode(a)) + 1 for a in argv)
        super().__init__(
            f"internal error: the system refused to start `git {_subcommand(args)}` with {len(argv)} arguments ({size} bytes): argument list too long",
            details=["this is a bug in zmr, please report it (with the command you ran); a larger stack limit (`ulimit -s`) raises the system's limit"],
        )


# The arguments of one git process that grow with the input (paths, patch files) take at most this many
# bytes. Linux allows arguments and environment together a quarter of the stack limit, never less than
# 128 KiB (macOS: 1 MiB); what this leaves is for the fixed options and the environment.
ARGUMENT_BUDGET = 32 * 1024


def argument_bytes(item: str) -> int:
    """What one argument takes in the arguments of a process: its bytes and a NUL."""
    return len(os.fsencode(item)) + 1


def argument_batches(items: Sequence[_Item], budget: int | None = None, cost: Callable[[Any], int] = argument_bytes) -> list[list[_Item]]:
    """*items* in order, cut into runs of at most *budget* (default `ARGUMENT_BUDGET`) bytes of arguments each (an item over it goes alone).

    *cost*: the bytes one item takes as arguments (default: a string as one argument).
    """
    budget = ARGUMENT_BUDGET if budget is None else budget
    runs: list[list[_Item]] = []
    current: list[_Item] = []
    used = 0
    for item in items:
        size = cost(item)
        if current and used + size > budget:
            runs.append(current)
            current, used = [], 0
        current.append(item)
        used += size
    if current:
        runs.append(current)
    return runs


def _numstat(out: bytes) -> list[tuple[str, int | None, int | None]]:
    """The records of ``diff-tree -z --numstat``: (path, insertions, deletions), None counts for a binary file."""
    changes: list[tuple[str, int | None, int | None]] = []
    for record in out.split(b"\0"):
        fields = record.split(b"\t", 2)
        if len(fields) == 3:
            ins, dels = (int(f) if f.isdigit() else None for f in fields[:2])
            changes.append((fields[2].decode("utf-8", "surrogateescape"), ins, dels))
    return changes


def _patch_counts(text: bytes) -> list[tuple[int | None, int | None]]:
    """Lines added and removed by each file's diff in git's unified diff *text*, as ``--numstat`` counts them (None, None
    for a binary file).

    A file's diff begins with a ``diff --git`` line, which no line of a hunk
    can be (each begins with a space, ``+``, ``-``, ``\\`` or ``@``), and its
    header (``--- a/...``, ``+++ b/...``) ends at its first ``@@`` line, which
    no header line can be (a path with a newline is quoted).
    """
    if not text:
        return []
    counts: list[tuple[int | None, int | None]] = []
    for part in text.split(b"\ndiff --git "):
        hunks = part.find(b"\n@@ ")
        if hunks < 0:
            counts.append((None, None) if b"\nBinary files " in part else (0, 0))  # a mode, an empty file, a binary one
        else:
            counts.append((part.count(b"\n+", hunks), part.count(b"\n-", hunks)))
    return counts


def git_version() -> str:
    """``git version X.Y.Z`` as the git on PATH prints it (for an error that names it)."""
    return run(["--version"], check=False).stdout.decode("utf-8", "replace").strip() or "this git"


def forget_caller_config() -> None:
    """Read the caller's git config (safe.directory, transport settings) anew at its next use: a new run of zmr in this
    process (`zmr.cli.main` called again by a library caller or a test), after which the user may have changed it."""
    global _trusting
    _trusting = False
    trusted_directories.cache_clear()
    _trust_file.cache_clear()
    _user_transport_config.cache_clear()


@lru_cache(maxsize=1)
def _user_transport_config() -> tuple[tuple[str, str], ...]:
    """The user's transport settings (insteadOf, credentials, proxies), read once."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env["LC_ALL"] = "C"
    try:
        proc = subprocess.run(
            ["git", "config", "--null", "--get-regexp", r"^(url|credential|http)\.|^core\.(sshcommand|gitproxy)$"],
            cwd="/",
            env=env,
            check=False,
            stdin=subprocess.DEVNULL,
            capture_output=True,
        )
    except FileNotFoundError as exc:  # pragma: no cover - git missing
        raise ZmrError(f"git is not installed; install git {MIN_GIT} or newer") from exc
    pairs = []
    for item in proc.stdout.decode("utf-8", "replace").split("\0"):
        if not item:
            continue
        key, _, value = item.partition("\n")
        if key.lower().startswith(_TRANSPORT_CONFIG_PREFIXES):
            pairs.append((key, value))
    return tuple(pairs)


def caller_protocols() -> frozenset[str] | None:
    """The protocols the caller's ``GIT_ALLOW_PROTOCOL`` allows; None when it is not set (git's defaults)."""
    value = os.environ.get("GIT_ALLOW_PROTOCOL")
    return None if value is None else frozenset(p for p in value.split(":") if p)


def url_protocol(url: str) -> str:
    """The protocol git would use for *url*, by git's names (``https``, ``ssh``, ``file``, or a remote helper's)."""
    helper = re.match(_REMOTE_HELPER, url)
    if helper:
        return helper.group(1).lower()
    scheme = re.match(_URL_SCHEME, url)
    if scheme:
        name = scheme.group(1).lower()
        return "ssh" if name in _SSH_SCHEMES else name
    if re.match(_SCP_LIKE, url) and not url.startswith(("./", "../", "/")):
        return "ssh"
    return "file"


def remote_refusal(url: str) -> str:
    """Why zmr does not let git talk to *url*, or '': a remote helper (``fd::0``), or a protocol the caller's GIT_ALLOW_PROTOCOL forbids."""
    helper = re.match(_REMOTE_HELPER, url)
    if helper:
        return f"{url!r} names the remote helper {helper.group(1) + '::'!r}, not a URL; zmr talks to URLs and paths only"
    protocol = url_protocol(url)
    if protocol in _REFUSED_PROTOCOLS:
        return f"{url!r} uses the {protocol!r} protocol, which zmr never allows"
    allowed = caller_protocols()
    if allowed is not None and protocol not in allowed:
        shown = ":".join(sorted(allowed)) or "(empty)"
        return f"{url!r} uses the {protocol!r} protocol, which GIT_ALLOW_PROTOCOL={shown} does not allow"
    return ""


class RemoteRefused(ZmrError):
    """A remote or upstream zmr will not let git talk to (exit 2, before git starts)."""


def check_remote(url: str, what: str = "remote") -> None:
    """Raise RemoteRefused when *url* is a remote helper or a protocol the caller forbids."""
    reason = remote_refusal(url)
    if reason:
        raise RemoteRefused(
            f"{what} {reason}",
            details=["use an https://, ssh:// or git:// URL, a path, or the name of a remote; GIT_ALLOW_PROTOCOL, when set, must list its protocol"],
        )


def _allowed_protocols(own_source: bool) -> str | None:
    """GIT_ALLOW_PROTOCOL for git: the caller's list less what zmr refuses (plus ``file`` between zmr's own repositories); None when unset."""
    allowed = caller_protocols()
    if allowed is None:
        return None
    return ":".join(sorted((allowed - _REFUSED_PROTOCOLS) | ({"file"} if own_source else set())))


def _environment(extra: Mapping[str, str] | None, transport: bool, own_source: bool = False) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_") or k in _PASSTHROUGH_ENV}
    env.update(
        {
            "LC_ALL": "C",
            "LANG": "C",
            "LANGUAGE": "",
            "TZ": "UTC",
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_PAGER": "cat",
            "PAGER": "cat",
            "GIT_NO_REPLACE_OBJECTS": "1",
            "GIT_OPTIONAL_LOCKS": "0",
            "GIT_ADVICE": "0",
            "GIT_NO_LAZY_FETCH": "1",
            "GIT_AUTHOR_NAME": "zmr",
            "GIT_AUTHOR_EMAIL": "zmr@localhost",
            "GIT_COMMITTER_NAME": "zmr",
            "GIT_COMMITTER_EMAIL": "zmr@localhost",
        }
    )
    protocols = _allowed_protocols(own_source)
    if protocols is not None:  # git then ignores protocol.*.allow: the list itself leaves out ext and fd
        env["GIT_ALLOW_PROTOCOL"] = protocols
    pairs: list[tuple[str, str]] = []
    if transport:
        pairs.extend(_user_transport_config())
    if _trusting:
        env["GIT_CONFIG_GLOBAL"] = _trust_file()
    if pairs:
        env["GIT_CONFIG_COUNT"] = str(len(pairs))
        for i, (key, value) in enumerate(pairs):
            env[f"GIT_CONFIG_KEY_{i}"] = key
            env[f"GIT_CONFIG_VALUE_{i}"] = value
    if extra:
        env.update(extra)
    return env


def run(
    args: Sequence[str],
    *,
    cwd: str | os.PathLike[str] | None = None,
    git_dir: str | os.PathLike[str] | None = None,
    input: bytes | None = None,
    env: Mapping[str, str] | None = None,
    check: bool = True,
    transport: bool = False,
    own_source: bool = False,
    hint: str = "",
    progress: Progress | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """Run ``git ARGS`` and return the completed process (stdout/stderr as bytes).

    With *progress*, git's progress lines (``Receiving objects:  45% (450/1000), 1.20 MiB``)
    are passed to it as they come; the caller adds ``--progress`` to *args*.
    *own_source*: a fetch from a repository zmr manages (a cache mirror, the project), for which ``file`` is always allowed.
    A network command whose remote is a remote helper (``fd::0``) raises RemoteRefused before git starts.
    A repository of another user that the caller does not trust (``safe.directory``) raises NotTrusted.
    """
    global _trusting
    if transport and _subcommand(args) in ("fetch", "ls-remote", "push", "clone") and re.match(_REMOTE_HELPER, _remote_of(args)):
        check_remote(_remote_of(args))
    argv = ["git", "--no-pager"]
    for item in _FIXED_CONFIG:
        argv += ["-c", item]
    if git_dir is not None:
        argv.append(f"--git-dir={os.fspath(git_dir)}")
    argv += list(args)
    started = time.monotonic()
    try:
        fault_point(f"git {_subcommand(args)}")
    except OSError as err:
        # A full disk injected here (ZMR_TEST_FAULT='git <subcommand>=ENOSPC'): git fails as it does on one, so the code that answers a real one runs.
        into = os.fspath(git_dir if git_dir is not None else cwd or os.getcwd())
        proc = subprocess.CompletedProcess(argv, 128, b"", f"error: unable to write into {into}: {err.strerror}\nfatal: {_subcommand(args)} failed\n".encode())
    else:
        proc = _start(args, argv, cwd, env, transport, own_source, progress, input)
    dubious = _DUBIOUS_RE.search(proc.stderr.decode("utf-8", "replace")) if proc.returncode > 0 else None
    if dubious is not None:
        if not _trusting and trusted_directories():
            _trusting = True  # the caller trusts some directories: say so to git, and ask again
            proc = _start(args, argv, cwd, env, transport, own_source, progress, input)
            dubious = _DUBIOUS_RE.search(proc.stderr.decode("utf-8", "replace")) if proc.returncode > 0 else None
        if dubious is not None:  # never an answer ("not a repository", "no such ref"): the caller's trust is what is missing
            raise NotTrusted(dubious.group("x"))
    log = _debug_log()
    if log is not None:
        place = git_dir if git_dir is not None else cwd
        where = f" (in {os.fspath(place)})" if place is not None else ""
        import shlex  # here: only -v logs the commands

        log.debug("git %s%s: exit %d, %.0f ms", shlex.join(args), where, proc.returncode, 1000 * (time.monotonic() - started))
    if proc.returncode < 0:  # killed by a signal: never an answer, even where the caller checks the exit status itself
        raise GitCrashed(args, proc.returncode, proc.stdout, proc.stderr)
    if proc.returncode != 0:
        damage = damage_in(proc.stderr)
        if damage is not None:
            raise DamagedRepoError(args, proc.returncode, proc.stdout, proc.stderr, os.fspath(git_dir if git_dir is not None else cwd or os.getcwd()), damage)
        if check:
            reason = storage_problem(proc.stderr.decode("utf-8", "replace"))
            if reason and (not transport or reason in _DISK_FULL):  # a remote's "Permission denied" is about access, not this disk
                raise StorageError(args, proc.returncode, proc.stdout, proc.stderr, git_dir or cwd or os.getcwd(), reason)
            raise GitError(args, proc.returncode, proc.stdout, proc.stderr, hint)
    return proc


def _start(
    args: Sequence[str],
    argv: list[str],
    cwd: str | os.PathLike[str] | None,
    env: Mapping[str, str] | None,
    transport: bool,
    own_source: bool,
    progress: Progress | None,
    input: bytes | None,
) -> subprocess.CompletedProcess[bytes]:
    """One git process of `run`, to its end."""
    try:
        if progress is not None:
            return _run_with_progress(argv, cwd, _environment(env, transport, own_source), progress, input)
        return subprocess.run(
            argv,
            cwd=cwd,
            input=input,
            stdin=None if input is not None else subprocess.DEVNULL,
            capture_output=True,
            env=_environment(env, transport, own_source),
            check=False,
        )
    except FileNotFoundError as exc:
        raise ZmrError(f"git is not installed; install git {MIN_GIT} or newer") from exc
    except OSError as exc:
        if exc.errno == errno.E2BIG:  # not a disk or permission problem: zmr passed too much
            raise ArgumentsTooLong(args, argv) from None
        raise


# A progress line of git (fetch, push, clone): kept out of error messages, passed to the callback.
_PROGRESS_LINE = rb"^(?:remote: )?[A-Z][a-z]+(?: [a-z]+)*: +\d+% \(\d+/\d+\)"


def _run_with_progress(
    argv: list[str], cwd: str | os.PathLike[str] | None, env: dict[str, str], progress: Progress, input: bytes | None = None
) -> subprocess.CompletedProcess[bytes]:
    """Run git reading its stderr as it comes: progress lines (ended by CR) go to *progress*, the rest is kept; *input* is its stdin.

    This thread alone waits on git's pipes (as ``Popen.communicate`` does), so an interrupt (Ctrl-C, or the SIGTERM and
    SIGHUP zmr turns into one) ends the wait at once: git is killed, as ``subprocess.run`` kills it, and the pipes are
    closed, even where a child of git (a fetch's remote helper) still holds them open.
    """
    import select
    import selectors

    stdin = subprocess.DEVNULL if input is None else subprocess.PIPE
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    out: list[bytes] = []
    kept: list[bytes] = []
    pending, sent = b"", 0
    try:
        with selectors.DefaultSelector() as selector:
            selector.register(proc.stdout, selectors.EVENT_READ)
            selector.register(proc.stderr, selectors.EVENT_READ)
            if proc.stdin is not None:
                selector.register(proc.stdin, selectors.EVENT_WRITE)
            while selector.get_map():
                for key, _ in selector.select():
                    if key.fileobj is proc.stdin:
                        assert input is not None and proc.stdin is not None
                        try:  # at most PIPE_BUF bytes: a write to a pipe said writable that never blocks
                            sent += os.write(key.fd, input[sent : sent + select.PIPE_BUF])
                        except BrokenPipeError:  # git exited without reading it all (a failed fetch): not an error here
                            sent = len(input)
                        if sent >= len(input):
                            selector.unregister(key.fileobj)
                            proc.stdin.close()
                        continue
                    chunk = os.read(key.fd, 65536)
                    if not chunk:
                        selector.unregister(key.fileobj)
                    elif key.fileobj is proc.stdout:
                        out.append(chunk)
                    else:
                        pending += chunk
                        *lines, pending = re.split(rb"[\r\n]", pending)
                        for line in lines:
                            if re.match(_PROGRESS_LINE, line):
                                progress(line.decode("utf-8", "replace").removeprefix("remote: ").strip())
                            elif line.strip():
                                kept.append(line)
        proc.wait()
    except BaseException:
        proc.kill()
        proc.wait()  # git itself, killed: at once (a child of its that holds a pipe gets EPIPE once the pipes are closed)
        raise
    finally:
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
    if pending.strip():
        kept.append(pending)
    return subprocess.CompletedProcess(argv, proc.returncode, b"".join(out), b"".join(line + b"\n" for line in kept))


def out(args: Sequence[str], **kwargs: Any) -> str:
    """Run git and return stdout as text with the trailing newline removed."""
    return run(args, **kwargs).stdout.decode("utf-8", "surrogateescape").rstrip("\n")


def ok(args: Sequence[str], **kwargs: Any) -> bool:
    """True when the git command exits 0."""
    return run(args, check=False, **kwargs).returncode == 0


_HUNK = rb"(?m)^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@"


def diff_lines(old: bytes, new: bytes) -> list[tuple[int, int, int, int]]:
    """The changes from the text *old* to *new*, a line each (``git diff --no-index -U0 --histogram``).

    Per hunk: (start in *old*, lines of *old*, start in *new*, lines of *new*), starts 0-based
    (for an empty side: the line before which the other side's lines go). Nothing is written to a repository.
    """
    if old == new:
        return []
    import tempfile  # here, as in the functions below: a command that only reads a project needs no temporary folder

    with tempfile.TemporaryDirectory(prefix="zmr-diff-") as tmp:
        Path(tmp, "a").write_bytes(old)
        Path(tmp, "b").write_bytes(new)
        proc = run(["diff", "--no-index", "--no-ext-diff", "--no-color", "--histogram", "-U0", "--", "a", "b"], cwd=tmp, check=False)
    if proc.returncode not in (0, 1):
        raise GitError(proc.args, proc.returncode, proc.stdout, proc.stderr)
    hunks = []
    for match in re.finditer(_HUNK, proc.stdout):
        a, b, c, d = (int(g) if g is not None else 1 for g in match.groups())
        hunks.append((a - 1 if b else a, b, c - 1 if d else c, d))
    return hunks


def merge_file(base: bytes, ours: bytes, theirs: bytes) -> bytes | None:
    """*ours* with the change *base* → *theirs* merged in (``git merge-file -p``, the 3-way merge ``git apply --3way``
    makes); None where the two conflict. Nothing is written to a repository."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="zmr-merge-") as tmp:
        for name, data in (("ours", ours), ("base", base), ("theirs", theirs)):
            Path(tmp, name).write_bytes(data)
        proc = run(["merge-file", "-p", "--quiet", "ours", "base", "theirs"], cwd=tmp, check=False)
    if proc.returncode < 0 or proc.returncode > 127:
        raise GitError(proc.args, proc.returncode, proc.stdout, proc.stderr)
    return proc.stdout if proc.returncode == 0 else None


def index_entries(path: str | os.PathLike[str], oid_bytes: int = 20) -> dict[bytes, tuple[str, str]]:
    """The stage-0 entries of an index file of version 2 or 3: path → (mode, object id).

    For zmr's own small temporary indexes, read directly instead of one more
    git process per look. Anything else (version 4, a damaged file) raises
    ValueError, and the caller asks git instead.
    """
    import struct

    data = Path(path).read_bytes()
    if len(data) < 12 or data[:4] != b"DIRC":
        raise ValueError(f"{path}: not an index file")
    version, count = struct.unpack(">II", data[4:12])
    if version not in (2, 3):
        raise ValueError(f"{path}: index version {version}")
    entries: dict[bytes, tuple[str, str]] = {}
    pos = 12
    fixed = 40 + oid_bytes + 2  # stat data, mode, ids and sizes; the object id; the flags
    for _ in range(count):
        if pos + fixed > len(data):
            raise ValueError(f"{path}: truncated")
        mode = struct.unpack(">I", data[pos + 24 : pos + 28])[0]
        oid = data[pos + 40 : pos + 40 + oid_bytes].hex()
        flags = struct.unpack(">H", data[pos + 40 + oid_bytes : pos + fixed])[0]
        name_at = pos + fixed + (2 if flags & 0x4000 else 0)  # version 3: extended flags
        name_end = data.index(b"\0", name_at)
        if (flags >> 12) & 3:
            raise ValueError(f"{path}: unmerged entries")
        entries[data[name_at:name_end]] = (f"{mode:o}", oid)
        pos = pos + ((name_end - pos) // 8 + 1) * 8  # 1 to 8 NULs pad the entry to a multiple of 8
    return entries


class Repo:
    """A git repository addressed by its git directory (bare or not).

    All plumbing zmr uses goes through these methods; ``work_tree`` is set
    only for repositories a human works in.
    """

    def __init__(self, git_dir: str | os.PathLike[str], work_tree: str | os.PathLike[str] | None = None, *, writer_lock: str | os.PathLike[str] | None = None):
        self.git_dir = Path(git_dir)
        self.work_tree = Path(work_tree) if work_tree is not None else None
        # Held shared while fast-import writes a temporary pack here, so that a cleanup can tell live work from a killed process's leftovers.
        self.writer_lock = Path(writer_lock) if writer_lock is not None else None

    def __repr__(self) -> str:
        return f"Repo({str(self.git_dir)!r})"

    @classmethod
    def discover(cls, path: str | os.PathLike[str]) -> Repo:
        """The repository that contains *path* (its common git dir, so branches are shared by worktrees)."""
        proc = run(["rev-parse", "--path-format=absolute", "--git-common-dir", "--show-toplevel"], cwd=path, check=False)
        if proc.returncode != 0:
            raise ZmrError(f"{path}: not inside a git repository; run `git init` there first")
        lines = proc.stdout.decode("utf-8", "surrogateescape").splitlines()
        top = lines[1] if len(lines) > 1 else None
        return cls(lines[0], top)

    @classmethod
    def at(cls, path: str | os.PathLike[str]) -> Repo:
        """The repository git finds from *path*, asked from there (``cwd``, no ``--git-dir``): for questions put before it is known to exist."""
        return cls(path, path)

    # -- raw access -------------------------------------------------------
    def run(self, args: Sequence[str], **kwargs: Any) -> subprocess.CompletedProcess[bytes]:
        if self.work_tree is not None:
            kwargs.setdefault("cwd", self.work_tree)
            return run(args, **kwargs)
        return run(args, git_dir=self.git_dir, **kwargs)

    def out(self, args: Sequence[str], **kwargs: Any) -> str:
        return self.run(args, **kwargs).stdout.decode("utf-8", "surrogateescape").rstrip("\n")

    def ok(self, args: Sequence[str], **kwargs: Any) -> bool:
        return self.run(args, check=False, **kwargs).returncode == 0

    def is_ancestor(self, ancestor: str, commit: str) -> bool:
        """*commit* descends from (or is) *ancestor* (``merge-base --is-ancestor``; no git for one id given twice)."""
        return ancestor == commit or self.ok(["merge-base", "--is-ancestor", ancestor, commit])

    # -- objects ----------------------------------------------------------
    def has_object(self, oid: str, kind: str | None = None) -> bool:
        spec = f"{oid}^{{{kind}}}" if kind else oid
        return self.ok(["cat-file", "-e", spec])

    def resolve(self, rev: str, kind: str = "commit") -> str | None:
        """Full object id of *rev* peeled to *kind*, or None when it does not exist."""
        proc = self.run(["rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{{kind}}}"], check=False)
        if proc.returncode != 0:
            return None
        return proc.stdout.decode().strip()

    def tree_of(self, commit: str) -> str:
        return self.out(["rev-parse", "--verify", "--end-of-options", f"{commit}^{{tree}}"])

    def subtrees(self, tree: str) -> list[tuple[str, bytes]]:
        """Every tree object under *tree* (itself first) as (path, raw object bytes): one ``ls-tree``, one ``cat-file --batch``.

        Raw, so that a name git would never write (``a/b``, ``..``) is seen as
        it is stored, not as ``ls-tree`` joins it into a path.
        """
        paths = {tree: ""}
        for entry in self.ls_tree(tree, trees_only=True):
            if entry.type == "tree":  # -d lists submodules (commits) too: not objects of this repository
                paths.setdefault(entry.oid, entry.path)
        result = []
        for (oid, path), obj in zip(paths.items(), self.cat_file_batch(list(paths))):
            if obj is None or obj.type != "tree":
                found = "missing" if obj is None else f"a {obj.type}"
                raise ZmrError(f"{self.git_dir}: tree object at {path or '.'!r} is not readable: {oid} {found}")
            result.append((path, obj.content))
        return result

    def ls_tree(self, tree: str, paths: Sequence[str] | None = None, *, trees_only: bool = False, long: bool = False) -> list[TreeEntry]:
        """``ls-tree -r -z --full-tree`` of *tree*: every entry, or those at *paths* (literal; a folder: all below it; none for no paths).

        *trees_only*: ``-d``, the folders (and submodules) instead of what is in them; *long*: ``-l``, with blob sizes.
        *paths* go in batches that fit in the arguments of a process (ls-tree reads no pathspec from stdin);
        an entry two batches list (a folder and a file in it) is given once.
        """
        args = ["ls-tree", "-r", "-z", "--full-tree", *(["-d"] if trees_only else []), *(["-l"] if long else []), tree]
        if paths is None:
            return parse_ls_tree(self.run(args).stdout)
        entries: dict[str, TreeEntry] = {}
        for listing in self._ls_tree_batches(args, paths):
            for entry in parse_ls_tree(listing):
                entries.setdefault(entry.path, entry)
        return list(entries.values())

    def ls_tree_paths(self, tree: str, paths: Sequence[str]) -> bytes:
        """``ls-tree -r -z --full-tree`` of *tree* at *paths* (literal; a folder: all below it); nothing for no paths.

        Unparsed, as ``update-index --index-info`` reads it. In batches of paths that fit in the arguments
        of a process (ls-tree reads no pathspec from stdin).
        A path in two batches (a folder and a file in it) is listed twice: the entries are the same.
        """
        return b"".join(self._ls_tree_batches(["ls-tree", "-r", "-z", "--full-tree", tree], paths))

    def _ls_tree_batches(self, args: list[str], paths: Sequence[str]) -> Iterator[bytes]:
        """The output of ``ls-tree`` *args* at literal *paths*, one batch of paths (that fits in a process's arguments) at a time."""
        for batch in argument_batches(paths):
            yield self.run(["--literal-pathspecs", *args, "--", *batch]).stdout

    def diff_tree_raw(self, lines: Sequence[str], *, always: bool = False) -> dict[str, list[RawDiffEntry]]:
        """``diff-tree --stdin -r --raw -z --no-renames``: for each line (a commit, or "<tree> <tree>"), the entries that differ.

        Keyed by the line as git repeats it; a line with nothing to show is absent, unless *always* (``--always``, commits only).
        """
        if not lines:
            return {}
        args = ["diff-tree", "--stdin", "-r", "--raw", "-z", "--no-renames", "--no-abbrev", *(["--always"] if always else [])]
        return parse_raw_diff(self.run(args, input="".join(f"{line}\n" for line in lines).encode()).stdout)

    def cat_file_batch(self, queries: Sequence[str]) -> list[GitObject | None]:
        """The object each of *queries* (an id, or any name ``rev-parse`` reads) names, in one ``cat-file --batch``; None where it names none."""
        return _batch_answers(queries, parse_cat_file_batch(self._cat_file_stdin("--batch", queries)))

    def object_infos(self, queries: Sequence[str]) -> list[ObjectInfo | None]:
        """Id, type and size of the object each of *queries* names, in one ``cat-file --batch-check``; None where it names none."""
        return _batch_answers(queries, parse_cat_file_check(self._cat_file_stdin("--batch-check", queries)))

    def _cat_file_stdin(self, mode: str, queries: Sequence[str]) -> bytes:
        if any("\n" in query for query in queries):
            raise ValueError("cat-file reads one name a line: a name with a newline cannot be asked about")
        if not queries:
            return b""
        return self.run(["cat-file", mode], input="".join(f"{query}\n" for query in queries).encode("utf-8", "surrogateescape")).stdout

    def cat_file(self, kind: str, oid: str) -> bytes:
        return self.run(["cat-file", kind, oid]).stdout

    def commit_info(self, commit: str) -> CommitInfo:
        from zmr.infra.gitrecords import CommitInfo

        raw = self.cat_file("commit", commit)
        return CommitInfo.parse(commit, raw)

    def commits_between(self, base: str, tip: str) -> list[str]:
        """Commits reachable from *tip* but not *base*, oldest first."""
        text = self.out(["rev-list", "--reverse", "--topo-order", tip, "--not", base])
        return text.split() if text else []

    def diff_patch(self, commit: str, paths: Sequence[str]) -> bytes:
        """The patch of *commit* against its first parent, limited to *paths* (no rename detection, full index)."""
        return self.run(["diff-tree", "-p", "--no-renames", "--full-index", "--root", "-m", "--first-parent", commit, "--", *paths]).stdout

    def write_tree_to(self, tree: str, dest: str | os.PathLike[str]) -> None:
        """Write every file of *tree* under the folder *dest* (created, or empty), through a throwaway index.

        No worktree entry, ref or index of the repository changes: the tree a
        check runs in (``zmr update --test``, ``zmr bisect``) is a plain folder.
        """
        import tempfile

        os.makedirs(dest, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="zmr-index-") as tmp:
            env = {"GIT_INDEX_FILE": os.path.join(tmp, "index")}
            hint = "the tree of a check could not be written"
            # The git dir named, cwd = dest: the same for a bare mirror and for a repository with a work tree.
            run(["read-tree", tree], git_dir=self.git_dir, cwd=dest, env=env, hint=hint)
            run([f"--work-tree={os.fspath(dest)}", "checkout-index", "--all", "--force"], git_dir=self.git_dir, env=env, cwd=dest, hint=hint)

    def rev_list(self, args: Sequence[str], stdin: Sequence[str] = ()) -> list[str]:
        """``git rev-list ARGS``; *stdin*: more revisions (``^`` for excluded ones), then ``--`` and paths, one a line, read with ``--stdin``.

        Lists that grow with a series (its commits, its paths) go there, never into the arguments.
        """
        if stdin:
            cut = list(args).index("--") if "--" in args else len(args)  # --stdin before the paths of the arguments
            text = self.out(["rev-list", *args[:cut], "--stdin", *args[cut:]], input="".join(f"{line}\n" for line in stdin).encode("utf-8", "surrogateescape"))
        else:
            text = self.out(["rev-list", *args])
        return text.split() if text else []

    def objects_complete(self, commit: str, *, blobs: bool = True) -> bool:
        """Every object of *commit*'s tree is present (no walk of its history); with ``blobs=False`` every tree."""
        return self.ok(["rev-list", "--objects", "--no-walk", *([] if blobs else ["--filter=blob:none"]), "--missing=error", commit])

    def missing_objects(self, oids: Sequence[str]) -> list[str]:
        """Those of *oids* this repository does not have."""
        return [oid for oid, info in zip(oids, self.object_infos(oids)) if info is None]

    def may_fetch_lazily(self) -> bool:
        """A partial clone (``extensions.partialClone``, a ``remote.*.promisor``): there, git older than 2.44 fetches an object
        it lacks when asked for one (``GIT_NO_LAZY_FETCH`` is newer), so asking it which objects it has can reach the network."""
        proc = self.run(["config", "--get-regexp", r"^(extensions\.partialclone|remote\..*\.promisor)$"], check=False)
        for line in proc.stdout.decode("utf-8", "replace").splitlines():
            key, _, value = line.partition(" ")
            if key == "extensions.partialclone" or value.strip().lower() in ("true", "yes", "on", "1"):
                return True
        return False

    def copy_objects(self, oids: Sequence[str], into: Repo) -> None:
        """Copy *oids*, which this repository has, into *into* as one pack.

        Packed without a delta search (``--window=0``: deltas stored here are
        reused, the rest stored whole); *into*'s ``index-pack`` recomputes
        each object's id from its bytes, so nothing that is not what its id
        says gets in, and installs the pack by rename, whole or not at all.
        """
        if not oids:
            return
        pack = self.run(["pack-objects", "--stdout", "-q", "--window=0"], input="".join(f"{oid}\n" for oid in oids).encode("ascii")).stdout
        with into._writing():  # a temporary pack of a live process: a fetch's cleanup beside it leaves it alone
            into.run(["index-pack", "--stdin"], input=pack)

    def count(self, tip: str, *, exclude: Sequence[str] = (), first_parent: bool = False, max_count: int | None = None) -> int:
        """``git rev-list --count``: the commits of *tip* that none of *exclude* reaches."""
        args = ["rev-list", *(["--first-parent"] if first_parent else []), "--count"]
        args += [f"--max-count={max_count}"] if max_count is not None else []
        return int(self.out([*args, tip, *(["--not", *exclude] if exclude else [])]))

    def merge_base(self, a: str, b: str) -> str | None:
        """The best common ancestor of *a* and *b*; None when they have none."""
        proc = self.run(["merge-base", a, b], check=False)
        return proc.stdout.decode().strip() if proc.returncode == 0 else None

    def commits_with_prefix(self, prefix: str) -> list[str]:
        """Every object id starting with the abbreviated id *prefix* (``rev-parse --disambiguate``; any kind: callers keep the commits)."""
        return self.run(["rev-parse", f"--disambiguate={prefix}"], check=False).stdout.decode().split()

    def parent(self, commit: str) -> str:
        """The first parent of *commit*."""
        return self.out(["rev-parse", f"{commit}^"])

    def added_by(self, path: str) -> tuple[str, str] | None:
        """The author (name, email) of the newest commit of HEAD's history that added *path* (from the top of the work tree); None: none did."""
        proc = self.run(["--literal-pathspecs", "log", "-1", "--diff-filter=A", "--format=%an%x00%ae", "HEAD", "--", path], check=False)
        name, sep, email = proc.stdout.decode("utf-8", "replace").strip().partition("\0")
        return (name, email) if proc.returncode == 0 and sep else None

    def first_parent_log(self, refs: Sequence[str], format: str) -> str:
        """``git log --first-parent --topo-order`` of *refs*, one *format* line per commit."""
        return self.out(["log", "--first-parent", "--topo-order", f"--format={format}", *refs])

    def diff_tree(
        self, args: Sequence[str], *, options: Sequence[str] = (), input: bytes | None = None, env: Mapping[str, str] | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[bytes]:
        """``git OPTIONS diff-tree ARGS``; *options* go before the command (``-c key=value``, ``--literal-pathspecs``)."""
        return self.run([*options, "diff-tree", *args], input=input, env=env, check=check)

    def patch_ids(self, diff: bytes) -> str:
        """``git patch-id --stable`` of the diffs in *diff*: ``<patch id> <commit>`` lines."""
        return self.run(["patch-id", "--stable"], input=diff).stdout.decode()

    def hash_blob(self, data: bytes) -> str:
        """Write *data* as a blob; its id."""
        return self.out(["hash-object", "-w", "--stdin"], input=data)

    def read_blob(self, rev: str) -> bytes | None:
        """The bytes of the blob *rev* names; None when there is none."""
        proc = self.run(["cat-file", "blob", rev], check=False)
        return proc.stdout if proc.returncode == 0 else None

    def pack_objects(self, pack_prefix: str | os.PathLike[str], revs: bytes, env: Mapping[str, str] | None = None) -> None:
        """``git pack-objects --revs``: one pack (and its index) at *pack_prefix*-<hash> of the objects *revs* (stdin lines) reach."""
        self.run(["pack-objects", "--revs", "--quiet", os.fspath(pack_prefix)], input=revs, env=env)

    # -- comparing series and trees (zmr diff, the rebase and update reports) --
    def range_diff(self, old_range: str, new_range: str, *, creation_factor: int | None = None) -> str | None:
        """``git range-diff`` of two ranges, uncoloured; None when git cannot compare them (e.g. a range it cannot walk)."""
        factor = [f"--creation-factor={creation_factor}"] if creation_factor is not None else []
        proc = self.run(["range-diff", "--no-color", *factor, old_range, new_range], check=False)
        return proc.stdout.decode("utf-8", "replace") if proc.returncode == 0 else None

    def commit_patches(self, commits: Sequence[str]) -> dict[str, str]:
        """Each commit's diff against its first parent (``diff-tree -p``, no renames), in one git run."""
        if not commits:
            return {}
        args = ["diff-tree", "--stdin", "-p", "--root", "--no-renames", "--no-color", "--no-ext-diff", "--full-index"]
        out = self.run(args, input="".join(f"{c}\n" for c in commits).encode()).stdout.decode("utf-8", "replace")
        patches: dict[str, list[str]] = {}
        current: list[str] | None = None
        wanted = set(commits)
        for line in out.splitlines(keepends=True):
            name = line.rstrip("\n")
            if name in wanted and name not in patches:
                current = patches[name] = []
            elif current is not None:
                current.append(line)
        return {c: "".join(patches.get(c, [])) for c in commits}

    def tree_diff(self, old: str, new: str, *, patch: bool, paths: Sequence[str] | None = None) -> tuple[list[tuple[str, int | None, int | None]], str | None]:
        """(path, insertions, deletions) of each file that differs between two trees (None counts: a binary file), and with *patch* the unified diff.

        One ``diff-tree`` (no renames, uncoloured): each blob pair is read and
        compared once. With *patch*, ``--raw -p``: the files, then the diff,
        whose lines are counted here (``_patch_counts``); ``--numstat -p``
        would compare each pair twice (on Megatron-LM's 1,423 files of a
        400-commit pin move: 0.37 s of CPU against 0.24 s). Where the diff
        does not give one file's counts (a file that became a symlink or a
        submodule is two diffs there), a ``--numstat`` of the same files
        counts them. With ``-z`` the records end in NUL and one more NUL
        comes before the patch, whose text ``-z`` leaves as it is. *paths*:
        only those files (literal pathspecs, in batches that fit in a
        process's arguments, in the order given); none may be a folder of
        another, which its pathspec would list again.
        """
        selections = [([], [])] if paths is None else [(["--literal-pathspecs"], ["--", *batch]) for batch in argument_batches(paths)]

        def run(form: list[str], selection: tuple[list[str], list[str]]) -> bytes:
            return self.run([*selection[0], "diff-tree", "-r", "-z", *form, "--no-renames", old, new, *selection[1]]).stdout

        changes: list[tuple[str, int | None, int | None]] = []
        texts: list[bytes] = []
        for selection in selections:
            if not patch:
                changes += _numstat(run(["--numstat"], selection))
                continue
            records, _, text = run(["--raw", "-p", "--no-color", "--no-ext-diff", "--no-abbrev"], selection).partition(b"\0\0")
            entries = parse_raw_diff(records).get("", [])
            counts = _patch_counts(text)
            if len(counts) != len(entries) or any(entry.status == "T" for entry in entries):
                counts = [(ins, dels) for _, ins, dels in _numstat(run(["--numstat"], selection))]
            changes += [(entry.path, ins, dels) for entry, (ins, dels) in zip(entries, counts)]
            texts.append(text)
        return changes, (b"".join(texts).decode("utf-8", "replace") if patch else None)

    def renames(self, old: str, new: str) -> dict[str, str]:
        """The files renamed between two trees, by git's rename detection (what a cherry-pick's merge follows): old path → new path.

        ``diff-tree -r -M --diff-filter=R`` over the whole trees (a pathspec would
        hide a file's new name), the rename limit pinned to merge's default so
        that no user config changes the answer.
        """
        out = self.run(["-c", "diff.renameLimit=7000", "diff-tree", "-r", "-z", "-M", "--diff-filter=R", "--name-status", old, new]).stdout
        tokens = out.decode("utf-8", "surrogateescape").split("\0")
        return {tokens[k + 1]: tokens[k + 2] for k in range(0, len(tokens) - 2, 3) if tokens[k].startswith("R")}

    def tree_blobs(self, old: str, new: str) -> tuple[list[str], list[str], list[str]]:
        """The blob ids of each entry that differs between two trees, on the old side and on the new, and the entries' paths
        in git's order (read from the trees alone).

        A side where the entry is absent, or is a submodule (a commit of
        another repository), names no blob.
        """
        entries = parse_raw_diff(self.run(["diff-tree", "-r", "-z", "--no-renames", "--no-abbrev", old, new]).stdout).get("", [])

        def blobs(sides: Iterable[tuple[str, str] | None]) -> list[str]:
            return [oid for mode, oid in filter(None, sides) if mode != _GITLINK_MODE]

        return blobs(e.old_entry for e in entries), blobs(e.new_entry for e in entries), [e.path for e in entries]

    def pager(self) -> str:
        """The pager git would use for the user (``GIT_PAGER``, ``core.pager`` of any config, ``PAGER``, else less); empty for none.

        Asked of git with the user's own environment and config (zmr's runs set
        both pagers to cat and read no user config): a display setting only.
        """
        env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_") or k == "GIT_PAGER"}
        try:
            proc = subprocess.run(["git", f"--git-dir={self.git_dir}", "var", "GIT_PAGER"], env=env, stdin=subprocess.DEVNULL, capture_output=True, check=False)
        except FileNotFoundError:  # pragma: no cover - git missing
            return ""
        pager = proc.stdout.decode("utf-8", "replace").strip() if proc.returncode == 0 else "less"
        return "" if pager in ("", "cat") else pager

    def keep_commits(self, prefix: str, commits: Sequence[str], message: str) -> None:
        """Refs ``<prefix><commit>`` for *commits*, each made anew so that its reflog entry says when it was last used."""
        wanted = sorted(set(commits))
        if not wanted:
            return
        existing = self._ref_values([f"{prefix}{c}" for c in wanted])
        if existing:
            self.run(["update-ref", "--stdin"], input="".join(f"delete {ref}\n" for ref in sorted(existing)).encode())
        lines = "".join(f"update {prefix}{c} {c}\n" for c in wanted)
        self.run(["update-ref", "--create-reflog", "-m", message, "--stdin"], input=lines.encode())

    def ref_times(self, prefix: str) -> dict[str, int]:
        """Each ref under *prefix* and the time of its newest reflog entry (0: it has no reflog)."""
        refs = sorted(self.refs(prefix))
        times = dict.fromkeys(refs, 0)
        for batch in argument_batches(refs):
            out = self.out(["log", "-g", "--format=%gd", "--date=unix", *batch], check=False)
            for line in out.splitlines():
                name, _, stamp = line.rstrip("}").rpartition("@{")
                full = name if name.startswith("refs/") else f"refs/{name}"
                if full in times and stamp.isdigit():
                    times[full] = max(times[full], int(stamp))
        return times

    def delete_refs(self, refs: Sequence[str]) -> None:
        if refs:
            self.run(["update-ref", "--stdin"], input="".join(f"delete {ref}\n" for ref in refs).encode())

    # -- index and commits --------------------------------------------------
    def read_tree(self, tree: str | None, *, env: Mapping[str, str] | None = None) -> None:
        """Set the index (*env*'s ``GIT_INDEX_FILE``) to *tree*; None empties it."""
        self.run(["read-tree", tree if tree is not None else "--empty"], env=env)

    def update_index(self, index_info: bytes, *, env: Mapping[str, str] | None = None) -> None:
        """``git update-index -z --index-info``: add the entries of *index_info* to the index."""
        self.run(["update-index", "-z", "--index-info"], input=index_info, env=env)

    def write_tree(self, *, missing_ok: bool = False, env: Mapping[str, str] | None = None) -> str:
        """The tree of the index; *missing_ok*: its blobs need not be present."""
        return self.out(["write-tree", *(["--missing-ok"] if missing_ok else [])], env=env)

    def ls_files(
        self, options: Sequence[str], paths: Sequence[str] = (), *, env: Mapping[str, str] | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[bytes]:
        """``git ls-files OPTIONS [-- PATHS]``: what the index (or work tree) holds."""
        return self.run(["ls-files", *options, *(["--", *paths] if paths else [])], env=env, check=check)

    def unmerged(self, paths: Sequence[str]) -> list[str]:
        """Those of *paths* (files or folders) with a file the index holds in conflict (a merge, pull or rebase stopped
        on it: ``git ls-files --unmerged``), each once, in order."""
        out = self.ls_files(["-z", "--unmerged"], paths).stdout.decode("utf-8", "surrogateescape")
        return list(dict.fromkeys(record.split("\t", 1)[1] for record in out.split("\0") if "\t" in record))

    def apply(
        self, options: Sequence[str], paths: Sequence[str] = (), *, input: bytes | None = None, env: Mapping[str, str] | None = None
    ) -> subprocess.CompletedProcess[bytes]:
        """``git apply OPTIONS PATHS`` (or the patch on *input*); the caller reads the exit status."""
        return self.run(["apply", *options, *paths], input=input, env=env, check=False)

    def commit_tree(self, tree: str, parents: Iterable[str], message: str, author: Identity, committer: Identity) -> str:
        args = ["commit-tree", tree]
        for parent in parents:
            args += ["-p", parent]
        env = {**author.env("AUTHOR"), **committer.env("COMMITTER")}
        return self.out(args, input=message.encode("utf-8"), env=env)

    def pick_tree(self, commit: str, parent: str, onto: str) -> PickedTree:
        """The tree ``git cherry-pick`` *commit* (its first parent *parent*) makes on a HEAD whose tree is *onto*, in objects only.

        ``git merge-tree --write-tree`` (git 2.38; ``MIN_GIT``): the merge
        cherry-pick makes (merge-ort, renames followed, merge's defaults: no
        user config), of *onto* and *commit* over *parent*. git before 2.40 takes
        no ``--merge-base``, so *onto* goes in as a commit whose one parent is
        *parent*: then *parent* is the merge base, as cherry-pick's is. That
        commit (fixed identity and date) is a throwaway object; nothing else is
        written but the merged trees and blobs. A conflict: the tree git wrote
        (with markers) and the paths it left unmerged, at their new names where
        a side renamed them.
        """
        from zmr.infra.gitrecords import Identity, PickedTree

        who = Identity("zmr", "zmr@localhost", 0)
        ours = self.commit_tree(onto, [parent], "zmr: a cherry-pick's HEAD\n", who, who)
        args = ["merge-tree", "--write-tree", "--name-only", "-z", "--no-messages", ours, commit]
        proc = self.run(args, check=False)
        if proc.returncode not in (0, 1) or not proc.stdout:
            if proc.returncode == 129:  # usage: a git before 2.38 reads merge-tree's old form only
                raise ZmrError(
                    f"{git_version()} cannot merge in memory (`git merge-tree --write-tree`)",
                    details=[f"install git {MIN_GIT} or newer: zmr update replays a series as rebase's cherry-picks do with it"],
                )
            raise GitError(["git", *args], proc.returncode, proc.stdout, proc.stderr)
        tree, *paths = proc.stdout.decode("utf-8", "surrogateescape").split("\0")
        return PickedTree(tree, tuple(dict.fromkeys(p for p in paths if p)) if proc.returncode else ())

    def fast_import(self, stream: bytes) -> dict[str, str]:
        """Feed *stream* to ``git fast-import``; its marks (``:N``) and the objects they name.

        The stream is responsible for its refs (zmr's streams end with a
        ``reset`` of the branch they used, so no ref is left behind).
        """
        import tempfile

        with tempfile.TemporaryDirectory(prefix="zmr-import-") as tmp, self._writing():
            marks = os.path.join(tmp, "marks")
            self.run(["fast-import", "--quiet", "--done", f"--export-marks={marks}"], input=stream)
            with open(marks, encoding="ascii") as handle:
                return dict(line.split() for line in handle if line.strip())

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        """``writer_lock`` held shared (`zmr.infra.lock`: the kernel drops it when this process dies); nothing without one."""
        if self.writer_lock is None:
            yield
            return
        with lock.hold_file(self.writer_lock, f"the writers of {self.git_dir}", shared=True):
            yield

    # -- refs ----------------------------------------------------------------
    def ref_value(self, ref: str) -> str | None:
        proc = self.run(["rev-parse", "--verify", "--quiet", "--end-of-options", ref], check=False)
        if proc.returncode != 0:
            return None
        return proc.stdout.decode().strip()

    def refs(self, pattern: str) -> dict[str, str]:
        text = self.out(["for-each-ref", "--format=%(objectname) %(refname)", pattern])
        result = {}
        for line in text.splitlines():
            oid, _, name = line.partition(" ")
            result[name] = oid
        return result

    def update_refs(self, updates: Sequence[RefUpdate], message: str) -> None:
        """Move refs in one transaction: all of them, or none (old values checked).

        Idempotent: when the transaction fails because another process moved
        some refs to exactly their new values (concurrent builds compute the
        same branches), those are done; the rest is tried again with the same
        old values. Any ref found elsewhere fails the whole update.
        """
        remaining = list(updates)
        while remaining:
            lines = ["start"]
            for upd in remaining:
                if upd.new is None:
                    lines.append(f"delete {upd.ref} {upd.old or ''}".rstrip())
                else:
                    lines.append(f"update {upd.ref} {upd.new} {upd.old or ZERO_OID}")
            lines += ["prepare", "commit", ""]
            try:
                self.run(["update-ref", "--create-reflog", "-m", message, "--stdin"], input="\n".join(lines).encode(), hint="no ref was moved")
                return
            except GitError:
                current = self._ref_values([u.ref for u in remaining])
                left = [u for u in remaining if current.get(u.ref) != u.new]
                if len(left) == len(remaining):
                    raise
                remaining = left  # fewer each time: this ends

    def update_ref(self, ref: str, new: str) -> None:
        """Set *ref* to *new* (no old value checked: refs zmr keeps for itself)."""
        self.run(["update-ref", ref, new])

    def head_symref(self) -> str | None:
        """The branch HEAD points at (``refs/heads/x``); None when HEAD is detached."""
        proc = self.run(["symbolic-ref", "--quiet", "HEAD"], check=False)
        return proc.stdout.decode("utf-8", "surrogateescape").strip() if proc.returncode == 0 else None

    def point_head(self, ref: str) -> None:
        """Make HEAD the symbolic ref *ref* (``refs/heads/x``): the work tree is not touched."""
        self.run(["symbolic-ref", "HEAD", ref])

    def detach_head(self, commit: str) -> None:
        """Make HEAD a detached *commit*: the work tree is not touched."""
        self.run(["update-ref", "--no-deref", "HEAD", commit])

    def first_ref_containing(self, commit: str, patterns: Sequence[str]) -> str:
        """The name of one ref matching *patterns* whose history holds *commit*; '' when none does."""
        return self.out(["for-each-ref", "--count=1", "--format=%(refname)", "--contains", commit, *patterns])

    def symbolic_full_name(self, name: str) -> str:
        """The full ref name *name* stands for (``main`` -> ``refs/heads/main``); '' when it names none."""
        proc = self.run(["rev-parse", "--symbolic-full-name", "--end-of-options", name], check=False)
        # rev-parse of git before 2.43 does not know --end-of-options: it echoes it as a line of its own.
        lines = [line for line in proc.stdout.decode("utf-8", "surrogateescape").splitlines() if line != "--end-of-options"]
        return lines[0] if proc.returncode == 0 and lines else ""

    def _ref_values(self, names: Sequence[str]) -> dict[str, str]:
        """The values of those refs *names* that exist, by ``for-each-ref`` (its patterns also match below a name: filtered)."""
        wanted = set(names)
        batches = argument_batches(sorted(wanted))  # for-each-ref of git 2.39 reads no patterns from stdin
        text = "\n".join(self.out(["for-each-ref", "--format=%(objectname) %(refname)", "--", *batch]) for batch in batches)
        pairs = (line.split(" ", 1) for line in text.splitlines() if line)
        return {name: oid for oid, name in pairs if name in wanted}

    def fetch(
        self,
        source: str,
        refspecs: Sequence[str],
        *,
        depth: int | None = None,
        extra: Sequence[str] = (),
        config: Sequence[str] = (),
        progress: Progress | None = None,
        own_source: bool = False,
        alternates: Sequence[str] = (),
    ) -> subprocess.CompletedProcess[bytes]:
        """``git fetch``; *config* (``key=value`` items) holds for this fetch only, never written to the repository.

        With *progress*, git's counts (objects, bytes) are passed to it as they come.
        *own_source*: *source* is a repository zmr manages (a mirror, the project), fetched over ``file`` whatever GIT_ALLOW_PROTOCOL says.
        *alternates*: object directories this fetch also reads (``GIT_ALTERNATE_OBJECT_DIRECTORIES``, for this process only):
        where ``index-pack --fix-thin`` finds the bases of a thin pack's deltas. It checks each base's bytes against its id
        before it copies it into the pack ("local object ... is corrupt"). git's transport does not pass the variable to a
        local upstream's ``upload-pack``. Their refs are not offered as haves (git offers every ref of an alternate, on top
        of ``--negotiation-tip``): the server never hears of another repository's commits.
        """
        if alternates:
            config = [*config, f"core.alternateRefsPrefixes={_NO_REFS}"]
        args = [arg for item in config for arg in ("-c", item)]
        args += ["fetch", "--progress" if progress else "--quiet", "--no-tags", "--no-write-fetch-head", "--no-auto-gc", "--no-recurse-submodules"]
        if depth is not None:
            args.append(f"--depth={depth}")
        args += list(extra)
        # Refspecs on stdin: there can be one per blob or commit wanted, more than the arguments of one process may hold.
        args += ["--stdin", "--end-of-options", source]
        refspec_lines = "".join(f"{spec}\n" for spec in refspecs).encode("utf-8", "surrogateescape")
        env = {"GIT_ALTERNATE_OBJECT_DIRECTORIES": ":".join(alternates)} if alternates else None
        return self.run(args, input=refspec_lines, transport=True, progress=progress, own_source=own_source, env=env)

    def push(self, args: Sequence[str]) -> subprocess.CompletedProcess[bytes]:
        """``git push ARGS``; the caller reads the exit status and the porcelain output."""
        return self.run(["push", *args], check=False, transport=True)

    def write_commit_graph(self) -> None:
        """Add the commits reachable from any ref to the commit-graph (a new layer; git merges small ones).

        Revision walks over a long history then read a table instead of
        parsing every commit (on Megatron-LM: 54 ms to 4 ms for a count of
        300 commits). Not in a shallow repository, where git ignores it. Only
        speed depends on it, so a failure is not an error.
        """
        self.run(["commit-graph", "write", "--reachable", "--split", "--no-progress"], check=False)

    def check_remote(self, remote: str) -> None:
        """Raise RemoteRefused, before any network command, when *remote* (a name or URL) is a remote helper or a protocol the caller forbids.

        A name is checked by the URL git would use for it (``url.*.insteadOf`` applied), read without contacting anyone.
        """
        check_remote(remote)
        url = self.out(["ls-remote", "--get-url", "--end-of-options", remote], transport=True, check=False)
        if url and url != remote:
            check_remote(url, what=f"remote {remote!r}:")

    def ls_remote(self, remote: str, patterns: Sequence[str] = ()) -> dict[str, str]:
        text = self.out(["ls-remote", "--end-of-options", remote, *patterns], transport=True)
        result = {}
        for line in text.splitlines():
            oid, _, name = line.partition("\t")
            result[name] = oid
        return result

    # -- config, work tree, worktrees ------------------------------------------
    def config_get(self, key: str, *, local: bool = False, bool_type: bool = False) -> str | None:
        """The value of *key* (``git config --get``; *local*: this repository's file only; *bool_type*: as ``true``/``false``); None when unset."""
        proc = self.run(["config", *(["--local"] if local else []), *(["--bool"] if bool_type else []), "--get", key], check=False)
        return proc.stdout.decode("utf-8", "surrogateescape").rstrip("\n") if proc.returncode == 0 else None

    def config_get_all(self, key: str) -> list[str]:
        """Every value of the multi-valued *key*; empty when unset."""
        proc = self.run(["config", "--get-all", key], check=False)
        return proc.stdout.decode("utf-8", "replace").splitlines() if proc.returncode == 0 else []

    def config_set(self, key: str, value: str) -> None:
        """Write *key* = *value* into the repository's config."""
        self.run(["config", key, value])

    def toplevel(self) -> str | None:
        """The top folder of the work tree; None outside one (or in a bare repository)."""
        proc = self.run(["rev-parse", "--show-toplevel"], check=False)
        top = proc.stdout.decode("utf-8", "surrogateescape").strip()
        return top if proc.returncode == 0 and top else None

    def absolute_toplevel(self) -> Path | None:
        """The top folder of the work tree git finds from here, as an absolute path; None outside one (or in a bare repository)."""
        proc = self.run(["rev-parse", "--path-format=absolute", "--show-toplevel"], check=False)
        top = proc.stdout.decode("utf-8", "surrogateescape").strip()
        return Path(top) if proc.returncode == 0 and top else None

    def absolute_git_dir(self) -> Path | None:
        """The git directory as an absolute path (a worktree's own one); None outside a repository."""
        proc = self.run(["rev-parse", "--path-format=absolute", "--git-dir"], check=False)
        return Path(proc.stdout.decode("utf-8", "surrogateescape").strip()) if proc.returncode == 0 else None

    def git_path(self, name: str) -> Path | None:
        """Where git keeps *name* (``info/exclude``), absolute; None outside a repository."""
        proc = self.run(["rev-parse", "--path-format=absolute", "--git-path", name], check=False)
        return Path(proc.stdout.decode("utf-8", "surrogateescape").strip()) if proc.returncode == 0 else None

    def is_ignored(self, path: str, *, no_index: bool = False) -> bool:
        """git's ignore rules apply to *path*; *no_index*: also where it is tracked."""
        return self.ok(["check-ignore", *(["--no-index"] if no_index else []), "-q", "--", path])

    def worktrees(self, *, nul: bool = True) -> list[dict[str, str]]:
        """``git worktree list --porcelain``: one record per worktree (``worktree``, ``HEAD``, ``branch``, ...; a bare word maps to '').

        *nul*: read the ``-z`` form (git 2.36), where a path may hold a newline.
        """
        text = self.out(["worktree", "list", "--porcelain", *(["-z"] if nul else [])])
        records: list[dict[str, str]] = []
        for line in text.split("\0" if nul else "\n"):
            key, _, value = line.partition(" ")
            if key == "worktree":
                records.append({})
            if line and records:
                records[-1][key] = value
        return records

    def worktree_add(self, path: str | os.PathLike[str], commit: str, *, hint: str = "") -> None:
        """A detached worktree of *commit* at *path* (no branch is created or checked out)."""
        self.run(["worktree", "add", "--detach", "--quiet", os.fspath(path), commit], hint=hint)

    def worktree_remove(self, path: str | os.PathLike[str]) -> bool:
        """Remove the worktree at *path*, changed or locked; False when git could not."""
        return self.ok(["worktree", "remove", "--force", "--force", os.fspath(path)])

    def worktree_prune(self) -> None:
        """Forget worktrees whose folders are gone."""
        self.run(["worktree", "prune"], check=False)


def init_bare(path: str | os.PathLike[str]) -> Repo:
    """A new bare repository at *path* (a folder, made when missing).

    Run there, so that a failure of the disk names *path*, not the folder zmr was started in.
    """
    Path(path).mkdir(parents=True, exist_ok=True)
    run(["init", "--quiet", "--bare"], cwd=path)
    return Repo(path)


def tree_entries(raw: bytes, oid_bytes: int) -> list[tuple[bytes, bytes]]:
    """The (mode, name) entries of a raw tree object; ValueError where it does not parse (fsck's ``badTree``)."""
    entries = []
    pos = 0
    while pos < len(raw):
        space = raw.find(b" ", pos)
        nul = raw.find(b"\0", space + 1) if space >= 0 else -1
        if space < 0 or nul < 0 or nul + 1 + oid_bytes > len(raw):
            raise ValueError(f"truncated entry at byte {pos}")
        entries.append((raw[pos:space], raw[space + 1 : nul]))
        pos = nul + 1 + oid_bytes
    return entries


# -- git's listings, parsed once here ------------------------------------------------------------
# Paths are decoded as UTF-8 with surrogateescape: a name that is not UTF-8 survives (``.encode("utf-8", "surrogateescape")``
# gives git's bytes back). Output that does not parse is a ValueError, never a shorter result.


def parse_ls_tree(out: bytes) -> list[TreeEntry]:
    """The entries of ``ls-tree -z`` output, with or without ``-l``, in git's order."""
    from zmr.infra.gitrecords import TreeEntry

    entries = []
    for record in out.split(b"\0"):
        if not record:
            continue  # the NUL after the last entry
        meta, tab, raw_path = record.partition(b"\t")
        fields = meta.split()
        if not tab or not raw_path or len(fields) not in (3, 4):
            raise ValueError(f"ls-tree: unreadable entry {record[:200]!r}")
        size = int(fields[3]) if len(fields) == 4 and fields[3] != b"-" else None
        entries.append(TreeEntry(fields[0].decode(), fields[1].decode(), fields[2].decode(), raw_path.decode("utf-8", "surrogateescape"), size))
    return entries


_GITLINK_MODE = "160000"  # a submodule's entry: a commit of another repository, no blob


def parse_raw_diff(out: bytes) -> dict[str, list[RawDiffEntry]]:
    """The records of ``diff-tree -r --raw -z`` output, under the line each follows with ``--stdin`` ("" before any line).

    With ``-z`` a commit's line ends with NUL; a "<tree> <tree>" line ends with a newline and runs straight into its first
    record (and a pair of equal trees is its line alone, straight before the next one's). Paths are taken by count after
    each record (two for a rename or copy), so no name is ever read as a line.
    """
    from zmr.infra.gitrecords import RawDiffEntry

    result: dict[str, list[RawDiffEntry]] = {}
    current: list[RawDiffEntry] | None = None
    tokens = out.split(b"\0")
    i = 0
    while i < len(tokens):
        token = tokens[i]
        i += 1
        while token and not token.startswith(b":"):
            line, _, token = token.partition(b"\n")
            current = result.setdefault(line.decode(), [])
        if not token:
            continue
        fields = token[1:].decode().split(" ")
        count = 2 if fields[-1][:1] in ("R", "C") else 1
        if len(fields) != 5 or i + count > len(tokens) or not all(tokens[i : i + count]):  # a path is never empty: after the last NUL is none
            raise ValueError(f"diff-tree: unreadable record {token[:200]!r}")
        paths = [name.decode("utf-8", "surrogateescape") for name in tokens[i : i + count]]
        i += count
        if current is None:
            current = result.setdefault("", [])
        old_mode, new_mode, old_oid, new_oid, status = fields
        current.append(RawDiffEntry(old_mode, new_mode, old_oid, new_oid, status, paths[-1], paths[0] if count == 2 else None))
    return result


_NO_OBJECT_SUFFIXES = (b" missing", b" ambiguous")  # "<name as asked> missing": the name could hold spaces


def _object_header(line: bytes) -> ObjectInfo | None:
    """``<id> <type> <size>``; None for a name that names no object."""
    from zmr.infra.gitrecords import ObjectInfo

    if line.endswith(_NO_OBJECT_SUFFIXES):
        return None
    fields = line.split(b" ")
    if len(fields) != 3 or not fields[2].isdigit():
        raise ValueError(f"cat-file: unreadable header {line[:200]!r}")
    return ObjectInfo(fields[0].decode(), fields[1].decode(), int(fields[2]))


def parse_cat_file_check(out: bytes) -> Iterator[ObjectInfo | None]:
    """Each line of ``cat-file --batch-check`` output (its default format), None where the name asked names no object."""
    for line in out.split(b"\n")[:-1]:
        yield _object_header(line)


def parse_cat_file_batch(out: bytes) -> Iterator[GitObject | None]:
    """Each object of ``cat-file --batch`` output in turn, None where the name asked names no object.

    An object's bytes are taken by the size its header gives and must be followed by the newline git adds.
    """
    from zmr.infra.gitrecords import GitObject

    pos = 0
    while pos < len(out):
        end = out.find(b"\n", pos)
        if end < 0:
            raise ValueError(f"cat-file: output ends inside a header at byte {pos}")
        header = out[pos:end]
        pos = end + 1
        if header.endswith(_NO_OBJECT_SUFFIXES):
            yield None
            continue
        fields = header.split(b" ")
        if len(fields) != 3 or not fields[2].isdigit():
            raise ValueError(f"cat-file: unreadable header {header[:200]!r}")
        size = int(fields[2])
        if out[pos + size : pos + size + 1] != b"\n":
            raise ValueError(f"cat-file: {fields[0].decode()} holds fewer than its {size} bytes")
        yield GitObject(fields[0].decode(), fields[1].decode(), size, out[pos : pos + size])
        pos += size + 1


def _batch_answers(queries: Sequence[str], answers: Iterator[_Answer]) -> list[_Answer]:
    """The answers, one per query; git answers each line it reads, in order, so any other count is a fault."""
    result = list(answers)
    if len(result) != len(queries):
        raise ValueError(f"cat-file: {len(result)} answers to {len(queries)} names")
    return result

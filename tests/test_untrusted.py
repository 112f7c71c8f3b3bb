"""Untrusted files and hostile output paths: real symlinks, FIFOs, devices, read-only mounts.

Every file zmr reads from the repository is a regular file inside it, size
checked before it is read; every file it writes replaces only a regular
file; an OSError is the user's disk, named, never "internal error".
"""

from __future__ import annotations

import io
import json
import os
import shutil
import stat
import struct
import subprocess
import sys
import threading
import zipfile
from pathlib import Path

import numpy as np
import pytest
from conftest import make_project, simple_model, zmr

SECRET = "RUNNER-SECRET-7f3a9"
RUNS_AS_ROOT = os.geteuid() == 0


def _outside_secret(tmp_path: Path) -> Path:
    secret = tmp_path / "outside" / "credentials"
    secret.parent.mkdir(parents=True, exist_ok=True)
    secret.write_text(f"{SECRET}: [unclosed\n  token = {SECRET}\n")
    return secret


def _no_leak(result) -> None:
    assert SECRET not in result.stdout and SECRET not in result.stderr
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr


def _replace_with_link(path: Path, target: Path) -> None:
    path.unlink()
    path.symlink_to(target)


def _replace_with_fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


# -- reading: symlinks out of the repository ---------------------------------------------------


@pytest.mark.parametrize("command", ["list", "validate"])
def test_manifest_linked_outside_is_refused_unread(tmp_path, upstream, project, command):
    simple_model(project, upstream)
    _replace_with_link(project.root / "manifests/toy.yaml", _outside_secret(tmp_path))
    result = zmr(command, cwd=project.root)
    assert result.returncode == 2, result.stderr
    assert "manifests/toy.yaml: resolves outside the repository" in result.stderr
    assert "replace the link with the file itself" in result.stderr
    _no_leak(result)


@pytest.mark.parametrize("command", ["list", "validate"])
def test_series_linked_outside_is_refused_unread(tmp_path, upstream, project, command):
    simple_model(project, upstream)
    _replace_with_link(project.root / "patches/toy/rollout/series", _outside_secret(tmp_path))
    result = zmr(command, cwd=project.root)
    assert result.returncode == 2, result.stderr
    assert "patches/toy/rollout/series: resolves outside the repository" in result.stderr
    _no_leak(result)


def test_settings_and_case_linked_outside_are_refused_unread(tmp_path, upstream, project):
    simple_model(project, upstream)
    secret = _outside_secret(tmp_path)
    (project.root / "zmr.yaml").symlink_to(secret)
    result = zmr("validate", cwd=project.root)
    assert result.returncode == 2
    assert "zmr.yaml: resolves outside the repository" in result.stderr
    _no_leak(result)
    (project.root / "zmr.yaml").unlink()
    (project.root / "cases/toy").mkdir(parents=True)
    (project.root / "cases/toy/case.yaml").symlink_to(secret)
    result = zmr("validate", cwd=project.root)
    assert result.returncode == 2
    assert "cases/toy/case.yaml: resolves outside the repository" in result.stderr
    _no_leak(result)


def test_manifests_folder_linked_outside_is_refused(tmp_path, upstream, project):
    simple_model(project, upstream)
    outside = tmp_path / "outside-manifests"
    shutil.move(project.root / "manifests", outside)
    (project.root / "manifests").symlink_to(outside)
    result = zmr("validate", cwd=project.root)
    assert result.returncode == 2
    assert "resolves outside the repository" in result.stderr


def test_links_that_stay_inside_the_repository_are_followed(upstream, project):
    simple_model(project, upstream)
    shared = project.root / "shared"
    shared.mkdir()
    shutil.move(project.root / "manifests/toy.yaml", shared / "toy.yaml")
    (project.root / "manifests/toy.yaml").symlink_to("../shared/toy.yaml")
    result = zmr("validate", cwd=project.root)
    assert result.returncode == 0, result.stderr


# -- reading: FIFOs, devices, sizes ----------------------------------------------------------------


@pytest.mark.parametrize("rel", ["manifests/toy.yaml", "patches/toy/rollout/series", "patches/toy/rollout/0001-fixed-split.patch"])
def test_fifo_in_the_repository_never_hangs(upstream, project, rel):
    simple_model(project, upstream)
    _replace_with_fifo(project.root / rel)
    result = zmr("validate", cwd=project.root, timeout=60)
    assert result.returncode == 2, result.stderr
    assert f"{rel}: is a FIFO (named pipe), not a regular file" in result.stderr
    _no_leak(result)
    result = zmr("list", cwd=project.root, timeout=60)
    assert result.returncode == 2


def test_settings_fifo_is_refused_not_ignored(upstream, project):
    simple_model(project, upstream)
    os.mkfifo(project.root / "zmr.yaml")
    result = zmr("validate", cwd=project.root, timeout=60)
    assert result.returncode == 2
    assert "zmr.yaml: is a FIFO (named pipe), not a regular file" in result.stderr


@pytest.mark.skipif(not RUNS_AS_ROOT, reason="mknod needs root")
def test_device_in_the_repository_is_refused_unread(upstream, project):
    simple_model(project, upstream)
    manifest = project.root / "manifests/toy.yaml"
    manifest.unlink()
    os.mknod(manifest, stat.S_IFCHR | 0o644, os.makedev(1, 5))  # a /dev/zero of the repository's own
    result = zmr("validate", cwd=project.root, timeout=60)
    assert result.returncode == 2
    assert "manifests/toy.yaml: is a device, not a regular file" in result.stderr


def test_link_to_dev_zero_is_refused_unread(upstream, project):
    simple_model(project, upstream)
    _replace_with_link(project.root / "patches/toy/rollout/0001-fixed-split.patch", Path("/dev/zero"))
    result = zmr("validate", cwd=project.root, timeout=60)
    assert result.returncode == 2
    assert "0001-fixed-split.patch resolves outside the series folder" in result.stderr
    assert "MemoryError" not in result.stderr
    (project.root / "zmr.yaml").symlink_to("/dev/zero")
    result = zmr("list", cwd=project.root, timeout=60)
    assert result.returncode == 2
    assert "zmr.yaml: resolves outside the repository" in result.stderr


def test_oversized_patch_is_refused_before_it_is_read(upstream, project):
    simple_model(project, upstream)
    patch = project.root / "patches/toy/rollout/0001-fixed-split.patch"
    with open(patch, "r+b") as handle:
        handle.truncate((64 << 20) + 1)  # sparse: refused by its size, not by reading it
    result = zmr("validate", cwd=project.root)
    assert result.returncode == 2
    assert f"0001-fixed-split.patch: file is {(64 << 20) + 1} bytes, over the limit of {64 << 20} for a patch" in result.stderr


# -- reading: dumps on the command line ------------------------------------------------------------


def _mismatch(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "zmr", "mismatch", *map(str, args)], capture_output=True, text=True, timeout=60, check=False)


def _good_dump(path: Path) -> Path:
    from zmr.evidence.mismatch import write_dump

    write_dump(path, [{"id": "a", "step": 0, "tokens": [1, 2], "logprobs": np.asarray([-0.5, -1.0], dtype=np.float32)}])
    return path


@pytest.mark.parametrize("suffix", [".jsonl", ".npz", ".safetensors"])
def test_fifo_dump_is_refused_without_hanging(tmp_path, suffix):
    fifo = tmp_path / f"d{suffix}"
    os.mkfifo(fifo)
    result = _mismatch(fifo, _good_dump(tmp_path / "good.jsonl"))
    assert result.returncode == 2
    assert f"{fifo}: is a FIFO (named pipe), not a regular file" in result.stderr


def test_dump_linked_to_dev_zero_is_refused(tmp_path):
    link = tmp_path / "d.safetensors"
    link.symlink_to("/dev/zero")
    result = _mismatch(link, _good_dump(tmp_path / "good.jsonl"))
    assert result.returncode == 2
    assert f"{link}: is a device, not a regular file" in result.stderr


def test_deeply_nested_json_dump_line(tmp_path):
    dump = tmp_path / "d.jsonl"
    dump.write_text("[" * 100_000 + "]" * 100_000 + "\n" + '{"a": ' * 200 + "1" + "}" * 200 + "\n")
    result = _mismatch(dump, _good_dump(tmp_path / "good.jsonl"))
    assert result.returncode == 2, result.stderr
    assert f"{dump}:1: not a dump record (nested more than 64 levels deep)" in result.stderr
    assert f"{dump}:2: not a dump record (nested more than 64 levels deep)" in result.stderr
    assert "Traceback" not in result.stderr


def _safetensors(path: Path, header: dict | bytes, body: bytes = b"", hlen: int | None = None) -> Path:
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw) if hlen is None else hlen) + raw + body)
    return path


@pytest.mark.parametrize(
    "header, body, hlen, message",
    [
        ({"step": {"dtype": "I64", "shape": [-2, -4], "data_offsets": [0, 64]}}, bytes(64), None, "tensor 'step' has a negative dimension"),
        ({"step": {"dtype": "I64", "shape": [1 << 62, 1 << 62], "data_offsets": [0, 8]}}, bytes(8), None, "tensor 'step' has offsets that do not match"),
        ({"step": {"dtype": "I64", "shape": [1e400], "data_offsets": [0, 8]}}, bytes(8), None, "tensor 'step' has a malformed header entry"),
        ({}, b"", (1 << 64) - 1, "header length 18446744073709551615 past the end"),
        (b"[" * 50_000 + b"]" * 50_000, b"", None, "bad header: nested more than 64 levels deep"),
    ],
)
def test_hostile_safetensors_dump(tmp_path, header, body, hlen, message):
    dump = _safetensors(tmp_path / "d.safetensors", header, body, hlen)
    result = _mismatch(dump, _good_dump(tmp_path / "good.jsonl"))
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def _npy_header(shape: tuple[int, ...], dtype: str = "<i8") -> bytes:
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, {"descr": dtype, "fortran_order": False, "shape": shape})
    return buffer.getvalue()  # magic, version and header


def test_npz_whose_npy_header_claims_terabytes(tmp_path):
    dump = tmp_path / "d.npz"
    with zipfile.ZipFile(dump, "w") as zf:
        zf.writestr("step.npy", _npy_header((1 << 40,)) + bytes(8))
    result = _mismatch(dump, _good_dump(tmp_path / "good.jsonl"))
    assert result.returncode == 2, result.stderr
    assert f"{dump}: step.npy: claims an array of shape [1099511627776] ({8 << 40} bytes)" in result.stderr
    assert "MemoryError" not in result.stderr and "Traceback" not in result.stderr


def test_npz_whose_zip_header_claims_terabytes(tmp_path):
    dump = tmp_path / "d.npz"
    with zipfile.ZipFile(dump, "w") as zf:
        zf.writestr("step.npy", _npy_header((1,)) + bytes(8))
    data = bytearray(dump.read_bytes())
    central = data.rindex(b"PK\x01\x02")
    struct.pack_into("<I", data, central + 24, 0xFFFFFFF0)  # uncompressed size in the central directory: ~4 GiB
    struct.pack_into("<I", data, central + 20, 0xFFFFFFF0)  # and the compressed size
    dump.write_bytes(bytes(data))
    result = _mismatch(dump, _good_dump(tmp_path / "good.jsonl"))
    assert result.returncode == 2, result.stderr
    assert f"{dump}: step.npy: its zip header claims {0xFFFFFFF0} bytes" in result.stderr


def test_locate_fifo_and_device_dumps(tmp_path):
    fifo = tmp_path / "step-0.safetensors"
    os.mkfifo(fifo)
    result = subprocess.run([sys.executable, "-m", "zmr", "locate", str(fifo), str(fifo)], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2
    assert f"{fifo}: is a FIFO (named pipe), not a regular file" in result.stderr
    result = subprocess.run([sys.executable, "-m", "zmr", "locate", "/dev/zero", "/dev/zero"], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2
    assert "/dev/zero: is a device, not a regular file" in result.stderr


def test_locate_negative_shapes(tmp_path):
    meta = {"zmr_locate": "1", "index": json.dumps({"side": "rollout", "step": 0, "seq_ids": [], "rowsets": [], "records": []})}
    dump = _safetensors(tmp_path / "step-0.safetensors", {"__metadata__": meta, "t": {"dtype": "F32", "shape": [-1, -4], "data_offsets": [0, 16]}}, bytes(16))
    result = subprocess.run([sys.executable, "-m", "zmr", "locate", str(dump), str(dump)], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2, result.stderr
    assert "has a negative dimension" in result.stderr
    assert "Traceback" not in result.stderr


# -- writing: never replace what is not a regular file ---------------------------------------------


def _smoke_junit(project, target: Path | str, **kw) -> subprocess.CompletedProcess:
    return zmr("smoke", "--all", "--junit", str(target), cwd=project.root, **kw)


@pytest.mark.skipif(not RUNS_AS_ROOT, reason="mknod needs root")
def test_junit_to_a_null_device_leaves_it_a_device(tmp_path, upstream, project):
    simple_model(project, upstream)
    null = tmp_path / "null"
    os.mknod(null, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # the host's /dev/null, as root would see it
    result = _smoke_junit(project, null)
    assert result.returncode == 0, result.stderr
    assert stat.S_ISCHR(null.lstat().st_mode) and null.lstat().st_rdev == os.makedev(1, 3)
    assert not list(tmp_path.glob(".null.*"))


@pytest.mark.skipif(not RUNS_AS_ROOT, reason="mknod needs root")
def test_junit_to_a_full_device_is_a_disk_full_error(tmp_path, upstream, project):
    simple_model(project, upstream)
    full = tmp_path / "full"
    os.mknod(full, stat.S_IFCHR | 0o666, os.makedev(1, 7))  # /dev/full: every write is ENOSPC
    result = _smoke_junit(project, full)
    assert result.returncode == 2
    assert f"zmr: error: {full}: No space left on device" in result.stderr
    assert "the disk is full" in result.stderr
    assert "internal error" not in result.stderr and "Traceback" not in result.stderr


def test_junit_to_a_fifo_is_written_into_it(tmp_path, upstream, project):
    simple_model(project, upstream)
    fifo = tmp_path / "junit.fifo"
    os.mkfifo(fifo)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()))
    reader.start()
    result = _smoke_junit(project, fifo)
    reader.join(30)
    assert result.returncode == 0, result.stderr
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    assert received and received[0].startswith(b"<?xml") and b"<testsuites" in received[0]


@pytest.mark.parametrize("fd_path", ["/proc/self/fd/1", "/dev/fd/1"])
def test_junit_to_stdout_goes_through_the_descriptor(tmp_path, upstream, project, fd_path):
    simple_model(project, upstream)
    out = tmp_path / "stdout.txt"
    with open(out, "wb") as handle:
        argv = [sys.executable, "-m", "zmr", "smoke", "--all", "--junit", fd_path]
        proc = subprocess.run(argv, cwd=project.root, stdout=handle, stderr=subprocess.PIPE, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    assert "<testsuites" in text and f"JUnit report: {fd_path}" in text


def test_output_to_a_folder_is_refused(tmp_path, upstream, project):
    simple_model(project, upstream)
    folder = tmp_path / "reports"
    folder.mkdir()
    result = _smoke_junit(project, folder)
    assert result.returncode == 2
    assert f"zmr: error: {folder}: is a folder" in result.stderr
    assert folder.is_dir() and not list(folder.iterdir())


def test_output_under_a_file_is_a_user_error(tmp_path, upstream, project):
    simple_model(project, upstream)
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    result = _smoke_junit(project, blocker / "junit.xml")
    assert result.returncode == 2
    assert str(blocker) in result.stderr and "a part of the path is a file, not a folder" in result.stderr
    assert "internal error" not in result.stderr


def test_output_through_a_symlink_writes_the_file_it_names(tmp_path, upstream, project):
    simple_model(project, upstream)
    real = tmp_path / "real.xml"
    real.write_text("old")
    real.chmod(0o640)
    link = tmp_path / "link.xml"
    link.symlink_to(real)
    result = _smoke_junit(project, link)
    assert result.returncode == 0, result.stderr
    assert link.is_symlink() and real.read_text().startswith("<?xml")
    assert stat.S_IMODE(real.stat().st_mode) == 0o640


def test_plot_to_a_fifo(tmp_path):
    pytest.importorskip("matplotlib")
    fifo = tmp_path / "plot.png"
    os.mkfifo(fifo)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()))
    reader.start()
    good = _good_dump(tmp_path / "good.jsonl")
    result = _mismatch(good, good, "--plot", fifo)
    reader.join(30)
    assert result.returncode == 0, result.stderr
    assert stat.S_ISFIFO(fifo.lstat().st_mode) and received[0].startswith(b"\x89PNG")


# -- OSError: the disk, named; never blamed on a patch ----------------------------------------------


def _read_only_run(cache: Path, argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """Run zmr with *cache* bind-mounted read-only in a private mount namespace: a real EROFS, even for root."""
    script = 'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && shift && exec "$@"'
    command = ["unshare", "-m", "sh", "-c", script, "sh", str(cache), sys.executable, "-m", "zmr", *argv]
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=300, check=False)


def _can_mount_read_only(tmp_path: Path) -> bool:
    probe = tmp_path / "probe"
    probe.mkdir()
    if shutil.which("unshare") is None:
        return False
    script = f'mount --bind "{probe}" "{probe}" && mount -o remount,bind,ro "{probe}" && ! touch "{probe}/x"'
    proc = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, check=False)
    return proc.returncode == 0


def test_read_only_cache_is_reported_as_the_cache_not_the_patch(tmp_path, upstream, project):
    if not _can_mount_read_only(tmp_path):
        pytest.skip("needs unshare -m and mount (a read-only bind mount)")
    simple_model(project, upstream)
    assert zmr("fetch", cwd=project.root).returncode == 0  # the mirror holds the pin, not the patched blobs
    cache = Path(os.environ["ZMR_CACHE"])
    result = _read_only_run(cache, ["build", "toy"], project.root)
    assert result.returncode == 2, result.stderr
    assert f"zmr: error: {cache}/mirrors/" in result.stderr
    assert "git cannot write there (the file system is mounted read-only)" in result.stderr
    assert "ZMR_CACHE" in result.stderr
    assert "does not apply" not in result.stderr and "refresh the patch" not in result.stderr
    assert set(project.refs()) == {"refs/heads/main"}


def test_os_error_advice_per_errno():
    import errno

    from zmr.infra.files import os_error

    for code, words in [(errno.ENOSPC, "disk is full"), (errno.EROFS, "read-only"), (errno.EACCES, "permission denied"), (errno.EISDIR, "is a folder")]:
        err = os_error(OSError(code, os.strerror(code), "/some/where"))
        assert err.exit_code == 2
        assert err.message == f"/some/where: {os.strerror(code)}"
        assert words in err.details[0]


def test_unwritable_report_under_rebase_is_named(tmp_path):
    make_project(tmp_path / "p")  # the handler maps an OSError of any command; a report path under a file is one
    from zmr.infra.files import atomic_write

    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(OSError) as info:
        atomic_write(blocker / "r.md", b"x")
    assert info.value.filename is not None and str(blocker) in str(info.value.filename)


# -- names git refuses, and names that hide characters ----------------------------------------------

_REF_CORPUS = [
    "a./b", "a/.b", "a.lock/b", "a/b.lock", ".a", "a..b", "a.", "a@{b", "a@b", "a/@/b", "a//b", "/a", "a/", "a b", "a~b", "a^b", "a:b",
    "a?b", "a*b", "a[b", "a\\b", "a\x7fb", "a\tb", "ä", "a/.lock", "lock.a", "a.lock.b", "a/b./c", "x.loc", "a/..", "..", ".", "a.b.", "a/HEAD", "{",
]


@pytest.mark.parametrize("name", _REF_CORPUS)
def test_ref_format_problem_agrees_with_git(name):
    from zmr.model.manifest import ref_format_problem

    git_accepts = subprocess.run(["git", "check-ref-format", f"refs/heads/{name}"], capture_output=True, check=False).returncode == 0
    assert (ref_format_problem(name) == "") == git_accepts, ref_format_problem(name)


@pytest.mark.parametrize("model, reason", [("x.lock", "a part ending with '.lock'"), ("a..b", "'..'"), ("trailing.", "ends with '.'")])
def test_model_names_git_refuses_fail_in_validate(upstream, project, model, reason):
    simple_model(project, upstream, model=model)
    result = zmr("validate", cwd=project.root)
    assert result.returncode == 2, result.stderr
    assert f"manifests/{model}.yaml: model name {model!r} cannot be part of a branch name ({reason})" in result.stderr
    assert not list(Path(os.environ["ZMR_CACHE"]).glob("mirrors/*.git"))


@pytest.mark.parametrize(
    "branch, reason",
    [
        ("rel/x.lock", "a part ending with '.lock'"),
        ("rel/a..b", "'..'"),
        ("rel/a.", "ends with '.'"),
        ("rel/@{u}", "'@{'"),
        ("rel/.hidden", "a part starting with '.'"),
        ("rel/a\u200bb", "invisible or bidirectional character U+200B"),
        ("rel/\u202eevil", "invisible or bidirectional character U+202E"),
        ("rel/\u2066x\u2069", "invisible or bidirectional character U+2066"),
        ("\ufeffrel/x", "invisible or bidirectional character U+FEFF"),
        ("rel/a\u00a0b", "invisible or bidirectional character U+00A0"),
        ("rel/t\u043ey", "non-ASCII character 'о' (U+043E), which can look like another branch's letter"),
    ],
)
def test_branch_names_git_refuses_or_that_hide_characters(upstream, project, branch, reason):
    pin = simple_model(project, upstream)
    text = (project.root / "manifests/toy.yaml").read_text(encoding="utf-8")
    (project.root / "manifests/toy.yaml").write_text(text.replace("    track: main\n", f'    track: main\n    branch: "{branch}"\n'), encoding="utf-8")
    result = zmr("validate", cwd=project.root)
    assert result.returncode == 2, result.stderr
    assert f"components.rollout.branch: {branch!r} is not a valid branch name ({reason})" in result.stderr
    assert pin


def test_track_may_be_non_ascii_but_not_invisible(upstream, project):
    simple_model(project, upstream)
    path = project.root / "manifests/toy.yaml"
    text = path.read_text(encoding="utf-8")
    path.write_text(text.replace("track: main", "track: release/größe"), encoding="utf-8")
    assert zmr("validate", cwd=project.root).returncode == 0
    path.write_text(text.replace("track: main", 'track: "main\u200d"'), encoding="utf-8")
    result = zmr("validate", cwd=project.root)
    assert result.returncode == 2
    assert "components.rollout.track: 'main\\u200d' is not a valid ref name (invisible or bidirectional character U+200D)" in result.stderr


# -- patch guards: every way a patch names a path ------------------------------------------------------


def _git_binary(content: bytes) -> bytes:
    """A ``GIT binary patch`` literal of *content*, as git writes it (zlib, base85 lines of 52 bytes)."""
    import base64
    import zlib

    packed = zlib.compress(content)
    out = [b"GIT binary patch", b"literal %d" % len(content)]
    for i in range(0, len(packed), 52):
        chunk = packed[i : i + 52]
        code = ord("A") + len(chunk) - 1 if len(chunk) <= 26 else ord("a") + len(chunk) - 27
        out.append(bytes([code]) + base64.b85encode(chunk + b"\0" * (-len(chunk) % 4)))
    return b"\n".join(out) + b"\n\nliteral 0\nHcmV?d00001\n\n"


def test_binary_symlink_inside_the_tree_is_checked_and_applies(tmp_path, upstream, project):
    from conftest import git

    pin = upstream.commits[-1]
    oid = git("hash-object", "--stdin", input=b"../README.md")
    header = b"diff --git a/docs/readme-link b/docs/readme-link\nnew file mode 120000\nindex " + b"0" * 40 + b".." + oid.encode() + b"\n"
    patch = header + _git_binary(b"../README.md")
    from zmr.model.series import unsafe_path_problem

    assert unsafe_path_problem(patch) == ""
    project.series("m", "c", [("0001-link.patch", patch)])
    project.manifest("m", f"model: m\ncomponents:\n  c:\n    upstream: {upstream.path}\n    commit: {pin}\n")
    result = zmr("build", "m", cwd=project.root)
    assert result.returncode == 0, result.stderr
    assert git("ls-tree", "c/m", "docs/readme-link", cwd=project.root).startswith("120000 blob " + oid)


def test_quoted_non_ascii_paths_apply_and_name_their_hunks(upstream, project):
    from conftest import make_patch

    pin = upstream.commits[-1]
    patch = make_patch(upstream, pin, {"docs/größe.md": "ä\n"}, "Add a file with a non-ASCII name")
    assert b'"b/docs/gr\\303\\266\\303\\237e.md"' in patch  # git quotes it
    from zmr.model.series import list_hunks

    assert [h.file for h in list_hunks(patch)] == ["docs/größe.md"]
    project.series("m", "c", [("0001-umlaut.patch", patch)])
    project.manifest("m", f"model: m\ncomponents:\n  c:\n    upstream: {upstream.path}\n    commit: {pin}\n")
    result = zmr("build", "m", cwd=project.root)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("part", [".git", ".GIT", ".Git", ".git.", ".git ", ".g\u200cit", "\ufeff.git", ".gi\u206at", "git~1", "GIT~1",
                                  ".git::$INDEX_ALLOCATION"])
def test_every_spelling_of_dotgit(part):
    from zmr.model.series import is_dotgit

    assert is_dotgit(part)


@pytest.mark.parametrize("part", [".github", ".gitignore", "git", ".gi", "x.git", "git~2"])
def test_names_that_only_look_like_dotgit(part):
    from zmr.model.series import is_dotgit

    assert not is_dotgit(part)


# -- NUL bytes in hunks, mboxes -----------------------------------------------------------------------


def _nul_upstream(tmp_path):
    from conftest import make_upstream

    return make_upstream(tmp_path / "nul-up", [{"fuzz/crash-1": "a\0b\nline2\n", "README.md": "hi\n"}])


def test_text_hunks_with_nul_bytes_apply_as_git_applies_them(tmp_path, project):
    up = _nul_upstream(tmp_path)
    pin = up.commits[-1]
    patch = (
        b"From: Fuzz Bot <fuzz@zmr.invalid>\nDate: Mon, 1 Jan 2024 00:00:00 +0000\nSubject: [PATCH] Update the crash reproducer\n\n---\n"
        b"diff --git a/fuzz/crash-1 b/fuzz/crash-1\n--- a/fuzz/crash-1\n+++ b/fuzz/crash-1\n@@ -1,2 +1,2 @@\n-a\0b\n+a\0c\n line2\n"
    )
    project.series("m", "c", [("0001-nul.patch", patch)])
    project.manifest("m", f"model: m\ncomponents:\n  c:\n    upstream: {up.path}\n    commit: {pin}\n")
    assert zmr("validate", cwd=project.root).returncode == 0
    result = zmr("build", "m", cwd=project.root)
    assert result.returncode == 0, result.stderr
    blob = subprocess.run(["git", "cat-file", "blob", "c/m:fuzz/crash-1"], cwd=project.root, capture_output=True, check=True).stdout
    assert blob == b"a\0c\nline2\n"
    from zmr.model.series import parse_patch

    parsed = parse_patch(patch, "0001-nul.patch")
    assert (parsed.author_name, parsed.subject) == ("Fuzz Bot", "Update the crash reproducer")


def test_nul_in_the_message_is_refused(tmp_path, project):
    up = _nul_upstream(tmp_path)
    patch = (b"From: A <a@zmr.invalid>\nSubject: [PATCH] Evil\0subject\n\n---\n"
             b"diff --git a/README.md b/README.md\n--- a/README.md\n+++ b/README.md\n@@ -1 +1 @@\n-hi\n+ho\n")
    project.series("m", "c", [("0001-nul-subject.patch", patch)])
    project.manifest("m", f"model: m\ncomponents:\n  c:\n    upstream: {up.path}\n    commit: {up.commits[-1]}\n")
    result = zmr("validate", cwd=project.root)
    assert result.returncode == 2
    assert "0001-nul-subject.patch: NUL byte in the message (before the diff)" in result.stderr


def test_an_mbox_of_several_mails_is_a_clear_error(tmp_path, upstream, project):
    from conftest import make_patch

    pin = upstream.commits[-1]
    first = make_patch(upstream, pin, {"README.md": "one\n"}, "First change")
    second = make_patch(upstream, pin, {"docs/guide.md": "two\n"}, "Second change")
    project.series("m", "c", [("0001-both.patch", first + second)])
    project.manifest("m", f"model: m\ncomponents:\n  c:\n    upstream: {upstream.path}\n    commit: {pin}\n")
    for command in ("validate", "build"):
        result = zmr(command, *(["m"] if command == "build" else []), cwd=project.root)
        assert result.returncode == 2
        assert "patches/m/c/0001-both.patch: holds 2 mails (an mbox)" in result.stderr
        assert "git mailsplit" in result.stderr
    # One mail whose body quotes an mbox line ("From " escaped, or in prose) is one patch.
    prose = first.replace(b"\n---\n", b"\n\nFrom the discussion on the list: yes.\n---\n", 1)
    project.series("m", "c", [("0001-both.patch", prose)])
    assert zmr("validate", cwd=project.root).returncode == 0


# -- --untrusted: upstream paths that reach outside through links -----------------------------------


def _bundle_model(project, upstream, spec: str) -> None:
    project.manifest("m", f"model: m\ncomponents:\n  c:\n    upstream: {spec}\n    commit: {upstream.commits[-1]}\n")
    project.write("patches/m/c/series", "")  # no patches: an empty series (a missing folder is an error)


def test_untrusted_upstream_linked_outside_is_refused(tmp_path, upstream, project):
    (project.root / "upstreams").mkdir()
    (project.root / "upstreams/up.git").symlink_to(upstream.path)
    _bundle_model(project, upstream, "upstreams/up.git")
    assert zmr("validate", cwd=project.root).returncode == 0  # trusted: a local link is the user's own
    result = zmr("validate", "--untrusted", cwd=project.root)
    assert result.returncode == 2
    assert ("components.c.upstream: path 'upstreams/up.git' reaches outside the repository through the symbolic link 'upstreams/up.git', "
            "refused for untrusted manifests") in result.stderr


def test_untrusted_upstream_with_a_link_inside_it_is_refused(tmp_path, upstream, project):
    from conftest import git

    inside = project.root / "upstreams/up.git"
    git("clone", "-q", "--bare", str(upstream.path), str(inside))
    shutil.rmtree(inside / "refs/tags", ignore_errors=True)
    (inside / "refs/tags").symlink_to(tmp_path / "outside-refs", target_is_directory=True)
    (tmp_path / "outside-refs").mkdir()
    _bundle_model(project, upstream, "upstreams/up.git")
    result = zmr("validate", "--untrusted", cwd=project.root)
    assert result.returncode == 2
    assert "through the symbolic link 'upstreams/up.git/refs/tags'" in result.stderr
    (inside / "refs/tags").unlink()
    (inside / "refs/tags").mkdir()
    assert zmr("validate", "--untrusted", cwd=project.root).returncode == 0, "a plain upstream inside the repository is fine"


# -- --untrusted: upstreams that read another repository; the caller's protocols; remote helpers --------


def _gitfile(project, upstream, tmp_path) -> str:
    (project.root / "upstreams").mkdir()
    (project.root / "upstreams/up").write_text(f"gitdir: {upstream.path / '.git'}\n")
    return "upstreams/up"


def _alternates(project, upstream, tmp_path) -> str:
    from conftest import git

    bare = project.root / "upstreams/up.git"
    git("init", "-q", "--bare", str(bare))
    (bare / "objects/info/alternates").write_text(f"{upstream.path / '.git/objects'}\n")
    git("update-ref", "refs/heads/main", upstream.commits[-1], cwd=bare)
    return "upstreams/up.git"


def _nested_alternates(project, upstream, tmp_path) -> str:
    """A plain folder upstream whose committed bare repository (deeper in it) borrows outside objects."""
    from conftest import git

    folder = project.root / "upstreams/tree"
    git("init", "-q", "--bare", str(folder / "vendor/inner.git"))
    (folder / "vendor/inner.git/objects/info/alternates").write_text(f"{upstream.path / '.git/objects'}\n")
    (folder / "README").write_text("vendored\n")
    return "upstreams/tree"


def _commondir(project, upstream, tmp_path) -> str:
    from conftest import git

    bare = project.root / "upstreams/up.git"
    git("init", "-q", "--bare", str(bare))
    (bare / "commondir").write_text(f"{upstream.path / '.git'}\n")
    return "upstreams/up.git"


def _dotgit_sibling(project, upstream, tmp_path) -> str:
    """`upstreams/up` is no repository, so git reads `upstreams/up.git`: a link to outside."""
    (project.root / "upstreams/up").mkdir(parents=True)
    (project.root / "upstreams/up/README").write_text("not a repository\n")
    (project.root / "upstreams/up.git").symlink_to(upstream.path / ".git")
    return "upstreams/up"


@pytest.mark.parametrize(
    ("layout", "named", "how"),
    [
        (_gitfile, "upstreams/up", "a gitfile names another git directory"),
        (_alternates, "upstreams/up.git/objects/info/alternates", "objects/info/alternates names another object folder"),
        (_nested_alternates, "upstreams/tree/vendor/inner.git/objects/info/alternates", "objects/info/alternates names another object folder"),
        (_commondir, "upstreams/up.git/commondir", "commondir names another git directory"),
        (_dotgit_sibling, None, None),
    ],
    ids=["gitfile", "alternates", "nested-bare-alternates", "commondir", "dotgit-sibling-link"],
)
def test_untrusted_upstream_reading_another_repository_is_refused(tmp_path, upstream, project, layout, named, how):
    spec = layout(project, upstream, tmp_path)
    _bundle_model(project, upstream, spec)
    assert zmr("validate", cwd=project.root).returncode == 0  # trusted: the user's own layout
    result = zmr("validate", "--untrusted", cwd=project.root)
    assert result.returncode == 2, result.stderr
    if named is None:
        assert f"components.c.upstream: path {spec!r} reaches outside the repository through the symbolic link 'upstreams/up.git'" in result.stderr
    else:
        assert f"components.c.upstream: path {spec!r} reads another repository through {named!r} ({how}), refused for untrusted manifests" in result.stderr


def test_a_gitfile_upstream_really_reads_the_outside_repository(tmp_path, upstream, project):
    """Why the gitfile is refused: trusted, it builds the outside repository's commit into a branch."""
    spec = _gitfile(project, upstream, tmp_path)
    _bundle_model(project, upstream, spec)
    project.commit_all("gitfile upstream")
    result = zmr("build", "m", cwd=project.root)
    assert result.returncode == 0, result.stderr
    assert project.ref("refs/heads/c/m") is not None


def test_the_callers_git_allow_protocol_is_kept_for_upstreams(tmp_path, upstream, project):
    """GIT_ALLOW_PROTOCOL=https forbids the file protocol: a local upstream is refused before git starts, nothing fetched."""
    simple_model(project, upstream)
    result = zmr("fetch", cwd=project.root, env={"GIT_ALLOW_PROTOCOL": "https"})
    assert result.returncode == 2, result.stderr
    assert f"upstream '{upstream.path}' uses the 'file' protocol, which GIT_ALLOW_PROTOCOL=https does not allow" in result.stderr
    assert not list(Path(os.environ["ZMR_CACHE"]).glob("mirrors/*.git/refs/zmr/pins/*"))
    assert zmr("fetch", cwd=project.root, env={"GIT_ALLOW_PROTOCOL": "https:file"}).returncode == 0


def test_the_callers_git_allow_protocol_reaches_git(tmp_path, upstream, project):
    """An https upstream that the user's insteadOf turns into a path: git itself must still refuse the file protocol."""
    simple_model(project, upstream, upstream_spec="https://example.invalid/toy.git")
    (Path(os.environ["HOME"]) / ".gitconfig").write_text(f'[url "{upstream.path}"]\n\tinsteadOf = https://example.invalid/toy.git\n')
    assert zmr("fetch", cwd=project.root).returncode == 0  # the rewrite works
    shutil.rmtree(os.environ["ZMR_CACHE"])
    result = zmr("fetch", cwd=project.root, env={"GIT_ALLOW_PROTOCOL": "https"})
    assert result.returncode == 2, result.stderr
    assert "transport 'file' not allowed" in result.stderr
    assert not list(Path(os.environ["ZMR_CACHE"]).glob("mirrors/*.git/refs/zmr/pins/*"))


@pytest.mark.parametrize("remote", ["fd::0", "ext::sh -c touch% /tmp/zmr-ext-ran", "evil"])
@pytest.mark.parametrize("command", ["verify", "publish"])
def test_remote_helpers_are_refused_before_git_starts(tmp_path, upstream, project, command, remote):
    from conftest import git

    simple_model(project, upstream)
    git("remote", "add", "evil", "fd::0", cwd=project.root)
    assert zmr("build", "toy", cwd=project.root).returncode == 0
    result = zmr(command, "toy", "--remote", remote, cwd=project.root, timeout=60)  # it hung before
    assert result.returncode == 2, result.stderr
    helper = remote.split("::")[0] + "::" if "::" in remote else "fd::"  # the remote `evil` is refused by its URL
    assert f"names the remote helper {helper!r}, not a URL" in result.stderr
    assert "Traceback" not in result.stderr and not Path("/tmp/zmr-ext-ran").exists()

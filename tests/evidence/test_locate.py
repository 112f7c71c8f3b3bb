"""`zmr locate` and `zmr.evidence.locate`: tensor dumps, pairing, the first diverging operation, the demo walk.

Synthetic dumps are written with the real recorder (`Recorder`, `dump`) from
rows computed here, with divergences planted by hand; the command runs as a
subprocess. The demo walk records the real toy engines (torch on CPU) for
series prefixes of both sides and checks which operation is found each time.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path

import numpy as np
import pytest

import demo_walk
from conftest import REPO_ROOT, zmr
from zmr.infra.errors import ZmrError
from zmr.evidence.locate import Recorder, Rows, dump, hook_modules, load_name_map, padded_rows, read_side, trace_functions

DATA = Path(__file__).parents[1] / "data" / "locate"
H = 4
OPS = ("embed", "norm", "mlp", "head")
# Rollout: a prefill of "a" (positions 0-2), a prefill of "b" (0-1), then one decode step of both.
TOKENS = {"a": [5, 6, 7, 10], "b": [8, 9, 11]}
ROLLOUT_STEPS = [(["a"] * 3, [0, 1, 2], "prefill"), (["b"] * 2, [0, 1], "prefill"), (["a", "b"], [3, 2], "decode")]


def base(seq: str, pos: int, k: int) -> np.ndarray:
    """The (float32) output row of op k at (seq, pos); op k's input is op k-1's output."""
    if k < 0:
        return np.full(H, float(10 * len(seq) + pos), dtype=np.float32)
    rng = np.random.default_rng(zlib.crc32(f"{seq}/{pos}/{k}".encode()))
    return rng.standard_normal(H).astype(np.float32)


def tensor(rows: Rows, k: int, side: str, slot: str, name: str, edits: dict) -> np.ndarray:
    """Rows of op k's values; *edits* keyed (side, op name or op number, slot) plant differences."""
    out = np.zeros((*rows.shape, H), dtype=np.float32)
    flat = out.reshape(-1, H)
    for i, (seq, pos) in enumerate(zip(rows.seq.reshape(-1), rows.pos.reshape(-1))):
        if seq is None:
            continue
        row = base(seq, int(pos), k).copy()
        edit = edits.get((side, name, slot)) or edits.get((side, k + (slot == "in.x"), slot))
        if edit is not None:
            row = edit(seq, int(pos), row)
        flat[i] = row
    return out


def write_side(folder: Path, side: str, *, names=OPS, edits: dict | None = None, rows_override: Rows | None = None, width: int | None = None) -> Path:
    """One side of a toy model: four ops (in.x -> out) over the rollout's steps or one trainer batch."""
    edits = edits or {}
    if side == "rollout":
        steps = [(Rows.make(seq, pos, [TOKENS[s][p] for s, p in zip(seq, pos)]), label) for seq, pos, label in ROLLOUT_STEPS]
    else:
        width = width or 4
        ids = [[*TOKENS[s], *[0] * (width - len(TOKENS[s]))] for s in ("a", "b")]
        steps = [(rows_override or padded_rows(["a", "b"], [4, 3], width, tokens=ids), "score")]
    with Recorder(folder, side) as rec:
        for rows, label in steps:
            with rec.step(rows, label=label):
                for k, name in enumerate(names):
                    x = tensor(rows, k - 1, side, "in.x", name, edits)
                    out = tensor(rows, k, side, "out", name, edits)
                    dump(name, out, inputs={"x": x})
    return folder


def write_pair(tmp_path: Path, rollout_edits=None, train_edits=None, **kw) -> tuple[Path, Path]:
    edits = {**(rollout_edits or {}), **(train_edits or {})}
    return (
        write_side(tmp_path / "rollout", "rollout", edits=edits, **kw.get("rollout", {})),
        write_side(tmp_path / "train", "train", edits=edits, **kw.get("train", {})),
    )


def at(seq: str, pos: int, index: int, value=None, bits: int | None = None, add: float | None = None):
    """An edit: element *index* of row (seq, pos) set to value / float32 bits, or moved by *add*."""

    def edit(s, p, row):
        if (s, p) == (seq, pos):
            if bits is not None:
                row.view(np.uint32)[index] = bits
            elif add is not None:
                row[index] = np.float32(row[index] + np.float32(add))
            else:
                row[index] = value
        return row

    return edit


def ulp(seq: str, pos: int, index: int):
    """One unit in the last place up at one element."""

    def edit(s, p, row):
        if (s, p) == (seq, pos):
            row.view(np.uint32)[index] += 1
        return row

    return edit


def run_locate(rollout: Path, train: Path, *extra: str, cwd: Path) -> tuple[int, dict | None, str]:
    result = zmr("locate", str(rollout), str(train), "--json", *extra, cwd=cwd)
    data = json.loads(result.stdout) if result.stdout.strip() else None
    return result.returncode, data, result.stderr


# ---------------------------------------------------------------------------
# the verdicts


def test_identical_dumps_report_no_divergence(tmp_path):
    rollout, train = write_pair(tmp_path)
    code, data, err = run_locate(rollout, train, cwd=tmp_path)
    assert code == 0, err
    assert data["verdict"] == "bitwise_equal" and data["first"] is None
    assert [op["name"] for op in data["ops"]] == list(OPS)
    assert all(op["rows"] == 7 and op["rows_differ"] == 0 for op in data["ops"])
    assert data["rollout"]["rows"] == data["trainer"]["rows"] == 7
    text = zmr("locate", str(rollout), str(train), cwd=tmp_path)
    assert text.returncode == 0
    assert "no divergence: every output of 4 operations is bitwise equal" in text.stdout


def test_first_diverging_operation_in_execution_order(tmp_path):
    # mlp differs by one ulp in two rows; head (later) differs a lot everywhere.
    train_edits = {
        ("train", "mlp", "out"): lambda s, p, row: ulp("b", 0, 2)(s, p, ulp("a", 3, 1)(s, p, row)),
        ("train", "head", "out"): lambda s, p, row: row + np.float32(1.0),
    }
    rollout, train = write_pair(tmp_path, train_edits=train_edits)
    code, data, err = run_locate(rollout, train, cwd=tmp_path)
    assert code == 1
    assert "first divergence at 'mlp' (sequence 'b', position 0)" in err
    first = data["first"]
    assert first["op"] == "mlp" and first["order"] == 2 and first["slot"] == "out"
    # (b, 0) comes first: step 1 (a prefill) runs before the decode step that holds (a, 3)
    assert first["row"] == {"seq_id": "b", "position": 0, "token": 8}
    assert first["element"] == [2] and first["row_shape"] == [H]
    assert first["rollout"]["step"] == 1 and first["rollout"]["label"] == "prefill"
    assert first["trainer"]["step"] == 0 and first["trainer"]["label"] == "score"
    expected = base("b", 0, 2)[2]
    assert first["rollout"]["bits"] == f"0x{int(np.float32(expected).view(np.uint32)):08x}"
    assert first["trainer"]["bits"] == f"0x{int(np.float32(expected).view(np.uint32)) + 1:08x}"
    assert first["rollout"]["value"] == repr(float(expected))
    assert first["kind"] == "value"
    assert first["inputs"] == [{"slot": "x", "status": "equal", "how": "row", "max_abs_diff": None}]
    assert first["inputs_verdict"] == "equal" and first["at_fault"] == "this operation"
    ops = {op["name"]: op for op in data["ops"]}
    assert ops["embed"]["rows_differ"] == ops["norm"]["rows_differ"] == 0
    assert ops["mlp"]["rows_differ"] == 2 and ops["mlp"]["elements_differ"] == 2 and ops["mlp"]["introduced"] == 2
    assert ops["mlp"]["rows_by_label"] == {"prefill": {"rows": 5, "differ": 1}, "decode": {"rows": 2, "differ": 1}}
    assert ops["head"]["rows_differ"] == 7 and ops["head"]["max_abs_diff"] == pytest.approx(1.0, abs=1e-6)
    assert ops["mlp"]["max_abs_diff"] < 1e-6
    text = zmr("locate", str(rollout), str(train), cwd=tmp_path)
    assert text.returncode == 1
    out = text.stdout
    assert "first divergence: mlp  (operation 3 of 4 in execution order; the 2 before it are bitwise equal)" in out
    assert "row:     sequence 'b', position 0, token 8" in out
    assert "input x: equal (this row)" in out
    assert "verdict: inputs equal: this operation introduces the difference; fix it" in out
    table = out[out.index("from the first divergence on"):]
    assert "mlp" in table and "head" in table and "norm" not in table


def test_an_input_that_differs_blames_an_earlier_unrecorded_operation(tmp_path):
    # norm's output is equal, but mlp's input differs: something between them was not recorded.
    edits = {("train", "mlp", "in.x"): ulp("a", 1, 0), ("train", "mlp", "out"): ulp("a", 1, 3)}
    rollout, train = write_pair(tmp_path, train_edits=edits)
    code, data, _ = run_locate(rollout, train, cwd=tmp_path)
    assert code == 1
    first = data["first"]
    assert first["op"] == "mlp" and first["row"]["seq_id"] == "a" and first["row"]["position"] == 1
    assert first["inputs"][0]["slot"] == "x" and first["inputs"][0]["status"] == "differs"
    assert first["inputs"][0]["max_abs_diff"] > 0
    assert first["inputs_verdict"] == "differ" and first["at_fault"] == "an earlier operation that was not recorded"
    mlp = next(op for op in data["ops"] if op["name"] == "mlp")
    assert mlp["introduced"] == 0 and mlp["inputs_differ_rows"] == 1
    text = zmr("locate", str(rollout), str(train), cwd=tmp_path)
    assert "input x: differs (this row, max |Δ|" in text.stdout
    assert "an input already differs: the fault is earlier" in text.stdout
    assert "an earlier, unrecorded operation is at fault" in text.stderr


def test_negative_zero_differs_from_zero(tmp_path):
    edits = {("rollout", "norm", "out"): at("a", 2, 1, value=0.0), ("train", "norm", "out"): at("a", 2, 1, value=-0.0)}
    rollout, train = write_pair(tmp_path, rollout_edits=edits)
    code, data, _ = run_locate(rollout, train, cwd=tmp_path)
    assert code == 1
    first = data["first"]
    assert first["op"] == "norm" and first["element"] == [1] and first["kind"] == "signed zero"
    assert (first["rollout"]["value"], first["rollout"]["bits"]) == ("0.0", "0x00000000")
    assert (first["trainer"]["value"], first["trainer"]["bits"]) == ("-0.0", "0x80000000")
    assert first["abs_diff"] == 0.0
    norm = next(op for op in data["ops"] if op["name"] == "norm")
    assert norm["rows_differ"] == 1 and norm["max_abs_diff"] == 0.0


def test_nan_payloads_differ_and_identical_nans_are_equal(tmp_path):
    same = {("rollout", "head", "out"): at("b", 1, 0, bits=0x7FC00001), ("train", "head", "out"): at("b", 1, 0, bits=0x7FC00001)}
    rollout, train = write_pair(tmp_path / "same", rollout_edits=same)
    code, data, _ = run_locate(rollout, train, cwd=tmp_path)
    assert code == 0 and data["first"] is None
    payload = {("rollout", "head", "out"): at("b", 1, 0, bits=0x7FC00000), ("train", "head", "out"): at("b", 1, 0, bits=0x7FC00001)}
    rollout, train = write_pair(tmp_path / "payload", rollout_edits=payload)
    code, data, _ = run_locate(rollout, train, cwd=tmp_path)
    assert code == 1
    first = data["first"]
    assert first["op"] == "head" and first["kind"] == "nan payload" and first["abs_diff"] is None
    assert (first["rollout"]["value"], first["rollout"]["bits"]) == ("nan", "0x7fc00000")
    assert (first["trainer"]["value"], first["trainer"]["bits"]) == ("nan", "0x7fc00001")
    head = next(op for op in data["ops"] if op["name"] == "head")
    assert head["nonfinite_differ"] == 1 and head["max_abs_diff"] is None


def test_shape_mismatch_is_an_error_naming_both_sides(tmp_path):
    rollout = write_side(tmp_path / "rollout", "rollout")
    train = tmp_path / "train"
    rows = padded_rows(["a", "b"], [4, 3], 4, tokens=[[5, 6, 7, 10], [8, 9, 11, 0]])
    with Recorder(train, "train") as rec, rec.step(rows):
        dump("embed", tensor(rows, 0, "train", "out", "embed", {}))
        dump("norm", np.zeros((2, 4, H + 1), dtype=np.float32))
    result = zmr("locate", str(rollout), str(train), cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "zmr: error: operation 'norm', output 'out': per-row shape [4] on the rollout side but [5] on the trainer side" in result.stderr
    assert f"rollout: {rollout}/step-000000.safetensors" in result.stderr
    assert f"trainer: {train}/step-000000.safetensors (step 0, 'norm', tensor shape [2, 4, 5], rows [2, 4])" in result.stderr


def test_unpaired_rows_are_an_error_naming_them(tmp_path):
    # The trainer labels every position, including the last one the rollout never computes.
    rollout = write_side(tmp_path / "rollout", "rollout")
    train = write_side(tmp_path / "train", "train", rows_override=Rows.make(
        [["a"] * 5, ["b"] * 3 + [None, None]], [list(range(5)), list(range(5))], [[5, 6, 7, 10, 1], [8, 9, 11, 0, 0]]), width=5)
    result = zmr("locate", str(rollout), str(train), cwd=tmp_path)
    assert result.returncode == 2
    assert "zmr: error: 1 unpaired rows (sequence id, position)" in result.stderr
    assert "only in trainer: ('a', 4) in step-000000.safetensors" in result.stderr
    assert "leave out rows one side never computes" in result.stderr


def test_different_tokens_are_an_error(tmp_path):
    rollout = write_side(tmp_path / "rollout", "rollout")
    train = write_side(tmp_path / "train", "train", rows_override=padded_rows(["a", "b"], [4, 3], 4, tokens=[[5, 6, 99, 10], [8, 9, 11, 0]]))
    result = zmr("locate", str(rollout), str(train), cwd=tmp_path)
    assert result.returncode == 2
    assert "1 rows have different token ids on the two sides" in result.stderr
    assert "('a', 2): rollout token 7, trainer token 99" in result.stderr


def test_not_a_dump_is_an_error(tmp_path):
    (tmp_path / "empty").mkdir()
    other = tmp_path / "other.safetensors"
    other.write_bytes(b"\x02\x00\x00\x00\x00\x00\x00\x00{}")
    rollout = write_side(tmp_path / "rollout", "rollout")
    for bad, message in ((tmp_path / "empty", "no step files"), (other, "not a zmr locate dump (no zmr_locate metadata)"), (tmp_path / "missing", "no such file or folder")):
        result = zmr("locate", str(rollout), str(bad), cwd=tmp_path)
        assert result.returncode == 2, bad
        assert message in result.stderr


# ---------------------------------------------------------------------------
# name maps


MAPPED_ROLLOUT = ("embed", "model.layers.0.mlp", "decode_attention", "decode_attention")
MAPPED_TRAIN = ("embedding", "decoder.layers.0.mlp", "attention", "attention")


def test_name_map_pairs_differently_named_operations(tmp_path):
    edits = {("train", 3, "out"): ulp("a", 3, 0)}  # the output of the fourth op, the second attention call
    rollout = write_side(tmp_path / "rollout", "rollout", names=MAPPED_ROLLOUT, edits=edits)
    train = write_side(tmp_path / "train", "train", names=MAPPED_TRAIN, edits=edits)
    # the second call of a name in a step is name#1
    assert [r.name for r in read_side(rollout, "rollout").steps[0].records] == ["embed", "model.layers.0.mlp", "decode_attention", "decode_attention#1"]
    no_map = zmr("locate", str(rollout), str(train), cwd=tmp_path)
    assert no_map.returncode == 2
    assert "no operation is in both dumps" in no_map.stderr
    assert "rollout: decode_attention, decode_attention#1, embed, model.layers.0.mlp" in no_map.stderr
    assert "pass a name map (--map FILE)" in no_map.stderr
    for name_map in ("names.yaml", "names.json"):
        code, data, err = run_locate(rollout, train, "--map", str(DATA / name_map), cwd=tmp_path)
        assert code == 1, err
        assert [op["name"] for op in data["ops"]] == ["embedding", "decoder.layers.0.mlp", "attention", "attention#1"]
        first = data["first"]
        assert first["op"] == "attention#1"
        assert first["rollout"]["name"] == "decode_attention#1" and first["trainer"]["name"] == "attention#1"
        assert first["row"] == {"seq_id": "a", "position": 3, "token": 10}
        assert data["only_rollout"] == data["only_trainer"] == [] and data["notes"] == []


def test_name_map_problems(tmp_path):
    rollout = write_side(tmp_path / "rollout", "rollout", names=MAPPED_ROLLOUT)
    train = write_side(tmp_path / "train", "train", names=MAPPED_TRAIN)
    code, data, _ = run_locate(rollout, train, "--map", str(DATA / "names-unused.yaml"), cwd=tmp_path)
    assert code == 0
    assert data["notes"] == ["name map entry 'rollout: lm_hed' matched no operation"]
    collide = zmr("locate", str(rollout), str(train), "--map", str(DATA / "names-collide.yaml"), cwd=tmp_path)
    assert collide.returncode == 2
    assert "after the name map, operations 'embed' and 'decode_attention' are both named 'embedding'" in collide.stderr
    section = zmr("locate", str(rollout), str(train), "--map", str(DATA / "names-bad-section.yaml"), cwd=tmp_path)
    assert section.returncode == 2
    assert "names-bad-section.yaml:3: unknown section 'training'" in section.stderr
    with pytest.raises(ZmrError, match="not a regular expression"):
        bad = tmp_path / "bad.json"
        bad.write_text('{"re:(": "x"}')
        load_name_map(bad)


def test_name_map_trainer_section_and_its_older_name_train(tmp_path):
    """`trainer:` maps the trainer's names; `train:` (its name before schema_version 2) still reads; both at once is refused."""
    rollout = write_side(tmp_path / "rollout", "rollout", names=MAPPED_ROLLOUT)
    trainer = write_side(tmp_path / "trainer", "trainer", names=MAPPED_TRAIN)
    entries = "  embedding: embed\n  're:decoder\\.layers\\.(\\d+)\\.mlp': 'model.layers.\\1.mlp'\n  attention: decode_attention\n"
    for section in ("trainer", "train"):
        name_map = tmp_path / f"{section}.yaml"
        name_map.write_text(f"{section}:\n{entries}")
        code, data, err = run_locate(rollout, trainer, "--map", str(name_map), cwd=tmp_path)
        assert code == 0, err
        assert data["only_rollout"] == data["only_trainer"] == [] and data["notes"] == [] and len(data["ops"]) == 4
        assert "only_train" not in data and "train" not in data and data["trainer"]["side"] == "trainer"
    both = tmp_path / "both.yaml"
    both.write_text(f"trainer:\n{entries}train:\n  attention: decode_attention\n")
    result = zmr("locate", str(rollout), str(trainer), "--map", str(both), cwd=tmp_path)
    assert result.returncode == 2
    assert f"zmr: error: {both}:5: sections 'trainer' and 'train' are the same side" in result.stderr


# ---------------------------------------------------------------------------
# the dump format and the recording helpers


def test_dump_files_are_safetensors_with_rows_and_execution_order(tmp_path):
    safe_open = pytest.importorskip("safetensors").safe_open  # the demo extra: read with the reference reader

    folder = write_side(tmp_path / "rollout", "rollout")
    files = sorted(folder.iterdir())
    assert [f.name for f in files] == ["step-000000.safetensors", "step-000001.safetensors", "step-000002.safetensors"]
    with safe_open(str(files[2]), framework="numpy") as fh:
        meta = fh.metadata()
        keys = set(fh.keys())
        seq = fh.get_tensor("rows.0.seq")
        pos = fh.get_tensor("rows.0.pos")
        tok = fh.get_tensor("rows.0.tok")
        out = fh.get_tensor("op.000002.out")
    assert meta["zmr_locate"] == "1"
    index = json.loads(meta["index"])
    assert (index["side"], index["step"], index["label"], index["seq_ids"]) == ("rollout", 2, "decode", ["a", "b"])
    assert [(r["index"], r["name"], r["kind"]) for r in index["records"]] == [(0, "embed", "dump"), (1, "norm", "dump"), (2, "mlp", "dump"), (3, "head", "dump")]
    assert index["records"][2]["tensors"] == [
        {"slot": "in.x", "shape": [2, H], "dtype": "float32", "aligned": "lead", "key": "op.000002.in.x"},
        {"slot": "out", "shape": [2, H], "dtype": "float32", "aligned": "lead", "key": "op.000002.out"},
    ]
    assert index["records"][2]["site"].startswith("evidence/test_locate.py:")  # the last two parts of the path
    assert "op.000002.in.x" in keys
    assert seq.tolist() == [0, 1] and pos.tolist() == [3, 2] and tok.tolist() == [10, 11]
    assert out.dtype == np.float32 and np.array_equal(out[0], base("a", 3, 2))
    with pytest.raises(ZmrError, match="already holds 3 step files"):
        Recorder(folder, "rollout")


def test_trace_functions_hooks_and_bf16(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    pkg = tmp_path / "tpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "ops.py").write_text(textwrap.dedent("""
        import torch

        def linear(x, weight):
            return x @ weight.T

        def norm(x, eps=1e-5):
            return x / (x.float().pow(2).mean(-1, keepdim=True) + eps).sqrt().to(x.dtype)
    """))
    (pkg / "model.py").write_text(textwrap.dedent("""
        from .ops import linear
        from .ops import norm as _norm

        def forward(x, w):
            return linear(_norm(x), w) + linear(x, w)
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    import tpkg.model
    import tpkg.ops

    original = tpkg.ops.linear
    g = torch.Generator().manual_seed(0)
    w = torch.nn.Parameter(torch.randn(6, H, generator=g).to(torch.bfloat16))
    x = torch.randn(3, H, generator=g).to(torch.bfloat16)
    rows = Rows.make("s", [0, 1, 2], [1, 2, 3])
    with trace_functions(tpkg.ops, ["linear", "norm"]):
        assert tpkg.model.linear is not original and tpkg.model._norm is not tpkg.ops.__dict__.get("_norm")
        tpkg.model.forward(x, w)  # outside a step: nothing recorded, nothing breaks
        with Recorder(tmp_path / "a", "rollout") as rec, rec.step(rows, label="prefill"):
            expected = tpkg.model.forward(x, w)
    assert tpkg.model.linear is original and tpkg.ops.linear is original
    step = read_side(tmp_path / "a", "rollout").steps[0]
    assert [(r.index, r.name, r.kind) for r in step.records] == [(0, "norm", "function"), (1, "linear", "function"), (2, "linear#1", "function")]
    lin = step.records[1]
    assert lin.site.startswith("tpkg/model.py:") and lin.site.endswith("in forward")
    assert lin.tensors["in.weight"].aligned is None and lin.tensors["in.weight"].digest  # a parameter: digest only
    assert lin.tensors["in.x"].aligned == "lead" and lin.tensors["out"].dtype == "bfloat16"
    # Module hooks on the other side: same math, other names, one weight rounded differently.
    class Lin(torch.nn.Module):
        def __init__(self, weight):
            super().__init__()
            self.weight = weight

        def forward(self, h):
            return h @ self.weight.T

    class Block(torch.nn.Module):
        def __init__(self, weight):
            super().__init__()
            self.proj_in = Lin(weight)
            self.proj_skip = Lin(weight)

        def forward(self, h):
            return self.proj_in(tpkg.ops.norm(h)) + self.proj_skip(h)

    name_map = tmp_path / "names.yaml"
    name_map.write_text("trainer:\n  block.proj_in: linear\n  block.proj_skip: 'linear#1'\n")
    for tweak, expect in ((False, 0), (True, 1)):
        block = torch.nn.Module()
        weight = torch.nn.Parameter(w.detach().clone())
        if tweak:
            with torch.no_grad():
                weight.view(torch.int16)[0, 0] += 1
        block.block = Block(weight)
        folder = tmp_path / f"b{int(tweak)}"
        with hook_modules(block, include=["block.*"], params=True) as hooked, trace_functions(tpkg.ops, {"norm": "norm"}):
            assert hooked == ["block.proj_in", "block.proj_skip"]
            with Recorder(folder, "train") as rec, rec.step(Rows.make([["s", "s", "s"]], [[0, 1, 2]], [[1, 2, 3]])):
                got = block.block(x[None])
        if not tweak:
            assert torch.equal(got[0], expected)
        code, data, err = run_locate(tmp_path / "a", folder, "--map", str(name_map), cwd=tmp_path)
        assert code == expect, err
        assert [op["name"] for op in data["ops"]] == ["norm", "linear", "linear#1"]
        if tweak:
            first = data["first"]
            assert first["op"] == "linear" and first["trainer"]["name"] == "block.proj_in"
            # the weight is not per row: compared whole, by digest; x (a function's) and h (a module's) pair up
            assert {i["slot"]: (i["status"], i["how"]) for i in first["inputs"]} == {"weight": ("differs", "whole"), "x~h": ("equal", "row")}
            assert first["inputs_verdict"] == "differ"
            assert first["rollout"]["bits"].startswith("0x") and len(first["rollout"]["bits"]) == 6  # bf16


def test_rows_layouts():
    tb = padded_rows(["a", "b"], [3, 1], 3, tokens=[[1, 2], [3, 0], [4, 0]], layout="tb")
    assert tb.shape == (3, 2)
    assert tb.seq.tolist() == [["a", "b"], ["a", None], ["a", None]]
    assert tb.pos.tolist() == [[0, 0], [1, 1], [2, 2]] and tb.tok.tolist() == [[1, 2], [3, 0], [4, 0]]
    assert Rows.make("x", range(3)).tok.tolist() == [-1, -1, -1]
    with pytest.raises(ZmrError, match="3 sequence ids for 2 positions"):
        Rows.make(["a", "b", "c"], [0, 1])


def test_importing_the_module_loads_neither_numpy_nor_torch():
    code = "import sys, zmr.evidence.locate, zmr.cli; print(sorted(m for m in ('numpy', 'torch') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


# ---------------------------------------------------------------------------
# the demo: series prefixes of both sides, one mismatch source fixed at a time


# (rollout patches, trainer patches, first diverging operation in fp32, in bf16; None: no divergence)
DEMO_WALK = [
    # upstream: fp32 finds the chunked RMSNorm; in bf16 its last-bit difference is rounded
    # away and the split-K GEMM comes first
    (0, 0, "rms_norm", "linear"),
    # + GEMM, RMSNorm and SiLU through the shared kernels, both sides: split-KV attention
    (3, 2, "attention", "attention"),
    # + attention (decode replays the prefill math; the trainer's causal rows in that order)
    (4, 3, None, None),
    # + the shared log-softmax: the release trees
    (5, 4, None, None),
]


def test_demo_walk_finds_each_mismatch_source(tmp_path):
    torch = pytest.importorskip("torch")
    demo = demo_walk.demo_locate()
    upstream = demo_walk.upstream_trees(tmp_path)
    threads = torch.get_num_threads()
    found = []
    try:
        for n_rollout, n_trainer, *expected in DEMO_WALK:
            trees = {
                comp: demo_walk.tree_with(upstream[comp], demo_walk.series(comp)[:count], tmp_path / f"{comp}-{n_rollout}-{n_trainer}")
                for comp, count in (("rollout", n_rollout), ("trainer", n_trainer))
            }
            for dtype, want in zip(("fp32", "bf16"), expected):
                out = tmp_path / f"dumps-{n_rollout}-{n_trainer}-{dtype}"
                demo.record(trees["rollout"], trees["trainer"], out, dtype=dtype)
                code, data, err = run_locate(out / "rollout", out / "trainer", "--map", str(out / "names.yaml"), cwd=tmp_path)
                assert code == (0 if want is None else 1), err
                assert data["only_rollout"] == data["only_trainer"] == [], data
                assert len(data["ops"]) == 25 and data["rollout"]["rows"] > 40
                first = data["first"]
                found.append(first["op"] if first else None)
                ops = {op["name"]: op for op in data["ops"]}
                if want is None:
                    assert data["verdict"] == "bitwise_equal" and all(op["rows_differ"] == 0 for op in data["ops"])
                    continue
                # the operation found computes a difference from equal inputs: it is at fault
                assert first["inputs_verdict"] == "equal", first
                assert all(op["rows_differ"] == 0 for op in data["ops"][: first["order"]])
                if want == "rms_norm":
                    # chunked RMSNorm: the very first operation; the embedding and the weight are equal
                    assert first["order"] == 0, first
                    assert {i["slot"]: i["status"] for i in first["inputs"]} == {"x": "equal", "weight": "equal"}
                    # split-K GEMM breaks rows on its own too: equal inputs, different outputs
                    assert ops["linear"]["introduced"] > 0, ops["linear"]
                elif want == "linear":
                    # split-K GEMM: the first projection after the (equal) RMSNorm
                    assert first["order"] == 1 and first["rollout"]["site"].startswith("toy_rollout/model.py"), first
                    assert ops["linear"]["introduced"] == ops["linear"]["rows_differ"] > 0
                else:
                    # split-KV decode attention (and prefill attention against fused SDPA)
                    assert first["order"] == 4 and first["rollout"]["name"] in ("prefill_attention", "decode_attention")
                    assert ops["attention"]["rows_by_label"]["decode"]["differ"] > 0
    finally:
        torch.set_num_threads(threads)
    assert found == [want for _, _, *pair in DEMO_WALK for want in pair]

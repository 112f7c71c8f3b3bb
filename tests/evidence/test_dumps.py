"""zmr.evidence.dumps on its own: the float formats as bits, the log-prob dump reader and writer, the tensor dump reader,
the recorder that writes tensor dumps.

`zmr mismatch` and `zmr locate` are tested end to end in test_mismatch.py and test_locate.py; here each module's
contract at its edges: every bit kept (NaN payloads, -0.0, subnormals), a value its dtype cannot hold refused, a dump
zmr did not write refused with what is wrong, the recorder's misuse refused.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest

from zmr.infra.errors import ZmrError
from zmr.evidence.dumps import safetensors
from zmr.evidence.dumps.bits import (
    CANONICAL_NAN,
    TENSOR_DTYPES,
    format_value,
    json_number,
    narrow_bits,
    native_hex,
    show_value,
    tensor_values,
    widen_bits,
)
from zmr.evidence.dumps.logprobs import MAX_LISTED_ERRORS, make_record, read_dump, write_dump
from zmr.evidence.dumps.recording import Recorder, Rows, dump, padded_rows
from zmr.evidence.dumps.tensors import STEP_NAME, read_side


def _f64_bits(value: float) -> int:
    return struct.unpack("<Q", struct.pack("<d", value))[0]


# -- bits ------------------------------------------------------------------------------------------

F32_EDGES = [
    0x00000000,  # +0
    0x80000000,  # -0
    0x00000001,  # the smallest subnormal
    0x807FFFFF,  # the largest negative subnormal
    0x00800000,  # the smallest normal
    0x7F7FFFFF,  # the largest finite
    0x7F800000,  # inf
    0xFF800000,  # -inf
    0x7FC00000,  # the canonical NaN
    0x7F800001,  # a signalling NaN with payload 1
    0xFFC12345,  # a negative quiet NaN with a payload
    0x3F800000,  # 1.0
]
BF16_EDGES = [0x0000, 0x8000, 0x0001, 0x007F, 0x0080, 0x7F7F, 0x7F80, 0xFF80, 0x7FC0, 0x7F81, 0xFFC5, 0x3F80]


@pytest.mark.parametrize(("dtype", "edges", "np_type"), [("float32", F32_EDGES, np.uint32), ("bfloat16", BF16_EDGES, np.uint16)])
def test_widening_is_exact_and_narrowing_gives_every_bit_back(dtype, edges, np_type):
    native = np.array(edges, dtype=np_type)
    wide = widen_bits(native, dtype)
    assert wide.dtype == np.uint64
    back, ok = narrow_bits(wide, dtype)
    assert ok.all()
    assert back.tolist() == edges  # NaN payloads, signs and subnormals survive the round trip
    finite = [i for i, b in enumerate(edges) if not np.isnan(wide.view(np.float64)[i]) and not np.isinf(wide.view(np.float64)[i])]
    if dtype == "float32":  # numpy's own float32 -> float64 conversion agrees on every non-NaN value
        assert wide.view(np.float64)[finite].tolist() == native.view(np.float32)[finite].astype(np.float64).tolist()
    assert len(set(wide.tolist())) == len(edges)  # injective


def test_widening_takes_bits_only_and_known_dtypes():
    with pytest.raises(TypeError, match="unsigned integer bits"):
        widen_bits(np.array([1.0], dtype=np.float32), "float32")
    with pytest.raises(ValueError, match="unknown dtype"):
        widen_bits(np.array([1], dtype=np.uint16), "float16")
    with pytest.raises(ValueError, match="unknown dtype"):
        narrow_bits(np.array([0], dtype=np.uint64), "float16")
    bits = np.array([_f64_bits(0.1)], dtype=np.uint64)
    assert widen_bits(bits, "float64").tolist() == bits.tolist()


def test_narrowing_flags_values_the_dtype_cannot_hold():
    # 2**-149 and 2**-133: the smallest float32 and bfloat16 subnormals
    values = [0.1, 1.0 + 2.0**-10, 2.0**-149, 2.0**-150, 2.0**-133, 1e39, -0.0, 1.5]
    bits = np.array([_f64_bits(v) for v in values], dtype=np.uint64)
    _, ok32 = narrow_bits(bits, "float32")
    assert ok32.tolist() == [False, True, True, False, True, False, True, True]
    _, ok16 = narrow_bits(bits, "bfloat16")
    assert ok16.tolist() == [False, False, False, False, True, False, True, True]


def test_values_are_shown_so_that_they_read_back():
    assert format_value(_f64_bits(-0.0), "float32") == "-0.0"
    assert format_value(_f64_bits(float("inf")), "bfloat16") == "inf"
    assert format_value(_f64_bits(float("-inf")), "float64") == "-inf"
    nan32 = int(widen_bits(np.array([CANONICAL_NAN["float32"]], dtype=np.uint32), "float32")[0])
    assert format_value(nan32, "float32") == "nan"
    neg = int(widen_bits(np.array([0xFFC00000], dtype=np.uint32), "float32")[0])
    assert format_value(neg, "float32") == "-nan"
    payload = int(widen_bits(np.array([0x7F800001], dtype=np.uint32), "float32")[0])
    assert format_value(payload, "float32") == "nan:0x7f800001"
    assert native_hex(payload, "float32") == "0x7f800001"
    assert native_hex(_f64_bits(1.0), "bfloat16") == "0x3f80"
    assert [json_number(v) for v in (float("nan"), float("inf"), float("-inf"), 1.5, 3)] == ["nan", "inf", "-inf", 1.5, 3]


def test_tensor_values_of_every_float_format_and_the_float8_tables():
    assert tensor_values(np.array([0x3C00, 0xBC00], dtype="<u2"), "float16").tolist() == [1.0, -1.0]
    assert tensor_values(np.array([0x3F80, 0xC000], dtype="<u2"), "bfloat16").tolist() == [1.0, -2.0]
    e4m3 = tensor_values(np.array([0x38, 0x01, 0x7E, 0x7F, 0x80], dtype=np.uint8), "float8_e4m3fn")
    assert e4m3[:3].tolist() == [1.0, 2.0**-9, 448.0] and np.isnan(e4m3[3]) and str(e4m3[4]) == "-0.0"
    e5m2 = tensor_values(np.array([0x3C, 0x7C, 0xFC, 0x7D], dtype=np.uint8), "float8_e5m2")
    assert e5m2[:3].tolist() == [1.0, float("inf"), float("-inf")] and np.isnan(e5m2[3])
    assert tensor_values(np.array([0xFF], dtype=np.uint8), "int8").tolist() == [-1.0]
    assert tensor_values(np.array([0xFF], dtype=np.uint8), "uint8").tolist() == [255.0]
    assert show_value(0xFF, "int8") == ("-1", "0xff")
    assert show_value(1, "bool") == ("True", "0x01")
    assert show_value(0xFFC0, "bfloat16") == ("-nan", "0xffc0")
    assert show_value(0x3F800000, "float32") == ("1.0", "0x3f800000")
    assert set(TENSOR_DTYPES) >= {"float8_e4m3fn", "float8_e5m2", "bool"}


# -- log-prob dumps --------------------------------------------------------------------------------

NASTY_F32 = [0x80000000, 0x00000001, 0x7F800001, 0xFF800000, 0x3F800000]


def _nasty_record() -> dict:
    # a float32 array holding the bits as they are (a view: no conversion quiets the signalling NaN)
    return {"id": 7, "step": 2, "tokens": [1, 2, 3, 4, 5], "logprobs": np.array(NASTY_F32, dtype=np.uint32).view(np.float32), "dtype": "float32"}


@pytest.mark.parametrize("suffix", [".jsonl", ".ndjson", ".npz", ".safetensors"])
def test_a_dump_reads_back_bit_for_bit_in_every_format(tmp_path, suffix):
    tree = "ab" * 20
    other = {"id": "s", "step": 0, "tokens": [9], "logprobs": [-0.5], "dtype": "fp32"}
    path = write_dump(tmp_path / f"d{suffix}", [_nasty_record(), other], {"trees": {"vllm": tree}, "host": "h"})
    dump = read_dump(path)
    assert [r.id for r in dump] == ["7", "s"] and [r.step for r in dump] == [2, 0]
    assert dump[0].dtype == "float32" and dump[0].native_bits().tolist() == NASTY_F32
    assert dump[0].tokens.tolist() == [1, 2, 3, 4, 5] and dump[1].logprobs.tolist() == [-0.5]
    assert dump.provenance == {"trees": {"vllm": tree}, "host": "h"}
    assert not list(tmp_path.glob(".*"))  # no temporary file left beside it


def test_the_jsonl_spelling_of_special_values(tmp_path):
    path = write_dump(tmp_path / "d.jsonl", [_nasty_record()])
    line = json.loads(path.read_text().splitlines()[1])
    assert line["logprobs"] == [-0.0, 1.401298464324817e-45, "nan:0x7f800001", "-inf", 1.0]


def test_every_bad_line_is_named_at_once_with_its_file_and_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    lines = [
        '{"zmr_dump": 1, "dtype": "bf16"}',
        '{"id": "a", "step": 0, "tokens": [1], "logprobs": [0.1]}',  # 0.1 is no bfloat16
        "not json",
        "[1, 2]",
        '{"id": "b", "step": 0, "tokens": [1, 2], "logprobs": [-1.0]}',
        '{"id": "c", "step": 0, "tokens": [1], "logprobs": ["nan:0x7f80"]}',  # an infinity's bits, not a NaN
        '{"zmr_dump": 1}',
        '{"id": true, "step": 0, "tokens": [1], "logprobs": [-1.0]}',
        '{"id": "d", "step": 0, "tokens": [1], "logprobs": [-1.0], "dtype": "fp8"}',
    ]
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ZmrError) as err:
        read_dump(path)
    assert err.value.message == f"{path}: 8 bad lines in the dump"
    details = err.value.details
    assert details[0].startswith(f"{path}:2: logprobs[0] = 0.1 is not a bfloat16 value")
    assert details[1].startswith(f"{path}:3: not valid JSON")
    assert details[2] == f"{path}:4: a list, not a JSON object; each line must be one record"
    assert details[3].startswith(f"{path}:5: 2 tokens but 1 logprobs")
    assert details[4].startswith(f"{path}:6: logprobs[0] = 'nan:0x7f80' is not a NaN bit pattern")
    assert details[5] == f"{path}:7: the metadata line (zmr_dump) must be the first line of the file"
    assert details[6].startswith(f"{path}:8: id True is not a string or an integer")
    assert details[7].startswith(f"{path}:9: dtype 'fp8' is not one of")


def test_the_list_of_bad_lines_stops(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text("x\n" * (MAX_LISTED_ERRORS + 30))
    with pytest.raises(ZmrError) as err:
        read_dump(path)
    assert len(err.value.details) == MAX_LISTED_ERRORS + 1 and err.value.details[-1] == "(stopped after this many errors)"


@pytest.mark.parametrize(
    ("header", "message"),
    [
        ({"zmr_dump": 2}, "dump format 2 is newer than this zmr reads (1); upgrade zmr"),
        ({"zmr_dump": 1, "typo": 1}, "unknown metadata key 'typo'"),
        ({"zmr_dump": 0}, "zmr_dump = 0 is not a format version (1)"),
        ({"zmr_dump": 1, "provenance": {"trees": {"vllm": "abc"}}}, "provenance.trees.vllm = 'abc' is not a full commit id"),
        ({"zmr_dump": 1, "provenance": []}, "provenance must be an object"),
    ],
)
def test_a_metadata_line_zmr_does_not_read_is_refused(tmp_path, header, message):
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps(header) + '\n{"id": "a", "step": 0, "tokens": [1], "logprobs": [-1.0]}\n')
    with pytest.raises(ZmrError) as err:
        read_dump(path)
    assert any(message in d for d in err.value.details), err.value.details


def test_a_dump_that_is_no_dump_is_refused_saying_what_to_give(tmp_path):
    with pytest.raises(ZmrError, match="unknown dump format '.txt'"):
        read_dump(tmp_path / "d.txt")
    with pytest.raises(ZmrError, match="no such file"):
        read_dump(tmp_path / "missing.jsonl")
    (tmp_path / "empty.jsonl").write_text("\n\n")
    with pytest.raises(ZmrError, match="no records"):
        read_dump(tmp_path / "empty.jsonl")
    with pytest.raises(ZmrError, match="not a full commit id"):
        write_dump(tmp_path / "w.jsonl", [_nasty_record()], {"trees": {"vllm": "main"}})
    with pytest.raises(ZmrError, match="record 0"):
        write_dump(tmp_path / "w.jsonl", [{"id": "a", "step": 0, "tokens": [1], "logprobs": [0.1], "dtype": "bfloat16"}])
    assert not (tmp_path / "w.jsonl").exists()


def test_make_record_takes_objects_and_numpy_scalars():
    class Seq:
        id, step, tokens, logprobs, dtype = "x", np.int64(3), np.array([4, 5]), np.array([-1.0, -2.0], dtype=np.float32), None

    record = make_record(Seq())
    assert (record.id, record.step, record.dtype, record.logprobs.tolist()) == ("x", 3, "float32", [-1.0, -2.0])
    with pytest.raises(ZmrError, match="step 1.5 is not an integer"):
        make_record({"id": "x", "step": 1.5, "tokens": [], "logprobs": []})


# -- tensor dumps and the recorder -------------------------------------------------------------------


def _record_two_steps(folder: Path, side: str = "rollout", **kw) -> Recorder:
    rec = Recorder(folder, side, **kw)
    hidden = np.arange(12, dtype=np.float32).reshape(3, 4)
    weight = np.ones((5, 7), dtype=np.float32)
    with rec:
        with rec.step(["a", "a", "b"], [0, 1, 0], [10, 11, 20], label="prefill"):
            dump("embed", hidden, inputs={"weight": weight, "ids": np.array([10, 11, 20])})
            dump("embed", hidden + 1)  # a second call: another name
            with rec.rows(["a"], [1], [11]):
                dump("head", (hidden[1:2], {"scale": np.float32(2.0)}))
        with rec.step(Rows.make("a", [2], [12])):
            dump("embed", hidden[:1])
    return rec


def test_a_recorded_dump_reads_back_with_its_rows_records_and_bits(tmp_path):
    rec = _record_two_steps(tmp_path / "d")
    assert [p.name for p in rec.files] == [STEP_NAME.format(0), STEP_NAME.format(1)]
    side = read_side(tmp_path / "d", "rollout")
    assert side.side == "rollout" and [s.number for s in side.steps] == [0, 1]
    first = side.steps[0]
    assert first.label == "prefill" and first.row_keys(0) == [("a", 0), ("a", 1), ("b", 0)]
    assert first.row_tokens(0).tolist() == [10, 11, 20]
    assert [r.name for r in first.records] == ["embed", "embed#1", "head"]
    embed = first.records[0]
    assert embed.tensors["out"].aligned == "lead" and embed.tensors["in.ids"].aligned == "lead"
    weight = embed.tensors["in.weight"]
    assert weight.key is None and len(weight.digest) == 64  # not per row: only its digest
    out = first.array(embed.tensors["out"].key)
    assert out.view("<f4").tolist() == np.arange(12, dtype=np.float32).reshape(3, 4).tolist()
    head = first.records[2]
    assert head.rowset == 1 and first.row_keys(1) == [("a", 1)]
    assert set(head.tensors) == {"out.0", "out.1.scale"}  # a tuple's and a dict's tensors, each in its slot
    assert head.tensors["out.0"].aligned == "lead" and head.tensors["out.1.scale"].digest is not None  # a scalar: no row
    assert side.steps[1].row_keys(0) == [("a", 2)] and side.steps[1].label is None


def test_inputs_false_or_aligned_keeps_fewer_inputs(tmp_path):
    read = lambda name: read_side(tmp_path / name, "x").steps[0].records[0].tensors  # noqa: E731
    _record_two_steps(tmp_path / "none", inputs=False)
    assert set(read("none")) == {"out"}
    _record_two_steps(tmp_path / "aligned", inputs="aligned")
    assert set(read("aligned")) == {"out", "in.ids"}
    with pytest.raises(ZmrError, match="inputs='yes'"):
        Recorder(tmp_path / "bad", inputs="yes")


def test_a_step_that_raises_is_not_written_and_a_used_folder_is_refused(tmp_path):
    folder = tmp_path / "d"
    rec = Recorder(folder)
    with pytest.raises(RuntimeError), rec, rec.step(["a"], [0]):
        dump("x", np.zeros((1, 2), dtype=np.float32))
        raise RuntimeError("engine failed")
    assert rec.files == [] and not list(folder.iterdir())
    _record_two_steps(folder)
    with pytest.raises(ZmrError, match="already holds 2 step files"):
        Recorder(folder)
    Recorder(folder, overwrite=True)
    assert not list(folder.glob("step-*"))


def test_recorder_misuse_is_refused_with_what_to_do(tmp_path):
    rec = Recorder(tmp_path / "d")
    with rec:
        dump("outside", np.zeros(1))  # no step open: nothing recorded, no error (dump calls stay in the engine)
        with pytest.raises(ZmrError, match="no step is open"), rec.rows(["a"], [0]):
            pass
        with rec.step(["a"], [0]), pytest.raises(ZmrError, match="steps do not nest"), rec.step(["a"], [0]):
            pass
    with pytest.raises(ZmrError, match="2 sequence ids for 3 positions"):
        Rows.make(["a", "b"], [0, 1, 2])
    with pytest.raises(ZmrError, match="not a single number"):
        Rows.make("a", 3)
    with pytest.raises(ZmrError, match="tokens have shape"):
        Rows.make("a", [0, 1], [5])


def test_padded_rows_mark_padding_in_both_layouts():
    rows = padded_rows(["a", "b"], [2, 1], 3, tokens=[[1, 2, 0], [3, 0, 0]])
    assert rows.shape == (2, 3)
    assert rows.seq.tolist() == [["a", "a", None], ["b", None, None]] and rows.pos.tolist() == [[0, 1, 2], [0, 1, 2]]
    tb = padded_rows(["a", "b"], [2, 1], 3, tokens=[[1, 3], [2, 0], [0, 0]], layout="tb")
    assert tb.shape == (3, 2) and tb.seq.tolist() == [["a", "b"], ["a", None], [None, None]] and tb.tok.tolist() == [[1, 3], [2, 0], [0, 0]]
    with pytest.raises(ZmrError, match="length 4, more than the width 3"):
        padded_rows(["a"], [4], 3)
    with pytest.raises(ZmrError, match="layout 'bts'"):
        padded_rows(["a"], [1], 3, layout="bts")
    with pytest.raises(ZmrError, match="2 sequence ids but 1 lengths"):
        padded_rows(["a", "b"], [1], 3)


def _step_file(path: Path, meta: dict[str, str], tensors=()) -> Path:
    path.write_bytes(safetensors.encode(list(tensors), meta))
    return path


def test_a_tensor_dump_zmr_cannot_read_is_refused_saying_why(tmp_path):
    with pytest.raises(ZmrError, match="no such file or folder"):
        read_side(tmp_path / "missing", "rollout")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ZmrError, match="no step files"):
        read_side(tmp_path / "empty", "rollout")
    (tmp_path / "short.safetensors").write_bytes(b"abc")
    with pytest.raises(ZmrError, match="too short"):
        read_side(tmp_path / "short.safetensors", "rollout")
    with pytest.raises(ZmrError, match="no zmr_locate metadata"):
        read_side(_step_file(tmp_path / "plain.safetensors", {"other": "1"}), "rollout")
    with pytest.raises(ZmrError, match="dump format 2 is newer"):
        read_side(_step_file(tmp_path / "new.safetensors", {"zmr_locate": "2", "index": "{}"}), "rollout")
    with pytest.raises(ZmrError, match="malformed index"):
        read_side(_step_file(tmp_path / "bad.safetensors", {"zmr_locate": "1", "index": "{}"}), "rollout")


def test_steps_of_two_runs_or_two_sides_in_one_folder_are_refused(tmp_path):
    _record_two_steps(tmp_path / "one")
    _record_two_steps(tmp_path / "two")
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    for name in ("one", "two"):
        (mixed / f"{name}-{STEP_NAME.format(0)}").write_bytes((tmp_path / name / STEP_NAME.format(0)).read_bytes())
    with pytest.raises(ZmrError, match="two files are step 0"):
        read_side(mixed, "rollout")
    _record_two_steps(tmp_path / "trainer", side="trainer")
    sides = tmp_path / "sides"
    sides.mkdir()
    (sides / STEP_NAME.format(0)).write_bytes((tmp_path / "one" / STEP_NAME.format(0)).read_bytes())
    (sides / STEP_NAME.format(1)).write_bytes((tmp_path / "trainer" / STEP_NAME.format(1)).read_bytes())
    with pytest.raises(ZmrError, match=r"different sides \(rollout, trainer\)"):
        read_side(sides, "rollout")

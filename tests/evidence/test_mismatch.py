"""`zmr mismatch` and `zmr.evidence.mismatch`: dumps, bits, figures, errors, CLI.

Figures are checked against numbers worked out here with `math`; CLI
behaviour runs the real command (in-process: conftest's zmr); bad inputs are files under
tests/data/mismatch/ with their exact expected stderr.
"""

from __future__ import annotations

import dataclasses
import json
import math
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import zmr as run_zmr
from zmr.infra.errors import ZmrError
from zmr.evidence.mismatch import (
    ALIASES,
    SCHEMA_VERSION,
    compare,
    narrow_bits,
    read_dump,
    widen_bits,
    write_dump,
)

DATA = Path(__file__).parents[1] / "data" / "mismatch"
FORMATS = ("jsonl", "npz", "safetensors")
REPO = Path(__file__).resolve().parents[2]


def zmr(*args: str | Path) -> subprocess.CompletedProcess:
    """`zmr mismatch ARGS` from the repository root, in-process (conftest's zmr)."""
    return run_zmr("mismatch", *map(str, args), cwd=REPO, timeout=120)


def f32(bits: int) -> np.ndarray:
    return np.array([bits], dtype=np.uint32).view(np.float32)


def rec(id, step, logprobs, tokens=None, dtype=None):
    lp = np.asarray(logprobs, dtype=np.float32) if dtype is None else logprobs
    out = {"id": id, "step": step, "tokens": tokens if tokens is not None else list(range(len(lp))), "logprobs": lp}
    if dtype is not None:
        out["dtype"] = dtype
    return out


def approx(expected: float, rel: float):
    """pytest.approx without its default absolute tolerance (1e-12 would pass any tiny figure)."""
    return pytest.approx(expected, rel=rel, abs=0)


def strict_json(text: str):
    def no_constants(name):
        raise AssertionError(f"non-standard JSON constant {name}")
    return json.loads(text, parse_constant=no_constants)


# --------------------------------------------------------------------------
# Figures against hand-computed numbers


def test_figures_match_hand_computed_values():
    rollout = [
        rec("x", 0, [-1.0, -0.5, -2.0]), rec("y", 0, [-0.25]), rec("z", 1, [-3.0, -0.125]),
    ]
    train = [
        rec("z", 1, [-3.0, -0.0625]), rec("x", 0, [-1.0, -0.75, -1.5]), rec("y", 0, [-0.25]),
    ]
    report = compare(rollout, train)
    s0, s1 = report.steps
    o = report.overall
    assert [s.step for s in report.steps] == [0, 1]
    assert (s0.tokens, s0.bitwise_equal, s1.tokens, s1.bitwise_equal) == (4, 2, 2, 1)
    assert (o.tokens, o.bitwise_equal, o.fraction_bitwise_equal) == (6, 3, 0.5)
    assert not report.bitwise_equal

    # step 0: d = lp_t - lp_r = [0, -0.25, 0.5, 0]
    assert s0.max_abs_diff == 0.5
    assert s0.mean_abs_diff == 0.75 / 4
    assert s0.k1 == (0 + 0.25 - 0.5 + 0) / 4
    k3_0 = ((math.exp(-0.25) - 1 + 0.25) + (math.exp(0.5) - 1 - 0.5)) / 4
    assert s0.k3 == approx(k3_0, rel=1e-13)
    assert s0.ratio_max == approx(math.exp(0.5), rel=1e-15)
    assert s0.ratio_median == 1.0  # sorted ratios e^-.25, 1, 1, e^.5
    assert s0.ratio_max_over_median == approx(math.exp(0.5), rel=1e-15)
    p = [0.0, abs(math.exp(-0.75) - math.exp(-0.5)), abs(math.exp(-1.5) - math.exp(-2.0)), 0.0]
    mean_p = sum(p) / 4
    assert s0.probs_diff_max == approx(max(p), rel=1e-15)
    assert s0.probs_diff_mean == approx(mean_p, rel=1e-14)
    assert s0.probs_diff_std == approx(math.sqrt(sum((v - mean_p) ** 2 for v in p) / 3), rel=1e-13)
    assert s0.sample_mean_abs_diff == (0.75 / 3 + 0.0) / 2  # sequences x and y
    assert (s0.sequences, s0.sequences_diverged) == (2, 1)

    # step 1: d = [0, 0.0625]; the median of an even count is the mean of the middle two
    assert s1.max_abs_diff == 0.0625
    assert s1.k1 == -0.03125
    assert s1.k3 == approx((math.exp(0.0625) - 1 - 0.0625) / 2, rel=1e-13)
    assert s1.ratio_median == approx((1 + math.exp(0.0625)) / 2, rel=1e-15)

    # overall: d = [0, -0.25, 0.5, 0, 0, 0.0625]
    assert o.max_abs_diff == 0.5
    assert o.mean_abs_diff == approx(0.8125 / 6, rel=1e-15)
    assert o.k1 == approx(-0.3125 / 6, rel=1e-15)
    assert o.ratio_median == 1.0
    assert o.sample_mean_abs_diff == approx((0.25 + 0.0 + 0.03125) / 3, rel=1e-15)

    firsts = {(q.step, q.id): q.first_diverging for q in report.sequences}
    assert firsts == {(0, "x"): 1, (0, "y"): None, (1, "z"): 1}
    # Sequences come in step order, then in the rollout dump's order.
    assert [(q.step, q.id) for q in report.sequences] == [(0, "x"), (0, "y"), (1, "z")]


def test_k3_keeps_its_precision_for_tiny_differences():
    d = 2.0 ** -30  # exact in float64; exp(d) - 1 - d computed naively is pure rounding noise
    report = compare([rec("a", 0, [-1.0], dtype="float64")], [rec("a", 0, [-1.0 + d], dtype="float64")])
    expected = d * d / 2 + d ** 3 / 6
    assert report.overall.k3 == approx(expected, rel=1e-12)


def test_k1_can_cancel_to_zero_but_the_verdict_stays_bitwise(tmp_path):
    rollout = [rec("a", 0, [-1.0, -1.0])]
    train = [rec("a", 0, [-0.5, -1.5])]
    report = compare(rollout, train)
    assert report.overall.k1 == 0.0
    assert report.overall.k3 > 0
    assert not report.bitwise_equal
    assert any("cancel" in n for n in report.notes)
    write_dump(tmp_path / "r.jsonl", rollout)
    write_dump(tmp_path / "t.jsonl", train)
    result = zmr(tmp_path / "r.jsonl", tmp_path / "t.jsonl", "--check")
    assert result.returncode == 1, result.stderr
    assert "verdict: NOT bitwise equal, 2 of 2 tokens differ in 1 of 1 sequences" in result.stdout


def test_aliases_name_the_framework_metrics():
    report = compare([rec("a", 0, [-1.0, -0.5])], [rec("a", 0, [-1.0, -0.25])])
    out = report.to_json()
    for block in [out["overall"], *out["steps"]]:
        assert set(block["aliases"]) == {
            "training/rollout_probs_diff_max", "training/rollout_probs_diff_mean",
            "training/rollout_probs_diff_std", "rollout_corr/k3_kl", "rollout_corr/kl",
            "train/train_rollout_logprob_abs_diff",
        }
        for alias, attr in ALIASES.items():
            assert block["aliases"][alias] == block[attr]
    assert out["overall"]["aliases"]["training/rollout_probs_diff_max"] == approx(
        abs(math.exp(-0.25) - math.exp(-0.5)), rel=1e-15
    )
    assert out["overall"]["aliases"]["train/train_rollout_logprob_abs_diff"] == 0.125


# --------------------------------------------------------------------------
# Bits


def test_signed_zero_is_not_bitwise_equal_and_is_listed():
    report = compare([rec("a", 0, [-0.0, -1.0])], [rec("a", 0, [0.0, -1.0])])
    o = report.overall
    assert (o.bitwise_equal, o.signed_zero, o.max_abs_diff) == (1, 1, 0.0)
    assert not report.bitwise_equal
    (t,) = report.signed_zeros
    assert (t.step, t.id, t.position, t.rollout, t.trainer) == (0, "a", 0, "-0.0", "0.0")
    assert (t.rollout_bits, t.trainer_bits) == ("0x80000000", "0x00000000")
    assert report.sequences[0].first_diverging == 0


@pytest.mark.parametrize(
    "r_bits, t_bits, equal",
    [
        (0x7FC00000, 0x7FC00001, False),  # quiet NaNs, different payloads
        (0x7F800001, 0x7FC00001, False),  # signalling vs quiet: a float cast would quiet and merge them
        (0xFFC00000, 0x7FC00000, False),  # sign of NaN
        (0x7FC00123, 0x7FC00123, True),   # same bits: equal
    ],
)
def test_nan_payloads_count_bit_for_bit(r_bits, t_bits, equal):
    report = compare([rec("a", 3, f32(r_bits))], [rec("a", 3, f32(t_bits))])
    assert report.bitwise_equal is equal
    assert report.overall.nan_mismatch == (0 if equal else 1)
    assert report.nan_tokens == 1
    (t,) = report.nans
    assert (t.rollout_bits, t.trainer_bits) == (f"0x{r_bits:08x}", f"0x{t_bits:08x}")
    assert report.overall.finite_pairs == 0 and report.overall.max_abs_diff is None


def test_subnormals_are_compared_exactly():
    tiny = f32(0x00000001)  # 2**-149
    report = compare([rec("a", 0, tiny)], [rec("a", 0, [0.0])])
    assert not report.bitwise_equal
    assert report.overall.max_abs_diff == 2.0 ** -149
    same = compare([rec("a", 0, f32(0x007FFFFF))], [rec("a", 0, f32(0x007FFFFF))])
    assert same.bitwise_equal


def test_bit_conversions_survive_flush_to_zero():
    torch = pytest.importorskip("torch")
    if not torch.set_flush_denormal(True):
        pytest.skip("this CPU cannot flush denormals")
    try:
        bits = np.array([0x00000001, 0x807FFFFF, 0x00400000], dtype=np.uint32)
        widened = widen_bits(bits, "float32")
        back, ok = narrow_bits(widened, "float32")
        assert ok.all() and back.tolist() == bits.tolist()
        report = compare([rec("a", 0, f32(1))], [rec("a", 0, [0.0])])
        assert not report.bitwise_equal
    finally:
        torch.set_flush_denormal(False)


def test_widening_is_exact_against_numpy_and_torch():
    torch = pytest.importorskip("torch")
    every_bf16 = np.arange(2 ** 16, dtype=np.uint16)
    wide = widen_bits(every_bf16, "bfloat16").view(np.float64)
    ref = torch.from_numpy(every_bf16.view(np.int16)).view(torch.bfloat16).double().numpy()
    finite = np.isfinite(ref)
    assert (wide[finite].view(np.uint64) == ref[finite].view(np.uint64)).all()
    back, ok = narrow_bits(wide.view(np.uint64), "bfloat16")
    assert ok.all() and (back == every_bf16).all()
    some_f32 = np.random.default_rng(0).integers(0, 2 ** 32, 200_000, dtype=np.uint64).astype(np.uint32)
    w32 = widen_bits(some_f32, "float32").view(np.float64)
    with np.errstate(invalid="ignore"):  # NaNs: compared apart from this reference
        ref32 = some_f32.view(np.float32).astype(np.float64)
    fin = np.isfinite(ref32)
    assert (w32[fin].view(np.uint64) == ref32[fin].view(np.uint64)).all()
    assert (narrow_bits(w32.view(np.uint64), "float32")[0] == some_f32).all()


def test_values_not_in_the_dtype_are_flagged():
    values = np.array([0.1, 2.0 ** -149, 2.0 ** -150, 1 + 2.0 ** -23, 1 + 2.0 ** -24, 3.5e38, -0.0])
    _, ok32 = narrow_bits(values.view(np.uint64), "float32")
    assert ok32.tolist() == [False, True, False, True, False, False, True]
    _, ok16 = narrow_bits(values.view(np.uint64), "bfloat16")
    assert ok16.tolist() == [False, False, False, False, False, False, True]


# --------------------------------------------------------------------------
# Round trips through the three formats

SPECIAL_F32 = [
    0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000, 0x7FC00001,
    0x7F800001, 0x00000001, 0x807FFFFF, 0x7F7FFFFF, 0xBEAAAAAB, 0x3F800000,
]
SPECIAL_BF16 = [0x0000, 0x8000, 0x7F80, 0xFF80, 0x7FC0, 0xFFC1, 0x7F81, 0x0001, 0x807F, 0x7F7F, 0xBEAB]


@pytest.mark.parametrize("fmt", FORMATS)
def test_float32_round_trip_keeps_every_bit(tmp_path, fmt):
    arr = np.array(SPECIAL_F32, dtype=np.uint32).view(np.float32)
    path = write_dump(tmp_path / f"d.{fmt}", [rec("s", 4, arr), rec("t", 4, arr[:0])])
    dump = read_dump(path)
    assert [r.dtype for r in dump] == ["float32", "float32"]
    assert dump[0].native_bits().tolist() == SPECIAL_F32
    assert len(dump[1].tokens) == 0


@pytest.mark.parametrize("fmt", FORMATS)
def test_bfloat16_round_trip_keeps_every_bit(tmp_path, fmt):
    torch = pytest.importorskip("torch")
    t = torch.from_numpy(np.array(SPECIAL_BF16, dtype=np.uint16).view(np.int16)).view(torch.bfloat16)
    path = write_dump(tmp_path / f"d.{fmt}", [{"id": 7, "step": 0, "tokens": torch.arange(len(SPECIAL_BF16)), "logprobs": t}])
    (r,) = read_dump(path)
    assert (r.id, r.dtype) == ("7", "bfloat16")
    assert r.native_bits().tolist() == SPECIAL_BF16


@pytest.mark.parametrize("fmt", FORMATS)
def test_float64_round_trip_keeps_every_bit(tmp_path, fmt):
    bits = [0x8000000000000000, 0x0000000000000001, 0x7FF0000000000001, 0xFFF8000000000000, 0x3FB999999999999A]
    arr = np.array(bits, dtype=np.uint64).view(np.float64)
    (r,) = read_dump(write_dump(tmp_path / f"d.{fmt}", [rec("a", 0, arr, dtype="float64")]))
    assert r.dtype == "float64"
    assert r.logprobs.view(np.uint64).tolist() == bits


@settings(max_examples=40, deadline=None)
@given(bits=st.lists(st.integers(0, 2 ** 32 - 1), max_size=30), fmt=st.sampled_from(FORMATS))
def test_any_float32_bits_round_trip(bits, fmt):
    arr = np.array(bits, dtype=np.uint32).view(np.float32)
    with tempfile.TemporaryDirectory() as d:
        (r,) = read_dump(write_dump(Path(d) / f"x.{fmt}", [rec("s", 1, arr)]))
    assert r.native_bits().tolist() == bits


@settings(max_examples=40, deadline=None)
@given(bits=st.lists(st.integers(0, 2 ** 16 - 1), max_size=30), fmt=st.sampled_from(FORMATS))
def test_any_bfloat16_bits_round_trip(bits, fmt):
    torch = pytest.importorskip("torch")
    t = torch.from_numpy(np.array(bits, dtype=np.uint16).view(np.int16)).view(torch.bfloat16)
    with tempfile.TemporaryDirectory() as d:
        (r,) = read_dump(write_dump(Path(d) / f"x.{fmt}", [{"id": "s", "step": 0, "tokens": list(range(len(bits))), "logprobs": t}]))
    assert r.native_bits().tolist() == bits


@settings(max_examples=40, deadline=None)
@given(bits=st.lists(st.integers(0, 2 ** 64 - 1), max_size=20))
def test_any_float64_bits_round_trip_through_jsonl(bits):
    arr = np.array(bits, dtype=np.uint64).view(np.float64)
    with tempfile.TemporaryDirectory() as d:
        (r,) = read_dump(write_dump(Path(d) / "x.jsonl", [rec("s", 1, arr, dtype="float64")]))
    assert r.logprobs.view(np.uint64).tolist() == bits


def test_jsonl_encoding_is_documented_text(tmp_path):
    arr = np.array([0xBF000000, 0x80000000, 0xFF800000, 0x7FC00000, 0xFFC00000, 0x7FC00001], dtype=np.uint32).view(np.float32)
    write_dump(tmp_path / "d.jsonl", [rec("a", 2, arr)], provenance={"trees": {"vllm": "ab" * 20}})
    header, line = (tmp_path / "d.jsonl").read_text().splitlines()
    assert json.loads(header) == {"zmr_dump": 1, "provenance": {"trees": {"vllm": "ab" * 20}}}
    assert strict_json(line)["logprobs"] == [-0.5, -0.0, "-inf", "nan", "-nan", "nan:0x7fc00001"]
    assert '"logprobs": [-0.5, -0.0, "-inf"' in line


def test_jsonl_reader_accepts_python_json_nan_and_header_dtype(tmp_path):
    p = tmp_path / "d.ndjson"
    p.write_text(
        '{"zmr_dump": 1, "dtype": "bf16"}\n'
        '{"id": 3, "step": 0, "tokens": [1, 2, 3], "logprobs": [NaN, -Infinity, -0.5]}\n'
    )
    (r,) = read_dump(p)
    assert (r.id, r.dtype) == ("3", "bfloat16")
    assert r.native_bits().tolist() == [0x7FC0, 0xFF80, 0xBF00]


def test_safetensors_files_are_real_safetensors(tmp_path):
    torch = pytest.importorskip("torch")
    st_torch = pytest.importorskip("safetensors.torch")
    t = torch.tensor([-0.5, -0.0, -3.25], dtype=torch.bfloat16)
    write_dump(tmp_path / "d.safetensors", [{"id": "é", "step": 9, "tokens": [4, 5, 6], "logprobs": t}])
    loaded = st_torch.load_file(str(tmp_path / "d.safetensors"))
    assert loaded["logprobs"].dtype == torch.bfloat16
    assert loaded["logprobs"].view(torch.int16).tolist() == t.view(torch.int16).tolist()
    assert bytes(loaded["id_utf8"].tolist()).decode() == "é"
    # ... and a file written by the safetensors package reads back.
    st_torch.save_file(
        {"step": torch.tensor([9]), "id": torch.tensor([11]), "tokens": torch.tensor([4, 5, 6]),
         "offsets": torch.tensor([0, 3]), "logprobs": t},
        str(tmp_path / "f.safetensors"),
    )
    (r,) = read_dump(tmp_path / "f.safetensors")
    assert (r.id, r.step, r.dtype, r.tokens.tolist()) == ("11", 9, "bfloat16", [4, 5, 6])
    assert r.native_bits().tolist() == t.view(torch.int16).numpy().view(np.uint16).tolist()


def test_npz_holds_bfloat16_bits_with_metadata(tmp_path):
    torch = pytest.importorskip("torch")
    t = torch.tensor([-1.0, -0.0078125], dtype=torch.bfloat16)
    write_dump(tmp_path / "d.npz", [{"id": "a", "step": 0, "tokens": [1, 2], "logprobs": t}], provenance={"model": "demo"})
    with np.load(tmp_path / "d.npz") as z:
        assert z["logprobs"].dtype == np.uint16
        meta = json.loads(z["__zmr_dump__"].tobytes())
    assert meta == {"zmr_dump": 1, "dtype": "bfloat16", "provenance": {"model": "demo"}}
    assert read_dump(tmp_path / "d.npz").provenance == {"model": "demo"}


def test_write_dump_takes_dataclasses_tensors_and_declared_dtypes(tmp_path):
    torch = pytest.importorskip("torch")

    @dataclasses.dataclass
    class Sample:
        id: str
        step: int
        tokens: list
        logprobs: object

    records = [
        Sample("f32", 0, [1, 2], torch.tensor([-0.1, -2.0], dtype=torch.float32)),
        Sample("f64", 0, [1], torch.tensor([-0.1], dtype=torch.float64)),
        {"id": "declared", "step": 1, "tokens": [1, 2], "logprobs": [-0.5, -1.25], "dtype": "bfloat16"},
    ]
    dump = read_dump(write_dump(tmp_path / "d.jsonl", records))
    assert [(r.id, r.dtype) for r in dump] == [("f32", "float32"), ("f64", "float64"), ("declared", "bfloat16")]
    assert dump[0].native_bits().tolist() == torch.tensor([-0.1, -2.0]).view(torch.int32).numpy().view(np.uint32).tolist()
    assert dump[1].logprobs.tolist() == [-0.1]


def test_write_dump_refuses_bad_records_naming_them(tmp_path):
    with pytest.raises(ZmrError) as err:
        write_dump(tmp_path / "d.jsonl", [rec("a", 0, [-0.5]), {"id": "b", "step": 0, "tokens": [1], "logprobs": [0.1], "dtype": "float32"}])
    assert "record 1 (id 'b')" in str(err.value) and "is not a float32 value" in str(err.value)
    with pytest.raises(ZmrError) as err:
        write_dump(tmp_path / "d.npz", [rec("a", 0, [-0.5]), rec("b", 0, [-0.5], dtype="float64")])
    assert "mix dtypes float32, float64" in str(err.value)
    assert not (tmp_path / "d.npz").exists() and not (tmp_path / "d.jsonl").exists()


def test_ids_pair_across_formats_as_strings(tmp_path):
    write_dump(tmp_path / "r.npz", [rec(5, 0, [-0.5])])
    (tmp_path / "t.jsonl").write_text('{"id": "5", "step": 0, "dtype": "float32", "tokens": [0], "logprobs": [-0.5]}\n')
    report = compare(read_dump(tmp_path / "r.npz"), read_dump(tmp_path / "t.jsonl"))
    assert report.bitwise_equal and report.sequences[0].id == "5"


def test_different_dtypes_are_compared_as_exact_values():
    report = compare([rec("a", 0, [-0.5, -0.1])], [rec("a", 0, [-0.5, -0.10009765625], dtype="bfloat16")])
    assert report.overall.bitwise_equal == 1
    assert any("float32" in n and "bfloat16" in n for n in report.notes)


def test_differing_commits_of_a_component_are_noted(tmp_path):
    write_dump(tmp_path / "r.jsonl", [rec("a", 0, [-0.5])], provenance={"trees": {"model": "a" * 40}})
    write_dump(tmp_path / "t.jsonl", [rec("a", 0, [-0.5])], provenance={"trees": {"model": "b" * 40}})
    report = compare(read_dump(tmp_path / "r.jsonl"), read_dump(tmp_path / "t.jsonl"))
    assert report.bitwise_equal
    assert any("different commits for model" in n for n in report.notes)


# --------------------------------------------------------------------------
# Errors (exit 2), through the CLI


@pytest.mark.parametrize("case", sorted(p.stem for p in (DATA / "bad").glob("*.jsonl")))
def test_bad_dumps_are_refused_with_file_and_line(case):
    path = DATA / "bad" / f"{case}.jsonl"
    result = zmr(path, DATA / "ok.jsonl")
    assert result.returncode == 2
    assert result.stdout == ""
    expected = (DATA / "bad" / f"{case}.expect").read_text().replace("{path}", str(path))
    assert result.stderr == expected


@pytest.mark.parametrize("case", sorted(p.name for p in (DATA / "pairs").iterdir()))
def test_dumps_that_do_not_pair_are_refused_naming_the_ids(case):
    rollout, train = DATA / "pairs" / case / "rollout.jsonl", DATA / "pairs" / case / "train.jsonl"
    result = zmr(rollout, train)
    assert result.returncode == 2
    expected = (DATA / "pairs" / case / "expected.txt").read_text()
    assert result.stderr == expected.replace("{rollout}", str(rollout)).replace("{train}", str(train))


def test_missing_file_and_unknown_format(tmp_path):
    result = zmr(tmp_path / "nope.jsonl", DATA / "ok.jsonl")
    assert result.returncode == 2
    assert result.stderr.startswith(f"zmr: error: {tmp_path / 'nope.jsonl'}: no such file\n")
    (tmp_path / "d.csv").write_text("id,step\n")
    result = zmr(tmp_path / "d.csv", DATA / "ok.jsonl")
    assert result.returncode == 2
    assert "unknown dump format '.csv'" in result.stderr
    assert "name the file .jsonl (or .ndjson), .npz or .safetensors" in result.stderr


def test_columnar_dump_without_offsets_is_refused(tmp_path):
    np.savez(tmp_path / "d.npz", step=np.array([0]), id=np.array(["a"]), tokens=np.array([1]), logprobs=np.array([-0.5], np.float32))
    result = zmr(tmp_path / "d.npz", DATA / "ok.jsonl")
    assert result.returncode == 2
    assert f"zmr: error: {tmp_path / 'd.npz'}: no 'offsets' array" in result.stderr


# --------------------------------------------------------------------------
# CLI behaviour


def _pair(tmp_path, differ: bool):
    r = [rec("a", 0, [-0.5, -1.25]), rec("b", 1, [-2.0, -0.75])]
    t = [rec("a", 0, [-0.5, -1.25]), rec("b", 1, [-2.0, np.nextafter(np.float32(-0.75), np.float32(0)) if differ else -0.75])]
    write_dump(tmp_path / "r.jsonl", r, provenance={"trees": {"toy-rollout": "3f2a" * 10}})
    write_dump(tmp_path / "t.safetensors", t, provenance={"trees": {"toy-trainer": "c0de" * 10}})
    return tmp_path / "r.jsonl", tmp_path / "t.safetensors"


def test_check_passes_on_bitwise_equal_dumps(tmp_path):
    result = zmr(*_pair(tmp_path, differ=False), "--check")
    assert result.returncode == 0, result.stderr
    assert "verdict: bitwise equal, all 4 tokens in 2 steps" in result.stdout


def test_check_fails_on_one_ulp_and_require_zero_is_its_hidden_old_name(tmp_path):
    r, t = _pair(tmp_path, differ=True)
    assert zmr(r, t).returncode == 0  # without --check a mismatch is a report, not a failure
    old = zmr(r, t, "--require-zero")
    result = zmr(r, t, "--check")
    assert result.returncode == old.returncode == 1
    assert old.stderr == result.stderr
    assert result.stderr == "zmr: error: --check: 1 of 4 tokens are not bitwise equal (1 of 2 sequences diverge)\n"
    assert "step 1 id b: position 1 of 2, 1 token differs, max |Δ| 5.96e-08" in result.stdout


def test_plain_output_when_not_a_terminal(tmp_path):
    result = zmr(*_pair(tmp_path, differ=True))
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["step", "tokens", "bitwise", "max", "|Δ|", "mean", "|Δ|", "k1", "k3", "ratio", "max", "diverged"]
    assert lines[1].split()[:4] == ["0", "2", "100%", "0"]
    assert lines[2].split()[:4] == ["1", "2", "50.00%", "5.96e-08"]
    assert lines[4].split()[:3] == ["all", "4", "75.00%"]
    assert "\x1b[" not in result.stdout  # no colour codes in a pipe
    assert "toy-rollout=3f2a3f2a3f2a" in result.stdout and "toy-trainer=c0dec0dec0de" in result.stdout


def test_json_output_schema(tmp_path):
    r, t = _pair(tmp_path, differ=True)
    result = zmr(r, t, "--json")
    assert result.returncode == 0, result.stderr
    out = strict_json(result.stdout)
    assert out["schema_version"] == SCHEMA_VERSION == 3
    assert (out["tool"], out["zmr"]) == ("zmr", __import__("zmr.model.source", fromlist=["version"]).version())
    assert (out["verdict"], out["bitwise_equal"]) == ("mismatch", False)
    assert out["rollout"]["trees"] == {"toy-rollout": "3f2a" * 10}
    assert out["trainer"]["provenance"] == {"trees": {"toy-trainer": "c0de" * 10}}
    assert (out["rollout"]["format"], out["trainer"]["format"]) == ("jsonl", "safetensors")
    figures = {
        "tokens", "bitwise_equal", "fraction_bitwise_equal", "sequences", "sequences_diverged",
        "signed_zero", "nan_mismatch", "nonfinite", "finite_pairs", "max_abs_diff", "mean_abs_diff",
        "k1", "k3", "ratio_max", "ratio_median", "ratio_max_over_median", "probs_diff_max",
        "probs_diff_mean", "probs_diff_std", "sample_mean_abs_diff", "all_bitwise_equal", "aliases",
    }
    assert set(out["overall"]) == figures
    assert [s["step"] for s in out["steps"]] == [0, 1]
    assert set(out["steps"][0]) == figures | {"step"}
    assert out["steps"][1]["aliases"]["rollout_corr/k3_kl"] == out["steps"][1]["k3"] > 0
    assert out["sequences"][1] == {
        "step": 1, "id": "b", "tokens": 2, "bitwise_equal": 1, "first_diverging": 1,
        "max_abs_diff": 2.0 ** -24, "mean_abs_diff": 2.0 ** -25,
    }
    assert out["overall"]["max_abs_diff"] == 2.0 ** -24
    assert out["signed_zero_tokens"] == {"count": 0, "listed": []}


def test_json_writes_non_finite_figures_as_strings(tmp_path):
    write_dump(tmp_path / "r.jsonl", [rec("a", 0, [-1000.0, -1.0])])
    write_dump(tmp_path / "t.jsonl", [rec("a", 0, [0.0, float("nan")])])
    out = strict_json(zmr(tmp_path / "r.jsonl", tmp_path / "t.jsonl", "--json").stdout)
    assert out["overall"]["ratio_max"] == "inf"  # exp(1000)
    assert out["overall"]["k3"] == "inf"
    assert out["overall"]["nonfinite"] == 1
    assert out["nan_tokens"]["listed"][0]["trainer"] == "nan"
    assert out["nan_tokens"]["listed"][0]["trainer_bits"] == "0x7fc00000"


def test_report_names_the_trainer_side_trainer_and_version_1_reports_still_read(tmp_path):
    """schema_version 2 says `trainer` (1 said `train`); `zmr smoke`'s metrics read reports of either version."""
    from zmr.smoke.runner import read_mismatch

    r, t = _pair(tmp_path, differ=True)
    out = strict_json(zmr(r, t, "--json").stdout)
    assert [k for k in out if k in ("rollout", "train", "trainer")] == ["rollout", "trainer"]
    old = {**out, "schema_version": 1, "train": out["trainer"]}
    del old["trainer"]
    for name, data in (("new.mismatch.json", out), ("old.mismatch.json", old)):
        (tmp_path / name).write_text(json.dumps(data))
        metrics, why = read_mismatch(tmp_path / name, name, tmp_path)
        assert why == "" and metrics is not None
        assert (metrics["schema_version"], metrics["bitwise_equal"], metrics["overall"]) == (data["schema_version"], False, out["overall"])


def test_signed_zero_and_nan_are_listed_in_the_text_report(tmp_path):
    write_dump(tmp_path / "r.jsonl", [rec("a", 0, np.array([-0.0, np.nan, -1.0], np.float32))])
    write_dump(tmp_path / "t.jsonl", [rec("a", 0, np.concatenate([np.array([0.0], np.float32), f32(0x7FC00001), np.array([-1.0], np.float32)]))])
    out = zmr(tmp_path / "r.jsonl", tmp_path / "t.jsonl").stdout
    assert "  step 0 id a position 0: rollout -0.0 (0x80000000), trainer 0.0 (0x00000000)" in out
    assert "  step 0 id a position 1: rollout nan (0x7fc00000), trainer nan:0x7fc00001 (0x7fc00001)" in out
    assert "verdict: NOT bitwise equal, 2 of 3 tokens differ in 1 of 1 sequences" in out


def test_plot_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")  # the plot extra
    r, t = _pair(tmp_path, differ=True)
    png = tmp_path / "out" / "mismatch.png"
    png.parent.mkdir()
    result = zmr(r, t, "--plot", png, "--json")
    assert result.returncode == 0, result.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert strict_json(result.stdout)["schema_version"] == 3
    assert [p.name for p in png.parent.iterdir()] == ["mismatch.png"]  # no temporary file left


def test_help_and_import_never_load_numpy_torch_or_matplotlib():
    code = (
        "import sys, zmr.cli, zmr.evidence.mismatch\n"
        "from zmr.cli import main\n"
        "rc = main(['--help'])\n"
        "loaded = sorted({'numpy', 'torch', 'matplotlib'} & set(sys.modules))\n"
        "print('LOADED', loaded, rc)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert "LOADED [] 0" in result.stdout, result.stdout + result.stderr
    assert "mismatch" in result.stdout


def test_mismatch_help_lists_the_options():
    result = zmr("--help")
    assert result.returncode == 0
    for option in ("--json", "--plot", "--check", "ROLLOUT", "TRAINER"):
        assert option in result.stdout
    assert "--require-zero" not in result.stdout  # the old name of --check: accepted, not shown


def test_struct_check_of_the_test_helpers():
    # f32() must build the value from its bits, or the bit tests above prove nothing.
    assert struct.pack("<f", float(f32(0xBF000000)[0])) == struct.pack("<I", 0xBF000000)


@pytest.mark.parametrize("shape", [[2**63, 0], [2**40, 0], [1] * 70, [2, 3]])
def test_a_safetensors_dump_with_a_shape_numpy_cannot_make_is_a_clear_error(tmp_path, shape):
    """A declared shape is checked before numpy sees it: never a numpy ValueError, never exit 3."""
    import struct

    header = json.dumps({"tokens": {"dtype": "I64", "shape": shape, "data_offsets": [0, 0]}, "logprobs": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}})
    path = tmp_path / "hostile.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header.encode())
    result = zmr(path, path)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(f"zmr: error: {path}: tensor 'tokens' ")
    assert "Traceback" not in result.stderr

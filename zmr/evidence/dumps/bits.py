"""Floating-point formats as bits: dtype tables, exact widening, values shown with their bits.

Log-prob dumps (`zmr.evidence.dumps.logprobs`) hold float32, bfloat16 or float64
values widened exactly to float64 in integer arithmetic (`widen_bits`,
`narrow_bits`): NaN payloads, the signalling bit and subnormals survive, so
two values are bitwise equal exactly when their float64 bits are. Tensor
dumps (`zmr.evidence.dumps.tensors`) hold any of ``TENSOR_DTYPES``; `tensor_values`
and `show_value` turn their bits into numbers and text for reports.
numpy is imported on first use (`numpy()`), never at import time.
"""

from __future__ import annotations

import math
import struct
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal, cast

from zmr.infra.errors import ZmrError

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
    from numpy import ndarray  # for annotations inside functions that bind a local `np`


Figure = float | Literal["nan", "inf", "-inf"] | None
"""A figure in JSON (`json_number`): a number, a non-finite one spelled as a string, or null (none: e.g. over no tokens)."""


def json_number(value: Any) -> Any:
    """A number for JSON: a non-finite float as the string "nan", "inf" or "-inf" (JSON has no spelling for them)."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value


def numpy() -> ModuleType:
    """The numpy module; where it is not installed (it comes with zmr's `evidence` extra), an error that says what to install."""
    try:
        import numpy as module
    except ImportError as err:
        import shlex
        import sys

        raise ZmrError(
            "zmr mismatch and zmr locate read dumps with numpy, which is not installed in the Python zmr runs on",
            details=[
                f"install it there: {shlex.quote(sys.executable)} -m pip install numpy",
                "(zmr's extra evidence brings it: pip install -e '.[evidence]' in zmr's checkout)",
            ],
        ) from err
    found: ModuleType = module  # Any where numpy is not installed (mypy's own run, the lint extra)
    return found


DTYPES = ("float32", "bfloat16", "float64")
DTYPE_NAMES = {
    "float32": "float32",
    "fp32": "float32",
    "f32": "float32",
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "float64": "float64",
    "fp64": "float64",
    "f64": "float64",
    "double": "float64",
}
HEX_DIGITS = {"bfloat16": 4, "float32": 8, "float64": 16}
CANONICAL_NAN = {"bfloat16": 0x7FC0, "float32": 0x7FC00000, "float64": 0x7FF8000000000000}
SIGN_BIT = {"bfloat16": 1 << 15, "float32": 1 << 31, "float64": 1 << 63}


# --------------------------------------------------------------------------
# Exact bit conversions (integer arithmetic only: no rounding, no NaN
# quieting, no flush-to-zero)


def widen_bits(bits: np.ndarray, dtype: str) -> np.ndarray:
    """Bits of `dtype` values -> the bits (uint64) of the same values as float64.

    Exact and injective: NaN payloads and signs are kept, subnormals become
    the equal normal float64. `narrow_bits` is the inverse.
    """
    np = numpy()
    bits = np.asarray(bits)
    if bits.dtype.kind != "u":
        raise TypeError(f"widen_bits takes unsigned integer bits, not {bits.dtype.name} values")
    if dtype == "float64":
        return bits.astype(np.uint64)
    u = bits.astype(np.uint64)
    if dtype == "bfloat16":
        u = u << np.uint64(16)
    elif dtype != "float32":
        raise ValueError(f"unknown dtype {dtype!r}")
    sign = (u >> np.uint64(31)) & np.uint64(1)
    exp = (u >> np.uint64(23)) & np.uint64(0xFF)
    man = u & np.uint64(0x7FFFFF)
    out_exp = np.where(exp == 0xFF, np.uint64(0x7FF), exp + np.uint64(896))
    out_man = man << np.uint64(29)
    zero = (exp == 0) & (man == 0)
    out_exp[zero] = 0
    sub = (exp == 0) & (man != 0)
    if sub.any():
        m = man[sub]
        _, e = np.frexp(m.astype(np.float64))  # m is an integer < 2**23: exact
        top = (e - 1).astype(np.uint64)  # index of m's highest set bit
        out_exp[sub] = top + np.uint64(874)
        out_man[sub] = (m - (np.uint64(1) << top)) << (np.uint64(52) - top)
    return cast("ndarray", (sign << np.uint64(63)) | (out_exp << np.uint64(52)) | out_man)


def narrow_bits(bits64: np.ndarray, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """float64 bits -> (bits in `dtype`, mask of the values exactly representable in it).

    Where the mask is False the returned bits are meaningless.
    """
    np = numpy()
    b = np.asarray(bits64).astype(np.uint64)
    if dtype == "float64":
        return b, np.ones(b.shape, dtype=bool)
    if dtype not in ("float32", "bfloat16"):
        raise ValueError(f"unknown dtype {dtype!r}")
    sign = b >> np.uint64(63)
    exp = ((b >> np.uint64(52)) & np.uint64(0x7FF)).astype(np.int64)
    man = b & np.uint64((1 << 52) - 1)
    low29 = man & np.uint64((1 << 29) - 1)
    man32 = man >> np.uint64(29)
    e = exp - 1023
    special = exp == 0x7FF
    zero = (exp == 0) & (man == 0)
    normal = (exp != 0) & ~special & (e >= -126) & (e <= 127)
    subn = (exp != 0) & ~special & (e >= -149) & (e < -126)
    out = np.zeros(b.shape, dtype=np.uint64)
    out[special] = (np.uint64(0xFF) << np.uint64(23)) | man32[special]
    out[normal] = ((e[normal] + 127).astype(np.uint64) << np.uint64(23)) | man32[normal]
    ok = zero | ((special | normal) & (low29 == 0))
    if subn.any():
        full = man[subn] | np.uint64(1 << 52)
        shift = (-(e[subn] + 97)).astype(np.uint64)  # 30 ..= 52
        out[subn] = full >> shift
        ok[subn] = (full & ((np.uint64(1) << shift) - np.uint64(1))) == 0
    out |= sign << np.uint64(31)
    if dtype == "bfloat16":
        ok &= (out & np.uint64(0xFFFF)) == 0
        return (out >> np.uint64(16)).astype(np.uint16), ok
    return out.astype(np.uint32), ok


def _bits_to_float(b: int) -> float:
    return cast(float, struct.unpack("<d", struct.pack("<Q", b))[0])


def format_value(bits64: int, dtype: str) -> str:
    """One value in dump notation: repr for finite values, else inf/-inf/nan/nan:0x...."""
    exp = (bits64 >> 52) & 0x7FF
    if exp != 0x7FF:
        return repr(_bits_to_float(bits64))
    if bits64 & ((1 << 52) - 1) == 0:
        return "-inf" if bits64 >> 63 else "inf"
    np = numpy()
    native = int(narrow_bits(np.array([bits64], dtype=np.uint64), dtype)[0][0])
    if native == CANONICAL_NAN[dtype]:
        return "nan"
    if native == CANONICAL_NAN[dtype] | SIGN_BIT[dtype]:
        return "-nan"
    return f"nan:0x{native:0{HEX_DIGITS[dtype]}x}"


def native_hex(bits64: int, dtype: str) -> str:
    np = numpy()
    native = int(narrow_bits(np.array([bits64], dtype=np.uint64), dtype)[0][0])
    return f"0x{native:0{HEX_DIGITS[dtype]}x}"


# dtype name (torch/numpy spelling) -> (safetensors code, bytes per element)
TENSOR_DTYPES: dict[str, tuple[str, int]] = {
    "float64": ("F64", 8),
    "float32": ("F32", 4),
    "float16": ("F16", 2),
    "bfloat16": ("BF16", 2),
    "float8_e4m3fn": ("F8_E4M3", 1),
    "float8_e5m2": ("F8_E5M2", 1),
    "int64": ("I64", 8),
    "int32": ("I32", 4),
    "int16": ("I16", 2),
    "int8": ("I8", 1),
    "uint64": ("U64", 8),
    "uint32": ("U32", 4),
    "uint16": ("U16", 2),
    "uint8": ("U8", 1),
    "bool": ("BOOL", 1),
}
TENSOR_CODES = {code: name for name, (code, _) in TENSOR_DTYPES.items()}
TENSOR_FLOATS = ("float64", "float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2")


_F8_TABLES: dict[str, Any] = {}


def tensor_values(bits: Any, dtype: str) -> Any:
    """float64 values of bits of *dtype* (exact for every float type; integers converted)."""
    np = numpy()
    if dtype == "float64":
        return bits.view("<f8")
    if dtype == "float32":
        return bits.view("<f4").astype(np.float64)
    if dtype == "float16":
        return bits.view("<f2").astype(np.float64)
    if dtype == "bfloat16":
        return (bits.astype(np.uint32) << 16).view("<f4").astype(np.float64)
    if dtype in ("float8_e4m3fn", "float8_e5m2"):
        table = _F8_TABLES.get(dtype)
        if table is None:
            table = _F8_TABLES[dtype] = _f8_table(dtype)
        return table[bits]
    if dtype == "bool":
        return bits.astype(np.float64)
    signed = {"int64": "<i8", "int32": "<i4", "int16": "<i2", "int8": "i1"}
    if dtype in signed:
        return bits.view(signed[dtype]).astype(np.float64)
    return bits.astype(np.float64)


def _f8_table(dtype: str) -> Any:
    np = numpy()
    exp_bits, man_bits, bias = (4, 3, 7) if dtype == "float8_e4m3fn" else (5, 2, 15)
    out = np.empty(256, dtype=np.float64)
    for b in range(256):
        sign = -1.0 if b >> 7 else 1.0
        e = (b >> man_bits) & ((1 << exp_bits) - 1)
        m = b & ((1 << man_bits) - 1)
        if dtype == "float8_e4m3fn" and e == 15 and m == 7:
            out[b] = math.nan
        elif dtype == "float8_e5m2" and e == 31:
            out[b] = sign * math.inf if m == 0 else math.nan
        elif e == 0:
            out[b] = sign * m * 2.0 ** (1 - bias - man_bits)
        else:
            out[b] = sign * (1 + m / (1 << man_bits)) * 2.0 ** (e - bias)
    return out


def show_value(bits_value: int, dtype: str) -> tuple[str, str]:
    """(value text, hex bits) of one element."""
    np = numpy()
    width = TENSOR_DTYPES[dtype][1]
    hex_bits = f"0x{bits_value:0{2 * width}x}"
    value = float(tensor_values(np.array([bits_value], dtype=f"<u{width}"), dtype)[0])
    if dtype not in TENSOR_FLOATS:
        return str(int(value)) if dtype != "bool" else str(bool(value)), hex_bits
    if math.isnan(value):
        return ("-nan" if bits_value >> (8 * width - 1) else "nan"), hex_bits
    return repr(value), hex_bits

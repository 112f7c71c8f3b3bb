"""The safetensors container: an 8-byte little-endian header length, a JSON header, then the data.

Both dump formats use it (`zmr.evidence.dumps.logprobs`, `zmr.evidence.dumps.tensors`). A header
comes from a file zmr did not write, so every size in it is checked before
anything is allocated: `Malformed` says what is wrong, in words the callers put
into their messages.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from zmr.infra.files import parse_json

# numpy makes at most 32 dimensions (64 from numpy 2) of at most 2**63 - 1 each, empty arrays included.
MAX_DIMENSIONS = 32
MAX_DIMENSION = 2**62


class Malformed(ValueError):
    """What is wrong with a safetensors file or one of its tensors."""


@dataclass(frozen=True)
class Tensor:
    """One header entry, checked: ``begin`` and ``end`` are offsets in the data that follows the header."""

    code: str
    shape: tuple[int, ...]
    begin: int
    end: int


def split(data: bytes | memoryview | Any) -> tuple[dict[str, Any], dict[str, Any], int]:
    """(the tensors' raw header entries, ``__metadata__``, where the data starts) of the file *data*."""
    if len(data) < 8:
        raise Malformed("too short")
    (hlen,) = struct.unpack("<Q", data[:8])
    if 8 + hlen > len(data):
        raise Malformed(f"header length {hlen} past the end")
    try:
        header = parse_json(bytes(data[8 : 8 + hlen]).decode("utf-8"))
        if not isinstance(header, dict):
            raise ValueError("header is not an object")
    except ValueError as err:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise Malformed(f"bad header: {err}") from None
    meta = header.pop("__metadata__", None) or {}
    if not isinstance(meta, dict):
        raise Malformed("__metadata__ is not an object")
    return header, meta, 8 + hlen


def tensor(info: Any, data_size: int, itemsize: dict[str, int]) -> Tensor:
    """The header entry *info* checked against the data's size and the element size of its dtype code."""
    try:
        code = info["dtype"]
        shape = tuple(int(s) for s in info["shape"])
        begin, end = (int(x) for x in info["data_offsets"])
        if not isinstance(code, str):
            raise ValueError
    except (KeyError, TypeError, ValueError, OverflowError):
        raise Malformed("a malformed header entry") from None
    if any(s < 0 for s in shape):
        raise Malformed("a negative dimension")
    if len(shape) > MAX_DIMENSIONS or any(s > MAX_DIMENSION for s in shape):
        raise Malformed(f"a shape numpy cannot hold ({len(shape)} dimensions, largest {max(shape, default=0)})")
    if code not in itemsize:
        raise Malformed(f"dtype {code}")
    count = 1
    for s in shape:
        count *= s
    if not (0 <= begin <= end <= data_size) or end - begin != count * itemsize[code]:
        raise Malformed("offsets that do not match its shape and dtype")
    return Tensor(code, shape, begin, end)


def encode(tensors: Iterable[tuple[str, str, tuple[int, ...], bytes]], meta: dict[str, str]) -> bytes:
    """A safetensors file of (name, dtype code, shape, little-endian bytes), in name order, with *meta*."""
    header: dict[str, Any] = {"__metadata__": meta}
    chunks = []
    offset = 0
    for name, code, shape, raw in sorted(tensors, key=lambda t: t[0]):
        header[name] = {"dtype": code, "shape": [int(s) for s in shape], "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    head = json.dumps(header, separators=(",", ":")).encode("utf-8")
    head += b" " * (-len(head) % 8)  # the data starts 8-byte aligned
    return struct.pack("<Q", len(head)) + head + b"".join(chunks)

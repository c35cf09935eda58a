"""Protobuf's wire format, the few field kinds the messages written here need (the ONNX graph, the
sentencepiece model): writing them directly spares a dependency and a code generator."""

from __future__ import annotations

import struct


def varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # negative ints are ten-byte two's complement varints
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _key(field: int, wire_type: int) -> bytes:
    return varint(field << 3 | wire_type)


def varint_field(field: int, value: int) -> bytes:
    """An int, bool or enum field."""
    return _key(field, 0) + varint(value)


def float_field(field: int, value: float) -> bytes:
    return _key(field, 5) + struct.pack("<f", value)


def bytes_field(field: int, value: bytes) -> bytes:
    """A bytes field or an embedded message."""
    return _key(field, 2) + varint(len(value)) + value


def string_field(field: int, value: str) -> bytes:
    return bytes_field(field, value.encode("utf-8"))

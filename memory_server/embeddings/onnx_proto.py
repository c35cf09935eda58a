"""The few ONNX protobuf messages an encoder graph needs, written directly.

Importing the `onnx` package costs about a second and a dependency; a graph is only nodes, attributes,
tensors and typed inputs and outputs, whose wire format (onnx.proto3: field numbers below) is a few lines
of protobuf encoding.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from memory_server.embeddings.protobuf import bytes_field as _bytes
from memory_server.embeddings.protobuf import float_field
from memory_server.embeddings.protobuf import string_field as _str
from memory_server.embeddings.protobuf import varint_field as _int

# TensorProto.DataType
_DATA_TYPES = {
    np.dtype(np.float32): 1,
    np.dtype(np.uint8): 2,
    np.dtype(np.int8): 3,
    np.dtype(np.int32): 6,
    np.dtype(np.int64): 7,
}
FLOAT, INT32 = 1, 6
# AttributeProto.AttributeType
_ATTR_FLOAT, _ATTR_INT, _ATTR_INTS = 1, 2, 7


def tensor(name: str, array: np.ndarray) -> bytes:
    """TensorProto: dims (1), data_type (2), name (8), raw_data (9, little-endian)."""
    array = np.asarray(array, order="C")  # not ascontiguousarray, which makes a scalar one-dimensional
    body = b"".join(_int(1, int(d)) for d in array.shape)
    body += (
        _int(2, _DATA_TYPES[array.dtype])
        + _str(8, name)
        + _bytes(9, array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes())
    )
    return body


def attribute(name: str, value: int | float | list[int]) -> bytes:
    """AttributeProto: name (1), f (2), i (3), ints (8), type (20)."""
    if isinstance(value, bool) or isinstance(value, int):
        return _str(1, name) + _int(3, int(value)) + _int(20, _ATTR_INT)
    if isinstance(value, float):
        return _str(1, name) + float_field(2, value) + _int(20, _ATTR_FLOAT)
    return _str(1, name) + b"".join(_int(8, v) for v in value) + _int(20, _ATTR_INTS)


def node(
    op_type: str,
    inputs: Iterable[str],
    outputs: Iterable[str],
    *,
    name: str,
    domain: str = "",
    attributes: dict[str, int | float | list[int]] | None = None,
) -> bytes:
    """NodeProto: input (1), output (2), name (3), op_type (4), attribute (5), domain (7)."""
    body = b"".join(_str(1, i) for i in inputs) + b"".join(_str(2, o) for o in outputs)
    body += _str(3, name) + _str(4, op_type)
    body += b"".join(_bytes(5, attribute(k, v)) for k, v in (attributes or {}).items())
    return body + (_str(7, domain) if domain else b"")


def value_info(name: str, element_type: int, dims: Iterable[int | str]) -> bytes:
    """ValueInfoProto: name (1), type (2) = TypeProto.tensor_type (1) = elem_type (1), shape (2) of dim (1)
    each a dim_value (1) or a dim_param (2)."""
    shape = b"".join(_bytes(1, _int(1, d) if isinstance(d, int) else _str(2, d)) for d in dims)
    return _str(1, name) + _bytes(2, _bytes(1, _int(1, element_type) + _bytes(2, shape)))


def model(
    *,
    nodes: list[bytes],
    initializers: list[bytes],
    inputs: list[bytes],
    outputs: list[bytes],
    opsets: dict[str, int],
    ir_version: int = 8,
) -> bytes:
    """ModelProto: ir_version (1), graph (7), opset_import (8: domain 1, version 2); GraphProto: node (1),
    name (2), initializer (5), input (11), output (12)."""
    graph = b"".join(_bytes(1, n) for n in nodes) + _str(2, "encoder")
    graph += b"".join(_bytes(5, t) for t in initializers)
    graph += b"".join(_bytes(11, i) for i in inputs) + b"".join(_bytes(12, o) for o in outputs)
    opset_imports = b"".join(
        _bytes(8, (_str(1, domain) if domain else b"") + _int(2, version)) for domain, version in opsets.items()
    )
    return _int(1, ir_version) + _bytes(7, graph) + opset_imports

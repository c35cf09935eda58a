"""A BERT-family text encoder as an in-memory ONNX graph, built from weights read with numpy.

Both bundled models are post-LayerNorm BERT encoders (multilingual-e5-small is XLM-RoBERTa, which differs
from BERT only in its vocabulary and position offset; all-MiniLM-L6-v2 is BERT): embeddings, then per layer
self-attention and a GELU feed-forward, each followed by residual + LayerNorm; the graph ends with mean
pooling over the attention mask. Building the graph here instead of exporting it with torch means serving
needs neither torch nor a file produced by an install step.

Linear weights come either as float matrices or as 4-bit blocks (`Q4Blocks`, 32 weights and one scale per
block), which run through onnxruntime's MatMulNBits kernel unchanged. The word embedding lookup happens
outside the graph (the table is most of a multilingual model), so the graph's inputs are the looked-up
word vectors and the attention mask.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from embeddings import onnx_proto

# Rows of a 4-bit block: 32 weights, stored (value + 8) in nibbles, and one scale.
Q4_BLOCK = 32
_OPSET = 17  # LayerNormalization is a standard op from 17
_MS_DOMAIN = "com.microsoft"


@dataclass(frozen=True)
class Q4Blocks:
    """A [rows, cols] weight matrix in 4-bit blocks along `cols`: w = (nibble - 8) * scale.

    `packed` is uint8 [rows, cols // 32, 16] in onnxruntime's order (weight 2i in the low nibble of byte i,
    weight 2i+1 in the high one); `scales` is float32 [rows, cols // 32].
    """

    packed: np.ndarray
    scales: np.ndarray

    @property
    def shape(self) -> tuple[int, int]:
        rows, blocks, _ = self.packed.shape
        return rows, blocks * Q4_BLOCK

    def dequantize(self) -> np.ndarray:
        low = (self.packed & 0x0F).astype(np.int8) - 8
        high = (self.packed >> 4).astype(np.int8) - 8
        values = np.stack([low, high], axis=-1).reshape(self.packed.shape[0], self.packed.shape[1], Q4_BLOCK)
        weights: np.ndarray = (values.astype(np.float32) * self.scales[:, :, None]).reshape(self.shape)
        return weights


@dataclass(frozen=True)
class Int8Columns:
    """A [rows, cols] weight matrix as int8 [cols, rows] with one scale per row of the original (an output):
    w = value * scale. onnxruntime multiplies it with int8 activations (DynamicQuantizeMatMul), several
    times faster than float on CPUs with integer dot-product instructions."""

    values: np.ndarray
    scales: np.ndarray

    @classmethod
    def of(cls, weights: np.ndarray) -> Int8Columns:
        scales = np.maximum(np.abs(weights).max(axis=1), 1e-12) / 127.0
        values = np.clip(np.rint(weights / scales[:, None]), -127, 127).astype(np.int8)
        return cls(values=np.ascontiguousarray(values.T), scales=scales.astype(np.float32))


# A linear layer's weight: float32 [out, in] (torch's Linear layout), or the same in 4-bit blocks or int8.
Weight = np.ndarray | Q4Blocks | Int8Columns


@dataclass(frozen=True)
class Linear:
    weight: Weight
    bias: np.ndarray


@dataclass(frozen=True)
class Norm:
    weight: np.ndarray
    bias: np.ndarray


@dataclass(frozen=True)
class Layer:
    query: Linear
    key: Linear
    value: Linear
    attention_out: Linear
    attention_norm: Norm
    intermediate: Linear
    output: Linear
    output_norm: Norm


@dataclass(frozen=True)
class Encoder:
    """Everything of the encoder but the word embedding table."""

    heads: int
    eps: float
    positions: np.ndarray  # float32 [max_positions, hidden]; row p is position p of a sequence
    token_type: np.ndarray  # float32 [hidden]: segment 0, the only one a sentence encoder uses
    embedding_norm: Norm
    layers: list[Layer]

    @property
    def hidden(self) -> int:
        return int(self.positions.shape[1])

    @property
    def max_positions(self) -> int:
        return int(self.positions.shape[0])


def build_graph(encoder: Encoder) -> bytes:
    """The serialized ONNX model: inputs `word_vectors` float32 [batch, length, hidden] and `mask` float32
    [batch, length] (1 for a token, 0 for padding); output `pooled` float32 [batch, hidden], the mean of the
    last layer over the mask (not normalised)."""
    builder = _GraphBuilder(encoder)
    pooled = builder.encode()
    hidden = encoder.hidden
    return onnx_proto.model(
        nodes=builder.nodes, initializers=builder.initializers,
        inputs=[onnx_proto.value_info("word_vectors", onnx_proto.FLOAT, ["batch", "length", hidden]),
                onnx_proto.value_info("mask", onnx_proto.FLOAT, ["batch", "length"])],
        outputs=[onnx_proto.value_info(pooled, onnx_proto.FLOAT, ["batch", hidden])],
        opsets={"": _OPSET, _MS_DOMAIN: 1},
    )


class _GraphBuilder:
    """Appends nodes and initializers; each method returns the name of the tensor it produced."""

    def __init__(self, encoder: Encoder) -> None:
        self.encoder = encoder
        self.nodes: list[bytes] = []
        self.initializers: list[bytes] = []
        self._names: set[str] = set()
        self._widths: dict[str, int] = {}  # tensors whose last dimension is not the hidden size
        self._count = 0

    def encode(self) -> str:
        e = self.encoder
        length = self._node("Gather", [self._node("Shape", ["word_vectors"]), self._const("one", np.int64(1))])
        positions = self._node("Slice", [self._const("positions", e.positions), self._const("zero", np.array([0])),
                                         self._node("Unsqueeze", [length, self._const("axis0", np.array([0]))])])
        x = self._node("Add", [self._node("Add", ["word_vectors", positions]), self._const("type", e.token_type)])
        x = self._norm(x, e.embedding_norm, "emb")
        padding = self._node("Cast", ["mask"], to=onnx_proto.INT32)  # the key padding mask: 1 a token, 0 padding
        for number, layer in enumerate(e.layers):
            x = self._layer(x, layer, padding, f"l{number}")
        return self._pool(x)

    def _layer(self, x: str, layer: Layer, padding: str, prefix: str) -> str:
        q = self._linear(x, layer.query, f"{prefix}.q")
        k = self._linear(x, layer.key, f"{prefix}.k")
        v = self._linear(x, layer.value, f"{prefix}.v")
        context = self._node("MultiHeadAttention", [q, k, v, "", padding], domain=_MS_DOMAIN,
                             num_heads=self.encoder.heads)
        attended = self._linear(context, layer.attention_out, f"{prefix}.ao")
        x = self._norm(self._node("Add", [x, attended]), layer.attention_norm, f"{prefix}.aln")
        inner = self._gelu(self._linear(x, layer.intermediate, f"{prefix}.fi"))
        self._widths[inner] = layer.intermediate.bias.shape[0]
        out = self._linear(inner, layer.output, f"{prefix}.fo")
        return self._norm(self._node("Add", [x, out]), layer.output_norm, f"{prefix}.oln")

    def _pool(self, x: str) -> str:
        mask = self._node("Unsqueeze", ["mask", self._const("axis2", np.array([2]))])
        summed = self._node("ReduceSum", [self._node("Mul", [x, mask]), self._const("axis1", np.array([1]))],
                            keepdims=0)
        count = self._node("ReduceSum", ["mask", self._const("axis1", np.array([1]))], keepdims=1)
        return self._node("Div", [summed, self._node("Max", [count, self._const("tiny", np.float32(1e-9))])],
                          output="pooled")

    def _linear(self, x: str, linear: Linear, prefix: str) -> str:
        bias = self._const(f"{prefix}.b", linear.bias.astype(np.float32))
        if isinstance(linear.weight, Int8Columns):
            return self._int8_linear(x, linear.weight, bias, prefix)
        if isinstance(linear.weight, Q4Blocks):
            rows, cols = linear.weight.shape
            product = self._node(
                "MatMulNBits",
                [x, self._const(f"{prefix}.w", linear.weight.packed),
                 self._const(f"{prefix}.s", linear.weight.scales.reshape(-1))],
                domain=_MS_DOMAIN, K=cols, N=rows, bits=4, block_size=Q4_BLOCK,
            )
        else:
            product = self._node("MatMul", [x, self._const(f"{prefix}.w", np.ascontiguousarray(linear.weight.T))])
        return self._node("Add", [product, bias])

    def _int8_linear(self, x: str, weight: Int8Columns, bias: str, prefix: str) -> str:
        """x @ w + bias with x quantized to uint8 a token (row) at a time: one scale a token keeps a token's
        small values apart when another token has large ones."""
        width = self.encoder_width(x)
        inner = self._const(f"rows_of_{width}", np.array([-1, width]))
        rows = self._node("Reshape", [x, inner])
        peak = self._node("ReduceMax", [self._node("Abs", [rows])], axes=[1], keepdims=0)
        scale = self._node("Max", [self._node("Div", [peak, self._const("i127", np.float32(127.0))]),
                                   self._const("tiny_scale", np.float32(1e-12))])
        column = self._node("Unsqueeze", [scale, self._const("axis1", np.array([1]))])
        shifted = self._node("Add", [self._node("Round", [self._node("Div", [rows, column])]),
                                     self._const("f128", np.float32(128.0))])
        quantized = self._node("Cast", [self._node("Clip", [shifted, self._const("f0", np.float32(0.0)),
                                                            self._const("f255", np.float32(255.0))])], to=2)
        product = self._node("MatMulInteger", [quantized, self._const(f"{prefix}.w", weight.values),
                                               self._const("zp128", np.uint8(128))])
        scaled = self._node("Mul", [self._node("Mul", [self._node("Cast", [product], to=onnx_proto.FLOAT), column]),
                                    self._const(f"{prefix}.s", weight.scales)])
        leading = self._node("Slice", [self._node("Shape", [x]), self._const("zero", np.array([0])),
                                        self._const("minus1", np.array([-1]))])
        out_shape = self._node("Concat", [leading, self._const(f"{prefix}.n", np.array([len(weight.scales)]))], axis=0)
        return self._node("Add", [self._node("Reshape", [scaled, out_shape]), bias])

    def encoder_width(self, x: str) -> int:
        return self._widths.get(x, self.encoder.hidden)

    def _norm(self, x: str, norm: Norm, prefix: str) -> str:
        return self._node("LayerNormalization", [x, self._const(f"{prefix}.w", norm.weight),
                                                 self._const(f"{prefix}.b", norm.bias)],
                          axis=-1, epsilon=self.encoder.eps)

    def _gelu(self, x: str) -> str:
        # The exact (erf) GELU BERT uses; onnxruntime fuses this pattern into one kernel.
        erf = self._node("Erf", [self._node("Mul", [x, self._const("inv_sqrt2", np.float32(1 / np.sqrt(2)))])])
        half_x = self._node("Mul", [x, self._const("half", np.float32(0.5))])
        return self._node("Mul", [half_x, self._node("Add", [erf, self._const("fone", np.float32(1.0))])])

    def _const(self, name: str, value: np.ndarray | np.generic) -> str:
        if name not in self._names:
            self._names.add(name)
            array = np.asarray(value)
            self.initializers.append(onnx_proto.tensor(name, array.astype(np.float32) if array.dtype == np.float64
                                                       else array))
        return name

    def _node(self, op: str, inputs: list[str], *, output: str | None = None, domain: str = "",
              **attributes: int | float | list[int]) -> str:
        self._count += 1
        name = output or f"{op.lower()}{self._count}"
        self.nodes.append(onnx_proto.node(op, inputs, [name], name=f"n{self._count}", domain=domain,
                                          attributes=attributes))
        return name

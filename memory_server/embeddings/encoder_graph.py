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

from memory_server.embeddings import onnx_proto

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
    w = value * scale. onnxruntime multiplies it with int8 activations (MatMulIntegerToFloat), several times faster
    than float on CPUs with integer dot-product instructions.

    `smooth` (one factor per input) moves the range of a few outlier input channels into the weights: the
    input is divided by it before being quantized and `values` were made from the weights times it, so the
    product is unchanged while one large channel no longer coarsens the steps of all the others."""

    values: np.ndarray
    scales: np.ndarray
    smooth: np.ndarray | None = None

    @classmethod
    def of(cls, weights: np.ndarray, smooth: np.ndarray | None = None) -> Int8Columns:
        if smooth is not None:
            weights = weights * smooth[None, :]
        scales = np.maximum(np.abs(weights).max(axis=1), 1e-12) / 127.0
        values = np.clip(np.rint(weights / scales[:, None]), -127, 127).astype(np.int8)
        return cls(
            values=np.ascontiguousarray(values.T),
            scales=scales.astype(np.float32),
            smooth=None if smooth is None else smooth.astype(np.float32),
        )


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
    return build_tapped_graph(encoder, taps=False)[0]


def build_tapped_graph(encoder: Encoder, *, taps: bool = True) -> tuple[bytes, dict[str, str]]:
    """build_graph's model, which with `taps` also outputs the input of every linear layer ("l<n>.qkv",
    "l<n>.ao", "l<n>.fi", "l<n>.fo" -> the output's name): what int8 calibration measures."""
    builder = _GraphBuilder(encoder)
    pooled = builder.encode()
    hidden = encoder.hidden
    tapped = builder.linear_inputs if taps else {}
    return onnx_proto.model(
        nodes=builder.nodes,
        initializers=builder.initializers,
        inputs=[
            onnx_proto.value_info("word_vectors", onnx_proto.FLOAT, ["batch", "length", hidden]),
            onnx_proto.value_info("mask", onnx_proto.FLOAT, ["batch", "length"]),
        ],
        outputs=[onnx_proto.value_info(pooled, onnx_proto.FLOAT, ["batch", hidden])]
        + [
            onnx_proto.value_info(name, onnx_proto.FLOAT, ["batch", "length", builder.encoder_width(name)])
            for name in tapped.values()
        ],
        opsets={"": _OPSET, _MS_DOMAIN: 1},
    ), tapped


def _joined(*linears: Linear) -> Linear:
    """Linear layers reading the same input as one layer whose outputs are theirs side by side."""
    bias = np.concatenate([linear.bias for linear in linears])
    weights = [linear.weight for linear in linears]
    if all(isinstance(w, Int8Columns) for w in weights):
        int8 = [w for w in weights if isinstance(w, Int8Columns)]
        smooth = int8[0].smooth
        if all(w.smooth is None for w in int8) or all(
            w.smooth is not None and smooth is not None and np.array_equal(w.smooth, smooth) for w in int8
        ):
            return Linear(
                Int8Columns(
                    values=np.concatenate([w.values for w in int8], axis=1),
                    scales=np.concatenate([w.scales for w in int8]),
                    smooth=smooth,
                ),
                bias,
            )
    if all(isinstance(w, Q4Blocks) for w in weights):
        q4 = [w for w in weights if isinstance(w, Q4Blocks)]
        return Linear(
            Q4Blocks(packed=np.concatenate([w.packed for w in q4]), scales=np.concatenate([w.scales for w in q4])), bias
        )
    if all(isinstance(w, np.ndarray) for w in weights):
        return Linear(np.concatenate([np.asarray(w) for w in weights]), bias)
    raise ValueError("the projections of one attention layer must share a weight format")


class _GraphBuilder:
    """Appends nodes and initializers; each method returns the name of the tensor it produced."""

    def __init__(self, encoder: Encoder) -> None:
        self.encoder = encoder
        self.nodes: list[bytes] = []
        self.initializers: list[bytes] = []
        self._names: set[str] = set()
        self._widths: dict[str, int] = {}  # tensors whose last dimension is not the hidden size
        self.linear_inputs: dict[str, str] = {}  # "l<n>.<part>" -> the tensor that linear part reads
        self._count = 0

    def encode(self) -> str:
        e = self.encoder
        length = self._node("Gather", [self._node("Shape", ["word_vectors"]), self._const("one", np.int64(1))])
        positions = self._node(
            "Slice",
            [
                self._const("positions", e.positions),
                self._const("zero", np.array([0])),
                self._node("Unsqueeze", [length, self._const("axis0", np.array([0]))]),
            ],
        )
        x = self._node("Add", [self._node("Add", ["word_vectors", positions]), self._const("type", e.token_type)])
        x = self._norm(x, e.embedding_norm, "emb")
        padding = self._node("Cast", ["mask"], to=onnx_proto.INT32)  # the key padding mask: 1 a token, 0 padding
        for number, layer in enumerate(e.layers):
            x = self._layer(x, layer, padding, f"l{number}")
        return self._pool(x)

    def _layer(self, x: str, layer: Layer, padding: str, prefix: str) -> str:
        q, k, v = self._split(
            self._linear(x, _joined(layer.query, layer.key, layer.value), f"{prefix}.qkv"), self.encoder.hidden, 3
        )
        context = self._node(
            "MultiHeadAttention", [q, k, v, "", padding], domain=_MS_DOMAIN, num_heads=self.encoder.heads
        )
        attended = self._linear(context, layer.attention_out, f"{prefix}.ao")
        x = self._norm(self._node("Add", [x, attended]), layer.attention_norm, f"{prefix}.aln")
        inner = self._gelu(self._linear(x, layer.intermediate, f"{prefix}.fi"))
        self._widths[inner] = layer.intermediate.bias.shape[0]
        out = self._linear(inner, layer.output, f"{prefix}.fo")
        return self._norm(self._node("Add", [x, out]), layer.output_norm, f"{prefix}.oln")

    def _split(self, x: str, width: int, parts: int) -> list[str]:
        """One product of three projections (one pass over x) cut back into them along the last axis."""
        self._count += 1
        names = [f"split{self._count}_{part}" for part in range(parts)]
        sizes = self._const(f"split_{width}x{parts}", np.array([width] * parts))
        self.nodes.append(onnx_proto.node("Split", [x, sizes], names, name=f"n{self._count}", attributes={"axis": -1}))
        return names

    def _pool(self, x: str) -> str:
        mask = self._node("Unsqueeze", ["mask", self._const("axis2", np.array([2]))])
        summed = self._node(
            "ReduceSum", [self._node("Mul", [x, mask]), self._const("axis1", np.array([1]))], keepdims=0
        )
        count = self._node("ReduceSum", ["mask", self._const("axis1", np.array([1]))], keepdims=1)
        return self._node(
            "Div", [summed, self._node("Max", [count, self._const("tiny", np.float32(1e-9))])], output="pooled"
        )

    def _linear(self, x: str, linear: Linear, prefix: str) -> str:
        self.linear_inputs[prefix] = x
        bias = self._const(f"{prefix}.b", linear.bias.astype(np.float32))
        if isinstance(linear.weight, Int8Columns):
            return self._int8_linear(x, linear.weight, bias, prefix)
        if isinstance(linear.weight, Q4Blocks):
            rows, cols = linear.weight.shape
            product = self._node(
                "MatMulNBits",
                [
                    x,
                    self._const(f"{prefix}.w", linear.weight.packed),
                    self._const(f"{prefix}.s", linear.weight.scales.reshape(-1)),
                ],
                domain=_MS_DOMAIN,
                K=cols,
                N=rows,
                bits=4,
                block_size=Q4_BLOCK,
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
        if weight.smooth is not None:  # the input divided channel by channel (the weights were multiplied)
            rows = self._node("Mul", [rows, self._const(f"{prefix}.sm", (1.0 / weight.smooth).astype(np.float32))])
        # Each row's own range [min(row, 0), max(row, 0)] in 255 steps, so that an input of one sign (the
        # feed-forward's, after GELU) uses all of them.
        nought, steps = self._const("f0", np.float32(0.0)), self._const("f255", np.float32(255.0))
        low = self._node("Min", [self._node("ReduceMin", [rows], axes=[1], keepdims=1), nought])
        high = self._node("Max", [self._node("ReduceMax", [rows], axes=[1], keepdims=1), nought])
        step = self._node(
            "Max",
            [self._node("Div", [self._node("Sub", [high, low]), steps]), self._const("tiny_scale", np.float32(1e-12))],
        )
        zero = self._node("Round", [self._node("Div", [self._node("Neg", [low]), step])])
        flat = self._const("flat", np.array([-1]))
        quantized = self._node(
            "QuantizeLinear",
            [
                rows,
                self._node("Reshape", [step, flat]),
                self._node("Cast", [self._node("Reshape", [zero, flat])], to=2),
            ],
            axis=0,
        )
        # (q - zero) @ w * step * scale + bias: the product without the zero point, its scales (one kernel) ...
        product = self._node(
            "MatMulIntegerToFloat",
            [
                quantized,
                self._const(f"{prefix}.w", weight.values),
                self._const("f1", np.float32(1.0)),
                self._const(f"{prefix}.s", weight.scales),
            ],
            domain=_MS_DOMAIN,
        )
        # ... and the zero point's share with the bias as one rank-one product: -zero * step x column sums + bias.
        column_sums = (weight.values.astype(np.float32).sum(axis=0) * weight.scales).reshape(1, -1)
        offsets = self._node("Gemm", [self._node("Mul", [zero, step]), self._const(f"{prefix}.cs", -column_sums), bias])
        exact = self._node("Add", [self._node("Mul", [product, step]), offsets])
        leading = self._node(
            "Slice",
            [self._node("Shape", [x]), self._const("zero", np.array([0])), self._const("minus1", np.array([-1]))],
        )
        out_shape = self._node("Concat", [leading, self._const(f"{prefix}.n", np.array([len(weight.scales)]))], axis=0)
        return self._node("Reshape", [exact, out_shape])

    def encoder_width(self, x: str) -> int:
        return self._widths.get(x, self.encoder.hidden)

    def _norm(self, x: str, norm: Norm, prefix: str) -> str:
        return self._node(
            "LayerNormalization",
            [x, self._const(f"{prefix}.w", norm.weight), self._const(f"{prefix}.b", norm.bias)],
            axis=-1,
            epsilon=self.encoder.eps,
        )

    def _gelu(self, x: str) -> str:
        # The exact (erf) GELU BERT uses, as onnxruntime's one kernel: its optimiser left the int8 graph's
        # erf, three products and a sum apart.
        return self._node("Gelu", [x], domain=_MS_DOMAIN)

    def _const(self, name: str, value: np.ndarray | np.generic) -> str:
        if name not in self._names:
            self._names.add(name)
            array = np.asarray(value)
            self.initializers.append(
                onnx_proto.tensor(name, array.astype(np.float32) if array.dtype == np.float64 else array)
            )
        return name

    def _node(
        self,
        op: str,
        inputs: list[str],
        *,
        output: str | None = None,
        domain: str = "",
        **attributes: int | float | list[int],
    ) -> str:
        self._count += 1
        name = output or f"{op.lower()}{self._count}"
        self.nodes.append(
            onnx_proto.node(op, inputs, [name], name=f"n{self._count}", domain=domain, attributes=attributes)
        )
        return name

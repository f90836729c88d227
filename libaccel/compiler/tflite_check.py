"""Structural check of a .tflite flatbuffer before anything reads it.

FlatBuffers readers trust their input: the ``tflite`` package's accessors raise a bare
``struct.error`` or ``IndexError`` on a truncated model, and ``tflite_runtime`` 2.14 does not run
the FlatBuffers verifier at all (a model cut short makes it read past the buffer: SIGSEGV). So
every tool that loads a model calls :func:`check_tflite` first; it does what the FlatBuffers C++
``Verifier`` does, then the index checks TFLite's interpreter builder relies on, and raises one
:class:`ModelError` naming the first problem.

The table layouts are not written down a second time here: they are read from the ``tflite``
package's generated accessors (each accessor's vtable slot and kind: scalar, string, table,
vector of scalars or tables, union), so the check follows the schema that the reader uses.
"""

from __future__ import annotations

import importlib
import inspect
import re
import struct
from dataclasses import dataclass
from functools import cache

import numpy as np


class ModelError(ValueError):
    """A model file that is not a well-formed TFLite flatbuffer; the message names the problem."""


#: TFLite tensor type name (lower case) -> numpy dtype, for the types whose bytes the project reads.
DTYPES = {
    "float32": np.float32,
    "float16": np.float16,
    "int32": np.int32,
    "uint8": np.uint8,
    "int64": np.int64,
    "bool": np.bool_,
    "int16": np.int16,
    "int8": np.int8,
    "float64": np.float64,
    "uint32": np.uint32,
    "uint16": np.uint16,
}

# The FlatBuffers C++ Verifier's defaults (flatbuffers/verifier.h): a deeper or bigger object
# graph is refused rather than walked, which also bounds the time a hostile model can cost.
MAX_DEPTH = 64
MAX_TABLES = 1_000_000
MAX_SIZE = 2**31 - 1  # FlatBuffers offsets are 32-bit signed sizes

_FLAG_SIZES = {
    "Bool": 1,
    "Uint8": 1,
    "Int8": 1,
    "Uint16": 2,
    "Int16": 2,
    "Uint32": 4,
    "Int32": 4,
    "Float32": 4,
    "Uint64": 8,
    "Int64": 8,
    "Float64": 8,
}
# Unions whose enum is not named after the field (the schema's `union` type names).
_UNION_ENUMS = {
    ("QuantizationParameters", "Details"): "QuantizationDetails",
    ("DimensionMetadata", "ArraySegments"): "SparseIndexVector",
    ("DimensionMetadata", "ArrayIndices"): "SparseIndexVector",
}


@dataclass(frozen=True)
class Field:
    """One table field as the generated accessor reads it."""

    name: str
    slot: int  # vtable offset (4, 6, 8, ...)
    kind: str  # "scalar", "string", "table", "vector", "tables", "union"
    size: int = 0  # scalar / vector element size
    table: str = ""  # class of a table / vector of tables
    union_enum: str = ""  # enum class naming a union's member tables


_METHOD = re.compile(r"\n    def (\w+)\(self(?:, j)?\):\n(.*?)(?=\n    (?:#|def|@)|\Z)", re.S)
_SLOT = re.compile(r"self\._tab\.Offset\((\d+)\)")
_FLAGS = re.compile(r"number_types\.(\w+?)Flags")
_IMPORT = re.compile(r"from tflite\.(\w+) import")


@cache
def table_fields(name: str) -> tuple[Field, ...]:
    """The fields of generated table class ``tflite.<name>``, read from its accessors."""
    source = inspect.getsource(importlib.import_module(f"tflite.{name}"))
    fields: dict[int, Field] = {}
    for method, body in _METHOD.findall(source):
        if method.endswith(("Length", "IsNone", "AsNumpy")):
            continue
        slot_match = _SLOT.search(body)
        if slot_match is None:
            continue
        slot = int(slot_match.group(1))
        if slot in fields:
            continue
        imported = _IMPORT.search(body)
        flags = [f for f in _FLAGS.findall(body) if f != "UOffsetT"]
        elem = flags[-1] if flags else ""
        if "self._tab.Union(" in body:
            enum = _UNION_ENUMS.get((name, method), method)
            f = Field(method, slot, "union", union_enum=enum)
        elif "self._tab.Vector(o)" in body:
            if "Indirect" in body and imported:
                f = Field(method, slot, "tables", 4, imported.group(1))
            elif "self._tab.String(" in body:
                f = Field(method, slot, "strings", 4)
            else:
                f = Field(method, slot, "vector", _FLAG_SIZES[elem])
        elif "self._tab.Indirect(o + self._tab.Pos)" in body and imported:
            f = Field(method, slot, "table", 4, imported.group(1))
        elif "self._tab.String(o + self._tab.Pos)" in body:
            f = Field(method, slot, "string", 4)
        elif elem in _FLAG_SIZES:
            f = Field(method, slot, "scalar", _FLAG_SIZES[elem])
        else:
            raise RuntimeError(f"tflite.{name}.{method}: an accessor this check does not understand")
        fields[slot] = f
    return tuple(sorted(fields.values(), key=lambda f: f.slot))


@cache
def _union_members(enum: str) -> dict[int, str]:
    cls = getattr(importlib.import_module(f"tflite.{enum}"), enum)
    return {v: k for k, v in vars(cls).items() if not k.startswith("_") and isinstance(v, int) and v}


class _Verifier:
    def __init__(self, data: bytes) -> None:
        self.buf = data
        self.size = len(data)
        self.tables = 0

    def fail(self, what: str) -> ModelError:
        return ModelError(f"not a valid TFLite model ({self.size} bytes): {what}")

    def need(self, pos: int, length: int, align: int, what: str) -> None:
        if pos < 0 or length < 0 or pos + length > self.size:
            raise self.fail(f"{what} at offset {pos} ({length} bytes) runs past the end of the file")
        if pos % align:
            raise self.fail(f"{what} at offset {pos} is not {align}-byte aligned")

    def u16(self, pos: int) -> int:
        return struct.unpack_from("<H", self.buf, pos)[0]

    def u32(self, pos: int) -> int:
        return struct.unpack_from("<I", self.buf, pos)[0]

    def deref(self, pos: int, what: str) -> int:
        """The target of the uoffset at ``pos`` (checked to be inside the file)."""
        self.need(pos, 4, 4, f"offset to {what}")
        off = self.u32(pos)
        if off == 0 or off > MAX_SIZE:
            raise self.fail(f"offset to {what} at {pos} is {off}")
        return pos + off

    def vector(self, pos: int, elem: int, what: str) -> tuple[int, int]:
        """(first element position, length) of the vector whose uoffset is at ``pos``."""
        start = self.deref(pos, what)
        self.need(start, 4, 4, f"length of {what}")
        n = self.u32(start)
        self.need(start + 4, n * elem, min(elem, 4) or 1, f"{what} ({n} elements)")
        return start + 4, n

    def string(self, pos: int, what: str) -> None:
        start, n = self.vector(pos, 1, what)
        if start + n >= self.size or self.buf[start + n] != 0:
            raise self.fail(f"{what} at offset {start} has no terminating zero byte")

    def table(self, pos: int, cls: str, depth: int) -> dict[str, int]:
        """Check table ``cls`` at ``pos`` and everything it references; returns its fields' positions."""
        if depth > MAX_DEPTH:
            raise self.fail(f"tables nested deeper than {MAX_DEPTH}")
        self.tables += 1
        if self.tables > MAX_TABLES:
            raise self.fail(f"more than {MAX_TABLES} tables")
        self.need(pos, 4, 4, f"{cls} table")
        vtable = pos - struct.unpack_from("<i", self.buf, pos)[0]
        self.need(vtable, 4, 2, f"{cls} vtable")
        vsize, tsize = self.u16(vtable), self.u16(vtable + 2)
        if vsize < 4 or vsize % 2:
            raise self.fail(f"{cls} vtable at offset {vtable} has a bad size {vsize}")
        self.need(vtable, vsize, 2, f"{cls} vtable")
        self.need(pos, tsize, 4, f"{cls} table")
        found: dict[str, int] = {}
        for f in table_fields(cls):
            voff = self.u16(vtable + f.slot) if f.slot < vsize else 0
            if voff == 0:
                continue
            size = f.size if f.kind == "scalar" else 4  # everything else is a 32-bit uoffset
            if voff + size > tsize:
                raise self.fail(f"{cls}.{f.name} lies outside its table ({voff} + {size} > {tsize})")
            at = pos + voff
            if at % min(size, 8):
                raise self.fail(f"{cls}.{f.name} at offset {at} is misaligned")
            found[f.name] = at
            what = f"{cls}.{f.name}"
            if f.kind == "string":
                self.string(at, what)
            elif f.kind == "vector":
                self.vector(at, f.size, what)
            elif f.kind == "strings":
                start, n = self.vector(at, 4, what)
                for i in range(n):
                    self.string(start + 4 * i, f"{what}[{i}]")
            elif f.kind == "table":
                self.table(self.deref(at, what), f.table, depth + 1)
            elif f.kind == "tables":
                start, n = self.vector(at, 4, what)
                for i in range(n):
                    self.table(self.deref(start + 4 * i, f"{what}[{i}]"), f.table, depth + 1)
        for f in table_fields(cls):
            if f.kind != "union" or f.name not in found:
                continue
            type_at = found.get(f.name + "Type")
            kind = self.buf[type_at] if type_at is not None else 0
            if kind == 0:
                continue
            member = _union_members(f.union_enum).get(kind)
            if member is None:
                raise self.fail(f"{cls}.{f.name} has unknown type {kind}")
            self.table(self.deref(found[f.name], f"{cls}.{f.name}"), member, depth + 1)
        return found


def check_tflite(model: bytes | bytearray | memoryview) -> None:
    """Raise :class:`ModelError` unless ``model`` is a structurally sound TFLite flatbuffer.

    Checks what the FlatBuffers verifier checks (every offset, vtable, table, vector and string
    inside the file and aligned, strings zero-terminated, union types known, bounded depth), then
    the indices a runtime follows without checking: each tensor's buffer, each operator's opcode
    and tensors, each subgraph's inputs and outputs, non-negative shapes, constant data of the
    size its shape and type say, and external buffers inside the file.
    """
    import tflite

    data = bytes(model)
    if len(data) < 8:
        raise ModelError(f"not a valid TFLite model ({len(data)} bytes): shorter than a flatbuffer header")
    if data[4:8] != b"TFL3":
        raise ModelError("not a TFLite model (no TFL3 file identifier)")
    if len(data) > MAX_SIZE:
        raise ModelError(f"not a valid TFLite model: {len(data)} bytes is over the 2 GiB flatbuffer limit")
    v = _Verifier(data)
    quantized_types = (tflite.TensorType.INT8, tflite.TensorType.UINT8)
    v.table(v.deref(0, "the root table"), "Model", 0)

    m = tflite.Model.GetRootAs(data, 0)
    n_buffers, n_codes = m.BuffersLength(), m.OperatorCodesLength()
    for b in range(n_buffers):
        buf = m.Buffers(b)
        offset, size = buf.Offset(), buf.Size()
        # offset 1 is the converter's placeholder for "data follows later"; 0 means inline data.
        if offset > 1 and offset + size > len(data):
            raise v.fail(f"buffer {b} points at bytes {offset}..{offset + size}, past the end of the file")
    type_names = {val: k.lower() for k, val in vars(tflite.TensorType).items() if not k.startswith("_")}
    if m.SubgraphsLength() == 0:
        raise v.fail("no subgraphs")
    for s in range(m.SubgraphsLength()):
        sg = m.Subgraphs(s)
        n_tensors = sg.TensorsLength()
        for i in range(n_tensors):
            t = sg.Tensors(i)
            where = f"subgraph {s} tensor {i}"
            if t.Buffer() >= n_buffers:
                raise v.fail(f"{where} names buffer {t.Buffer()} of {n_buffers}")
            shape = t.ShapeAsNumpy() if t.ShapeLength() else np.zeros(0, np.int32)
            if (shape < 0).any():
                raise v.fail(f"{where} has a negative dimension in its shape {tuple(shape)}")
            q = t.Quantization()
            if q is not None and q.ScaleLength():
                if q.ZeroPointLength() not in (0, q.ScaleLength()):
                    raise v.fail(
                        f"{where} has {q.ScaleLength()} scales but {q.ZeroPointLength()} zero points"
                    )
                axis = q.QuantizedDimension()
                if q.ScaleLength() > 1 and not (0 <= axis < len(shape) and shape[axis] == q.ScaleLength()):
                    raise v.fail(
                        f"{where} has {q.ScaleLength()} per-channel scales along axis {axis} "
                        f"of shape {tuple(int(d) for d in shape)}"
                    )
            dtype = type_names.get(t.Type())
            buf = m.Buffers(t.Buffer())
            if buf.DataLength() and dtype in DTYPES and t.Sparsity() is None:
                want = int(np.prod(shape, dtype=np.int64)) * np.dtype(DTYPES[dtype]).itemsize
                if buf.DataLength() != want:
                    raise v.fail(
                        f"{where} ({dtype}{list(shape)}) needs {want} bytes of data, "
                        f"buffer {t.Buffer()} holds {buf.DataLength()}"
                    )
        for i in range(sg.OperatorsLength()):
            op = sg.Operators(i)
            where = f"subgraph {s} operator {i}"
            if op.OpcodeIndex() >= n_codes:
                raise v.fail(f"{where} names operator code {op.OpcodeIndex()} of {n_codes}")
            for part in ("Inputs", "Outputs", "Intermediates"):
                if getattr(op, part + "Length")():
                    idx = getattr(op, part + "AsNumpy")()
                    bad = idx[(idx < -1) | (idx >= n_tensors)]
                    if bad.size:
                        raise v.fail(f"{where} {part.lower()} name tensor {int(bad[0])} of {n_tensors}")
                    # TFLite's int8/uint8 kernels read every operand's scale unchecked (a CONV_2D whose
                    # output lost its quantization aborts tflite_runtime 2.14 in allocate_tensors).
                    for t_index in idx[idx >= 0]:
                        t = sg.Tensors(int(t_index))
                        q = t.Quantization()
                        if t.Type() in quantized_types and (q is None or q.ScaleLength() == 0):
                            raise v.fail(
                                f"{where} uses {type_names[t.Type()]} tensor {int(t_index)} "
                                "that has no quantization parameters"
                            )
        for part in ("Inputs", "Outputs"):
            if getattr(sg, part + "Length")():
                idx = getattr(sg, part + "AsNumpy")()
                bad = idx[(idx < 0) | (idx >= n_tensors)]
                if bad.size:
                    raise v.fail(f"subgraph {s} {part.lower()} name tensor {int(bad[0])} of {n_tensors}")

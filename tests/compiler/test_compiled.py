"""The compiled partition's file format: a file of another format or compiler version is refused with
its reason, and the compile cache recompiles over it instead of misreading it."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

import modelgen as g
from libaccel.compiler import (
    COMPILER_VERSION,
    CompileCache,
    CompiledPartition,
    Graph,
    compile_cached,
    compile_partition,
    graph_from_tflite,
)
from libaccel.compiler.compiled import WeightsFile

ISA = 1 << 16


def _compiled() -> tuple[Graph, CompiledPartition]:
    graph = graph_from_tflite(g.conv2d_model((1, 8, 8, 3), 4, 3, 1, "SAME", True, "RELU6", 1))
    return graph, compile_partition(graph, [0], ISA)


def _with_header(data: bytes, **changes: object) -> bytes:
    (n,) = struct.unpack_from("<Q", data, 8)
    header = json.loads(data[16 : 16 + n]) | changes
    raw = json.dumps(header).encode()
    return data[:8] + struct.pack("<Q", len(raw)) + raw + data[16 + n :]


def test_round_trip_through_bytes_and_file(tmp_path: Path) -> None:
    _, compiled = _compiled()
    data = compiled.to_bytes()
    assert data[:8] == b"VNPUCP01"
    back = CompiledPartition.from_bytes(data)
    assert back.to_bytes() == data
    assert (back.stream, back.relocations, back.inputs, back.outputs) == (
        compiled.stream,
        compiled.relocations,
        compiled.inputs,
        compiled.outputs,
    )
    path = tmp_path / "p.vnpucp"
    path.write_bytes(data)
    from_file = CompiledPartition.from_file(path)
    assert isinstance(from_file.weights, WeightsFile)
    assert from_file.weights.read() == bytes(compiled.weights) and from_file.to_bytes() == data
    from_file.weights.close()


def test_another_format_or_compiler_is_refused() -> None:
    _, compiled = _compiled()
    data = compiled.to_bytes()
    with pytest.raises(ValueError, match="bad magic"):
        CompiledPartition.from_bytes(b"VNPUCP00" + data[8:])
    with pytest.raises(ValueError, match=f"compiled by compiler 0.0.1, this is {COMPILER_VERSION}"):
        CompiledPartition.from_bytes(_with_header(data, compiler_version="0.0.1"))
    with pytest.raises(ValueError, match="not \\[byte offset, region\\]"):
        CompiledPartition.from_bytes(_with_header(data, relocations=[[1, 2, 3]]))


@pytest.mark.parametrize("weights_in_file", [False, True])
def test_the_cache_recompiles_over_a_file_it_cannot_read(tmp_path: Path, weights_in_file: bool) -> None:
    """A file under the partition's key from another format or compiler is a miss: compile_cached
    compiles again and replaces it, and the next lookup hits the new file."""
    graph, compiled = _compiled()
    cache = CompileCache(tmp_path)
    first, hit = compile_cached(graph, [0], ISA, cache, weights_in_file=weights_in_file)
    assert not hit
    (path,) = tmp_path.glob("*.vnpucp")
    good = path.read_bytes()
    assert good == compiled.to_bytes()
    for foreign in (b"VNPUCP00" + good[8:], _with_header(good, compiler_version="0.0.1")):
        path.write_bytes(foreign)
        again, hit = compile_cached(graph, [0], ISA, cache, weights_in_file=weights_in_file)
        assert not hit and again.to_bytes() == good and path.read_bytes() == good
        _, hit = compile_cached(graph, [0], ISA, cache, weights_in_file=weights_in_file)
        assert hit

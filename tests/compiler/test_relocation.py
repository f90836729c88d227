"""Relocations: what the emitter records, the cache file keeps and the runner applies, checked against
the ISA decoder (uapi.isa), not against the relocation module itself."""

from __future__ import annotations

from pathlib import Path

import pytest

import modelgen as g
from libaccel.compiler import CompiledPartition, compile_partition, graph_from_tflite
from libaccel.compiler.relocation import Moved, Region, Relocation, relocate
from uapi import isa

ISA = 1 << 16
BASES = {Region.WEIGHTS: 0x1_0000_0000, Region.ARENA: 0x2_0000_0000}


def _tensor(va: int) -> bytes:
    return isa.encode("TENSOR", slot=3, dtype=0, va=va, n=1, h=1, w=1, c=8, stride_c=1, stride_w=8)


def test_relocate_adds_the_regions_base_to_each_va() -> None:
    stream = isa.encode("FILL", dst=0, value=1) + _tensor(0x40) + _tensor(0x80) + isa.encode("END")
    first = len(isa.encode("FILL", dst=0, value=1))
    second = first + len(_tensor(0))
    relocs = [Relocation.tensor_va(first, Region.ARENA), Relocation.tensor_va(second, Region.WEIGHTS)]
    out = isa.decode(relocate(stream, relocs, BASES))
    assert [i.op for i in out] == ["FILL", "TENSOR", "TENSOR", "END"]
    assert out[1]["va"] == BASES[Region.ARENA] + 0x40
    assert out[2]["va"] == BASES[Region.WEIGHTS] + 0x80
    assert out[1].fields | {"va": 0x40} == isa.decode(stream)[1].fields  # nothing else changed


def test_json_round_trip_and_refusals() -> None:
    r = Relocation.tensor_va(64, Region.ARENA)
    assert r.to_json() == [64 + isa.SPEC.by_name("TENSOR").field("va").offset, 1]
    assert Relocation.from_json(r.to_json()) == r
    for bad, message in (
        ([8], "not \\[byte offset, region\\]"),
        ([8, 0, 0], "not \\[byte offset, region\\]"),
        (["8", 0], "not \\[byte offset, region\\]"),
        ([8.0, 0], "not \\[byte offset, region\\]"),
        ([-8, 0], "negative"),
        ([8, 2], "not a valid Region"),
    ):
        with pytest.raises(ValueError, match=message):
            Relocation.from_json(bad)


def test_relocate_refuses_what_is_not_a_va_field_in_the_stream() -> None:
    stream = _tensor(0) + isa.encode("END")
    at = Relocation.tensor_va(0, Region.ARENA).at
    for wrong in (at + 4, len(stream), 2):  # misaligned, past the end, before any instruction's va
        with pytest.raises(ValueError, match="not a TENSOR va field"):
            relocate(stream, [Relocation(wrong, Region.ARENA)], BASES)
    with pytest.raises(ValueError, match="exceeds 64 bits"):
        relocate(stream, [Relocation(at, Region.ARENA)], {Region.ARENA: 1 << 64})


def test_a_compiled_partition_relocates_every_tensor_and_nothing_else() -> None:
    """Each TENSOR the emitter wrote has exactly one relocation, of the region its offset is in;
    after a cache file round trip the relocated stream is the same."""
    model = g.conv2d_model((1, 8, 8, 3), 4, 3, 1, "SAME", True, "RELU6", 1)
    graph = graph_from_tflite(model)
    compiled = compile_partition(graph, [0], ISA)
    before = isa.decode(compiled.stream)
    tensors = {i.offset: i for i in before if i.op == "TENSOR"}
    va = isa.SPEC.by_name("TENSOR").field("va").offset
    assert sorted(r.at - va for r in compiled.relocations) == sorted(tensors)
    for r in compiled.relocations:
        limit = len(compiled.weights) if r.region == Region.WEIGHTS else compiled.arena_size
        assert tensors[r.at - va]["va"] < limit
    assert {r.region for r in compiled.relocations} == {Region.WEIGHTS, Region.ARENA}
    after = isa.decode(relocate(compiled.stream, compiled.relocations, BASES))
    by_at = {r.at - va: r.region for r in compiled.relocations}
    for old, new in zip(before, after, strict=True):
        want = old.fields["va"] + BASES[by_at[old.offset]] if old.op == "TENSOR" else None
        assert new.fields == (old.fields | {"va": want} if want is not None else old.fields)
    back = CompiledPartition.from_bytes(compiled.to_bytes())
    assert back.relocations == compiled.relocations
    assert all(type(r.region) is Region for r in back.relocations)
    assert relocate(back.stream, back.relocations, BASES) == relocate(
        compiled.stream, compiled.relocations, BASES
    )


def test_a_moved_span_takes_the_addresses_inside_it_and_only_those() -> None:
    """ARENA offsets inside the moved span go to its VA (keeping their offset within it); the
    offset just past it, and a WEIGHTS offset inside the same numbers, keep their region's base."""
    offsets = [(Region.ARENA, 0x40), (Region.ARENA, 0x7F), (Region.ARENA, 0x80), (Region.WEIGHTS, 0x40)]
    stream = b"".join(_tensor(o) for _, o in offsets) + isa.encode("END")
    size = len(_tensor(0))
    relocs = [Relocation.tensor_va(k * size, region) for k, (region, _) in enumerate(offsets)]
    moved = [Moved(Region.ARENA, 0x40, 0x40, 0x3_0000_0000)]
    got = [i["va"] for i in isa.decode(relocate(stream, relocs, BASES, moved)) if i.op == "TENSOR"]
    assert got == [0x3_0000_0000, 0x3_0000_003F, BASES[Region.ARENA] + 0x80, BASES[Region.WEIGHTS] + 0x40]


def test_exclusive_io_gives_inputs_and_outputs_bytes_that_can_move() -> None:
    """resnet_small's planner shares its input's and output's bytes with intermediates; compiled with
    ``exclusive_io`` it does not, and moving both rebases exactly the TENSORs inside their spans."""
    graph = graph_from_tflite(
        (Path(__file__).resolve().parents[1] / "corpus/models/resnet_small.tflite").read_bytes()
    )
    nodes = [n.index for n in graph.nodes]
    shared, own = (
        compile_partition(graph, nodes, ISA),
        compile_partition(graph, nodes, ISA, exclusive_io=True),
    )
    assert [b.exclusive for b in (*shared.inputs, *shared.outputs)] == [False, False]
    assert [b.exclusive for b in (*own.inputs, *own.outputs)] == [True, True]
    assert own.arena_size > shared.arena_size
    back = CompiledPartition.from_bytes(own.to_bytes())
    assert (back.inputs, back.outputs) == (own.inputs, own.outputs)
    spans = {b.index: b for b in (*own.inputs, *own.outputs)}
    new_va = {b.index: 0x5_0000_0000 + k * 0x1_0000_0000 for k, b in enumerate(spans.values())}
    moved = [Moved(Region.ARENA, b.offset, b.nbytes, new_va[t]) for t, b in spans.items()]
    before = isa.decode(own.stream)
    after = isa.decode(relocate(own.stream, own.relocations, BASES, moved))
    va = isa.SPEC.by_name("TENSOR").field("va").offset
    by_at = {r.at - va: r.region for r in own.relocations}
    hits = dict.fromkeys(spans, 0)
    for old, new in zip(before, after, strict=True):
        if old.op != "TENSOR":
            continue
        offset, region = old["va"], by_at[old.offset]
        inside = [
            t for t, b in spans.items() if region == Region.ARENA and b.offset <= offset < b.offset + b.nbytes
        ]
        if inside:
            hits[inside[0]] += 1
            assert new["va"] == new_va[inside[0]] + offset - spans[inside[0]].offset
        else:
            assert new["va"] == BASES[region] + offset
    assert all(hits.values()), hits  # the input is read and the output written through moved TENSORs

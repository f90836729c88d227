"""RESIZE_BILINEAR of int8 tensors: one RESIZE_BILINEAR instruction.

For int8 TFLite's resolvers (reference and optimized alike) run ``reference_ops::ResizeBilinearInteger``:
fixed-point coordinates in 1/1024 units and four integer weights, which the instruction computes from
the shapes and the two flags (docs/isa.md). uint8 runs ``reference_ops::ResizeBilinear<uint8_t>`` in
float32 with a truncating cast, which the NPU (no float arithmetic) does not reproduce: uint8 stays on
the CPU.
"""

from __future__ import annotations

from libaccel.compiler.emitter import Emitter
from libaccel.compiler.graph import Graph, OpNode
from libaccel.compiler.ops import PLANNERS, OpPlan, Unsupported, resize_operands


def plan_resize_bilinear(graph: Graph, node: OpNode) -> OpPlan:
    x, y, ac, hp = resize_operands(graph, node)
    if x.dtype != "int8":
        raise Unsupported("uint8 RESIZE_BILINEAR: TFLite's reference kernel interpolates in float32")
    if ac and hp:
        raise Unsupported("align_corners with half_pixel_centers (TFLite rejects it)")
    # The stored values are interpolated as they are: no requantization, whatever the quantizations.
    flags = (("ALIGN_CORNERS",) if ac else ()) + (("HALF_PIXEL_CENTERS",) if hp else ())

    def emit(em: Emitter) -> None:
        em.op("RESIZE_BILINEAR", flags=flags, input=em.tensor(x.index), output=em.tensor(y.index))

    return OpPlan(emit)


PLANNERS["RESIZE_BILINEAR"] = plan_resize_bilinear

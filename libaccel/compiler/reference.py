"""Which runtime's reference kernels the compiled code must equal, where the runtimes disagree.

The NPU is bit-exact with TFLite's reference kernels (``OpResolverType.BUILTIN_REF``), and the
runtimes the delegate loads into agree on every op the compiler lowers but one: LiteRT's reference
FULLY_CONNECTED requantizes with one rounding (a 64-bit product and one rounding shift), where
TFLite 2.14 (``tflite_runtime``) and every other kernel round twice (SaturatingRoundingDoublingHighMul,
then a rounding shift). Measured on random FC layers: LiteRT 2.3 equals the one-rounding formula on
all 98304 outputs and differs from the two-rounding one on 86; CONV_2D, DEPTHWISE_CONV_2D, ADD and
MUL agree between the runtimes on all 24576 outputs.

LiteRT's FULLY_CONNECTED also derives a per-tensor filter's multiplier as the per-channel loop
does (``double(s_in) * double(s_w) / double(s_out)``), where TFLite 2.14 takes
GetQuantizedConvolutionMultipler's float product of the two input scales
(:func:`libaccel.compiler.quant.convolution_scale`). Measured with accumulators chosen where the
derivations and roundings disagree: LiteRT's FC equals one rounding of the double product, and
TFLite 2.14's two roundings of the float product, for uint8 and per-tensor int8 filters; every
other convolution-like kernel agrees between the two runtimes.

The delegate names the runtime it was loaded into; :func:`annotate_reference` records the
choice in each FULLY_CONNECTED node's ``rounding`` option ("double", the default, or "single")
and ``per_tensor_scale_product`` option ("float", the default, or "double"), which the lowering
reads (the ISA's SINGLE_ROUNDING flag, the multiplier) and the compile cache's key covers.
"""

from __future__ import annotations

from libaccel.compiler.graph import Graph

#: Runtime distributions (runtime_abi names) whose reference FULLY_CONNECTED rounds once.
SINGLE_ROUNDING_FULLY_CONNECTED = frozenset({"ai-edge-litert"})
#: Those whose FULLY_CONNECTED multiplies a per-tensor filter's scale in double.
DOUBLE_PRODUCT_FULLY_CONNECTED = frozenset({"ai-edge-litert"})


def fully_connected_rounding(distribution: str) -> str:
    """ "single" or "double": how ``distribution``'s reference FULLY_CONNECTED requantizes."""
    return "single" if distribution in SINGLE_ROUNDING_FULLY_CONNECTED else "double"


def fully_connected_scale_product(distribution: str) -> str:
    """ "float" or "double": how ``distribution``'s FULLY_CONNECTED multiplies a per-tensor filter's
    scale by the input's (:func:`libaccel.compiler.quant.convolution_scale`)."""
    return "double" if distribution in DOUBLE_PRODUCT_FULLY_CONNECTED else "float"


def annotate_reference(graph: Graph, distribution: str) -> Graph:
    """Mark ``graph``'s FULLY_CONNECTED nodes with the requantization of ``distribution`` (in place)."""
    rounding = fully_connected_rounding(distribution)
    product = fully_connected_scale_product(distribution)
    for node in graph.nodes:
        if node.op == "FULLY_CONNECTED":
            node.options["rounding"] = rounding
            node.options["per_tensor_scale_product"] = product
    return graph

"""Write int8/uint8 TFLite models from Python descriptions (no TensorFlow needed).

The package has four parts, re-exported here:

* :mod:`modelgen.builder`: :class:`ModelBuilder` (tensors, buffers, operators,
  options by name, any graph) and the quantization helpers;
* :mod:`modelgen.ops`: one-op models (:func:`conv2d_model`,
  :func:`depthwise_conv2d_model`, :func:`fully_connected_model`,
  :func:`elementwise_model`, :func:`pool_model`, :func:`softmax_model`,
  :func:`batch_matmul_model`, ...) returning ``bytes``;
* :mod:`modelgen.networks`: :class:`NetworkBuilder` and whole networks
  (:func:`mobilenet_v1_model`, :func:`mobilenet_v2_model`, detectors);
* :mod:`modelgen.reference`: :func:`run_reference` runs a model on TFLite's
  reference kernels (``OpResolverType.BUILTIN_REF``), the spec the NPU is
  bit-exact with, and :func:`random_inputs` makes inputs for it.

Command line: ``python -m modelgen OUT_DIR`` writes a small set of sample
models (:data:`modelgen.cli.SAMPLES`).
"""

from modelgen.builder import (
    NP_TYPES,
    QMAX,
    QMIN,
    TENSOR_TYPES,
    ModelBuilder,
    Quant,
    accumulator_output_scale,
    activation_quant,
    quantized_bias,
    quantized_filter,
    random_scale,
    same_padding_out,
)
from modelgen.networks import (
    NetworkBuilder,
    fpn_detector_model,
    mobilenet_v1_model,
    mobilenet_v2_model,
    mobilenet_v3_like_model,
    ssd_like_model,
)
from modelgen.ops import (
    activation_model,
    arg_max_model,
    batch_matmul_model,
    concat_model,
    conv2d_model,
    converter_flatten,
    depthwise_conv2d_model,
    elementwise_model,
    flatten_fc_model,
    float_chain_model,
    fully_connected_model,
    layout_model,
    log_softmax_model,
    max_min_model,
    mean_model,
    neg_model,
    pad_model,
    pool_model,
    prelu_model,
    quantize_model,
    reshape_model,
    resize_model,
    rsqrt_model,
    softmax_model,
    space_to_batch_paddings,
    space_to_batch_tile_conv_model,
    squared_difference_model,
    strided_slice_model,
    transpose_conv_model,
    transpose_conv_output,
    transpose_model,
)
from modelgen.reference import random_inputs, reference_interpreter, run_reference

__all__ = [
    "prelu_model",
    "max_min_model",
    "batch_matmul_model",
    "arg_max_model",
    "NP_TYPES",
    "QMAX",
    "QMIN",
    "TENSOR_TYPES",
    "ModelBuilder",
    "NetworkBuilder",
    "Quant",
    "accumulator_output_scale",
    "activation_model",
    "activation_quant",
    "concat_model",
    "conv2d_model",
    "converter_flatten",
    "depthwise_conv2d_model",
    "elementwise_model",
    "flatten_fc_model",
    "float_chain_model",
    "fpn_detector_model",
    "fully_connected_model",
    "layout_model",
    "log_softmax_model",
    "mean_model",
    "neg_model",
    "mobilenet_v1_model",
    "mobilenet_v2_model",
    "mobilenet_v3_like_model",
    "pad_model",
    "pool_model",
    "quantize_model",
    "quantized_bias",
    "quantized_filter",
    "random_inputs",
    "random_scale",
    "reference_interpreter",
    "reshape_model",
    "resize_model",
    "rsqrt_model",
    "run_reference",
    "same_padding_out",
    "softmax_model",
    "space_to_batch_paddings",
    "space_to_batch_tile_conv_model",
    "squared_difference_model",
    "ssd_like_model",
    "strided_slice_model",
    "transpose_conv_model",
    "transpose_conv_output",
    "transpose_model",
]

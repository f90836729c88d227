"""libaccel.compiler: lowers int8/uint8 TFLite graphs to vnpu command streams.

Entry points (the contract with the TFLite delegate, delegate_teflon):

* :mod:`libaccel.compiler.graph`: the graph IR (:class:`Graph`, :class:`OpNode`,
  :class:`TensorInfo`, :class:`QuantParams`) and :func:`graph_from_tflite`;
* :func:`check_support(graph, node) -> Support`: whether one node runs exactly
  on the NPU, with the reason when it does not; :func:`place(graph, rules)`: the
  whole graph's placement (:mod:`libaccel.compiler.partition`, the one partitioner);
* :func:`compile_partition(graph, node_indices, isa_version) -> CompiledPartition`:
  one job for a set of supported nodes (raises :class:`CompileError`);
  :func:`compile_cached` does the same through the on-disk :class:`CompileCache`;
* :class:`PartitionRunner(device, compiled)`: uploads the weights once;
  ``run({tensor_index: array}) -> {tensor_index: array}`` submits one job.

docs/compiler.md lists the supported ops and their exact conditions.
"""

from libaccel.compiler.cache import CompileCache, compile_cached
from libaccel.compiler.compiled import COMPILER_VERSION, CompiledPartition, IoBinding
from libaccel.compiler.graph import Graph, OpNode, QuantParams, TensorInfo, graph_from_tflite
from libaccel.compiler.lower import CompileError, compile_partition
from libaccel.compiler.partition import Placement, PlannerError, Rules, check_support, place
from libaccel.compiler.plan_common import Support
from libaccel.compiler.runner import PartitionRunner
from libaccel.compiler.tflite_check import ModelError, check_tflite

__all__ = [
    "COMPILER_VERSION",
    "CompileCache",
    "CompileError",
    "CompiledPartition",
    "Graph",
    "IoBinding",
    "ModelError",
    "OpNode",
    "PartitionRunner",
    "Placement",
    "PlannerError",
    "QuantParams",
    "Rules",
    "Support",
    "TensorInfo",
    "check_support",
    "check_tflite",
    "compile_cached",
    "compile_partition",
    "graph_from_tflite",
    "place",
]

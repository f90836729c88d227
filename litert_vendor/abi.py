"""The C surface of the LiteRT vendor libraries: where their C is, the cffi declarations, the
constants the C is compiled with.

``include/vnpu_litert.h`` is the project's mirror of LiteRT's vendor C API (its comment says which
LiteRT it was read from); cffi reads it as it is (:data:`LITERT_CDEF`), the C sources include it.
The libraries' own C is in ``c/``: ``vnpu_vendor.h`` (what both share; its interface block is also
cdef), ``vendor_start.c`` (Python's start), ``compiler_plugin.c`` and ``dispatch.c`` (each library's
exported entry points). The pure accessors answer in C, the rest start (or join) Python and call the
``extern "Python"`` callbacks that :mod:`litert_vendor.compiler_plugin` and :mod:`litert_vendor.dispatch`
implement.
"""

from __future__ import annotations

import json
from pathlib import Path

from vnpu_common.cbuild import interface

INCLUDE_DIR = Path(__file__).resolve().parent / "include"
HEADER = INCLUDE_DIR / "vnpu_litert.h"
C_DIR = Path(__file__).resolve().with_name("c")
VENDOR_HEADER = C_DIR / "vnpu_vendor.h"
# Python's start, then each library's own C file (litert_vendor.build compiles them as one unit).
START_SOURCE = C_DIR / "vendor_start.c"
PLUGIN_SOURCE = C_DIR / "compiler_plugin.c"
DISPATCH_SOURCE = C_DIR / "dispatch.c"

SOC_MANUFACTURER = "Vnpu"
SOC_MODEL = "vnpu"
# LITERT_API_VERSION of the LiteRT the header was read from; LiteRT refuses a plugin of another.
API_VERSION = (0, 1, 0)
# The function tables' ABI (LiteRtAbiHeader.major_version) and the sizes this code reads up to.
ABI_MAJOR = 1
COMPILER_CONTEXT_SIZE = 1048
RUNTIME_CONTEXT_SIZE = 400


def _cdef_of(header: str) -> str:
    """The header without its preprocessor lines: what cffi's cdef parses."""
    return "\n".join(line for line in header.splitlines() if not line.lstrip().startswith("#"))


LITERT_CDEF = _cdef_of(HEADER.read_text())

# The compiled result a Compile returns (vnpu_vendor.h's interface block).
RESULT_TYPES = interface(VENDOR_HEADER.read_text())

PLUGIN_CALLBACKS = r"""
extern "Python" int vnpu_plugin_create(const LiteRtCompilerContext *context);
extern "Python" void vnpu_plugin_destroy(int handle);
extern "Python" LiteRtStatus vnpu_plugin_partition(int handle, const char *soc_model,
                                                   LiteRtSubgraph subgraph, LiteRtOpList selected_ops);
extern "Python" LiteRtStatus vnpu_plugin_compile(int handle, const char *soc_model, LiteRtModel partitions,
                                                 vnpu_compiled_result **result);
extern "Python" void vnpu_plugin_destroy_result(vnpu_compiled_result *result);
"""

DISPATCH_CALLBACKS = r"""
extern "Python" LiteRtStatus vnpu_dispatch_initialize(const LiteRtRuntimeContext *runtime_context,
                                                      LiteRtEnvironment environment, LiteRtOptions options);
extern "Python" LiteRtStatus vnpu_dispatch_device_context_create(const LiteRtRuntimeContext *runtime_context,
                                                                 LiteRtOptions options,
                                                                 LiteRtDispatchDeviceContext *device_context);
extern "Python" LiteRtStatus vnpu_dispatch_device_context_destroy(LiteRtDispatchDeviceContext device_context);
extern "Python" LiteRtStatus vnpu_dispatch_get_input_requirements(
    LiteRtDispatchInvocationContext invocation_context, int input_index,
    const LiteRtRankedTensorType *tensor_type, LiteRtTensorBufferRequirements *tensor_buffer_requirements);
extern "Python" LiteRtStatus vnpu_dispatch_get_output_requirements(
    LiteRtDispatchInvocationContext invocation_context, int output_index,
    const LiteRtRankedTensorType *tensor_type, LiteRtTensorBufferRequirements *tensor_buffer_requirements);
extern "Python" LiteRtStatus vnpu_dispatch_register_tensor_buffer(
    LiteRtDispatchDeviceContext device_context, LiteRtTensorBuffer tensor_buffer,
    LiteRtTensorBufferHandle *tensor_buffer_handle);
extern "Python" LiteRtStatus vnpu_dispatch_unregister_tensor_buffer(
    LiteRtDispatchDeviceContext device_context, LiteRtTensorBufferHandle handle);
extern "Python" LiteRtStatus vnpu_dispatch_invocation_context_create(
    const LiteRtRuntimeContext *runtime_context, LiteRtDispatchDeviceContext device_context,
    LiteRtDispatchExecutableType exec_type, const LiteRtMemBuffer *exec_bytecode_buffer,
    const char *function_name, int num_inputs, int num_outputs,
    LiteRtDispatchInvocationContext *invocation_context);
extern "Python" LiteRtStatus vnpu_dispatch_invocation_context_destroy(
    LiteRtDispatchInvocationContext invocation_context);
extern "Python" LiteRtStatus vnpu_dispatch_attach_input(LiteRtDispatchInvocationContext invocation_context,
                                                        int graph_input_index,
                                                        LiteRtTensorBufferHandle tensor_buffer_handle);
extern "Python" LiteRtStatus vnpu_dispatch_attach_output(LiteRtDispatchInvocationContext invocation_context,
                                                         int graph_output_index,
                                                         LiteRtTensorBufferHandle tensor_buffer_handle);
extern "Python" LiteRtStatus vnpu_dispatch_detach_input(LiteRtDispatchInvocationContext invocation_context,
                                                        int graph_input_index,
                                                        LiteRtTensorBufferHandle tensor_buffer_handle);
extern "Python" LiteRtStatus vnpu_dispatch_detach_output(LiteRtDispatchInvocationContext invocation_context,
                                                         int graph_output_index,
                                                         LiteRtTensorBufferHandle tensor_buffer_handle);
extern "Python" LiteRtStatus vnpu_dispatch_invoke(LiteRtDispatchInvocationContext invocation_context);
"""


def macros(library: str, sdk_version: str) -> list[tuple[str, str]]:
    """The constants vnpu_vendor.h requires, from this module (``library`` names the library in
    messages)."""
    major, minor, patch = API_VERSION
    return [
        ("VNPU_API_MAJOR", str(major)),
        ("VNPU_API_MINOR", str(minor)),
        ("VNPU_API_PATCH", str(patch)),
        ("VNPU_ABI_MAJOR", str(ABI_MAJOR)),
        ("VNPU_COMPILER_CONTEXT_SIZE", str(COMPILER_CONTEXT_SIZE)),
        ("VNPU_SOC_MANUFACTURER", json.dumps(SOC_MANUFACTURER)),
        ("VNPU_SOC_MODEL", json.dumps(SOC_MODEL)),
        ("VNPU_SDK_VERSION", json.dumps(sdk_version)),
        ("VNPU_LIBRARY", json.dumps(library)),
    ]

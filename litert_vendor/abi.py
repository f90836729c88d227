"""The C surface of the LiteRT vendor libraries: the cffi declarations and the C each library adds.

``include/vnpu_litert.h`` is the project's mirror of LiteRT's vendor C API (its comment says which
LiteRT it was read from); cffi reads it as it is (:data:`LITERT_CDEF`), the C sources include it.
Each library's exported entry points are C: the pure accessors answer in C, the rest start (or join)
Python and call the ``extern "Python"`` callbacks that :mod:`litert_vendor.compiler_plugin` and
:mod:`litert_vendor.dispatch` implement.
"""

from __future__ import annotations

from pathlib import Path

INCLUDE_DIR = Path(__file__).resolve().parent / "include"
HEADER = INCLUDE_DIR / "vnpu_litert.h"

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

# The compiled result a Compile returns: Python fills it and keeps it alive until LiteRT destroys it.
RESULT_TYPES = r"""
typedef struct vnpu_compiled_result {
    size_t num_byte_code;
    const void *const *byte_code;
    const size_t *byte_code_size;
    size_t num_calls;
    const char *const *call_info;          /* a partition's function name, NUL-terminated */
    const size_t *call_info_size;          /* without the NUL */
    const size_t *call_byte_code;          /* which byte code module a call runs */
} vnpu_compiled_result;
"""

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

# Both libraries: start Python (vnpu_start_python, from delegate_teflon.build) once, then cffi's.
_START = r"""
static int vnpu_ensure_python(void)
{
    pthread_mutex_lock(&vnpu_start_lock);
    if (vnpu_started == 0) {
        vnpu_started = vnpu_start_python() == 0 ? 1 : -1;
        if (vnpu_started == 1 && cffi_start_python() != 0) {
            snprintf(vnpu_start_error, sizeof vnpu_start_error,
                     "%s: its Python code did not load (Python home %s; the traceback is on stderr)",
                     VNPU_LIBRARY, VNPU_PYTHON_HOME);
            vnpu_started = -1;
        }
    }
    pthread_mutex_unlock(&vnpu_start_lock);
    if (vnpu_started < 0) {
        fprintf(stderr, "%s\n", vnpu_start_error);
        return -1;
    }
    return 0;
}
"""

PLUGIN_SOURCE = r"""
/* The plugin handle LiteRT holds: the Python plugin's number. */
struct LiteRtCompilerPluginT {
    int handle;
};

LiteRtStatus LiteRtGetCompilerPluginVersion(LiteRtApiVersion *api_version)
{
    if (!api_version)
        return kLiteRtStatusErrorInvalidArgument;
    api_version->major = VNPU_API_MAJOR;
    api_version->minor = VNPU_API_MINOR;
    api_version->patch = VNPU_API_PATCH;
    return kLiteRtStatusOk;
}

const char *LiteRtGetCompilerPluginSocManufacturer(void)
{
    return VNPU_SOC_MANUFACTURER;
}

LiteRtStatus LiteRtCreateCompilerPlugin(const LiteRtCompilerContext *context, LiteRtCompilerPlugin *plugin,
                                        LiteRtEnvironmentOptions env, LiteRtOptions options)
{
    struct LiteRtCompilerPluginT *p;
    int handle;

    (void)env;
    (void)options;
    if (!plugin)
        return kLiteRtStatusErrorInvalidArgument;
    /* Every model accessor the plugin calls is in this table: refuse one laid out otherwise. */
    if (!context || context->abi_header.major_version != VNPU_ABI_MAJOR ||
        context->abi_header.struct_size < VNPU_COMPILER_CONTEXT_SIZE) {
        fprintf(stderr, "%s: LiteRT's compiler context is ABI %d.%d, %d bytes; this plugin needs ABI %d.x, "
                "at least %d bytes (LiteRT 2.3)\n", VNPU_LIBRARY,
                context ? context->abi_header.major_version : -1,
                context ? context->abi_header.minor_version : -1,
                context ? context->abi_header.struct_size : 0, VNPU_ABI_MAJOR, VNPU_COMPILER_CONTEXT_SIZE);
        return kLiteRtStatusErrorUnsupportedRuntimeVersion;
    }
    if (vnpu_ensure_python() != 0)
        return kLiteRtStatusErrorRuntimeFailure;
    handle = vnpu_plugin_create(context);
    if (handle < 0)
        return kLiteRtStatusErrorRuntimeFailure;
    p = malloc(sizeof *p);
    if (!p) {
        vnpu_plugin_destroy(handle);
        return kLiteRtStatusErrorMemoryAllocationFailure;
    }
    p->handle = handle;
    *plugin = p;
    return kLiteRtStatusOk;
}

void LiteRtDestroyCompilerPlugin(LiteRtCompilerPlugin plugin)
{
    if (!plugin)
        return;
    vnpu_plugin_destroy(plugin->handle);
    free(plugin);
}

LiteRtStatus LiteRtGetCompilerPluginSupportedHardware(LiteRtCompilerPlugin plugin,
                                                      LiteRtHwAccelerators *supported_hardware)
{
    if (!plugin || !supported_hardware)
        return kLiteRtStatusErrorInvalidArgument;
    *supported_hardware = kLiteRtHwAcceleratorNpu;
    return kLiteRtStatusOk;
}

LiteRtStatus LiteRtGetNumCompilerPluginSupportedSocModels(LiteRtCompilerPlugin plugin,
                                                          LiteRtParamIndex *num_supported_soc_models)
{
    if (!plugin || !num_supported_soc_models)
        return kLiteRtStatusErrorInvalidArgument;
    *num_supported_soc_models = 1;
    return kLiteRtStatusOk;
}

LiteRtStatus LiteRtGetCompilerPluginSupportedSocModel(LiteRtCompilerPlugin plugin,
    LiteRtParamIndex soc_model_idx,
                                                      const char **soc_model_name)
{
    if (!plugin || !soc_model_name)
        return kLiteRtStatusErrorInvalidArgument;
    if (soc_model_idx != 0)
        return kLiteRtStatusErrorIndexOOB;
    *soc_model_name = VNPU_SOC_MODEL;
    return kLiteRtStatusOk;
}

LiteRtStatus LiteRtGetCompilerPluginSDKVersion(LiteRtCompilerPlugin plugin, const char **sdk_version)
{
    if (!plugin || !sdk_version)
        return kLiteRtStatusErrorInvalidArgument;
    *sdk_version = VNPU_SDK_VERSION;
    return kLiteRtStatusOk;
}

LiteRtStatus LiteRtCompilerPluginPartition(LiteRtCompilerPlugin plugin, const char *soc_model,
                                           LiteRtSubgraph subgraph, LiteRtOpList selected_ops)
{
    if (!plugin || !subgraph || !selected_ops)
        return kLiteRtStatusErrorInvalidArgument;
    return vnpu_plugin_partition(plugin->handle, soc_model, subgraph, selected_ops);
}

LiteRtStatus LiteRtCompilerPluginCompile(LiteRtCompilerPlugin plugin, const char *soc_model,
                                         LiteRtModel partitions, LiteRtCompiledResult *compiled_result)
{
    vnpu_compiled_result *result = NULL;
    LiteRtStatus status;

    if (!plugin || !partitions || !compiled_result)
        return kLiteRtStatusErrorInvalidArgument;
    status = vnpu_plugin_compile(plugin->handle, soc_model, partitions, &result);
    if (status == kLiteRtStatusOk)
        *compiled_result = (LiteRtCompiledResult)result;
    return status;
}

void LiteRtDestroyCompiledResult(LiteRtCompiledResult result)
{
    if (result)
        vnpu_plugin_destroy_result((vnpu_compiled_result *)result);
}

LiteRtStatus LiteRtCompiledResultNumByteCodeModules(LiteRtCompiledResult compiled_result,
                                                    LiteRtParamIndex *num_byte_code)
{
    const vnpu_compiled_result *r = (const vnpu_compiled_result *)compiled_result;

    if (!r || !num_byte_code)
        return kLiteRtStatusErrorInvalidArgument;
    *num_byte_code = r->num_byte_code;
    return kLiteRtStatusOk;
}

LiteRtStatus LiteRtGetCompiledResultByteCode(LiteRtCompiledResult compiled_result,
    LiteRtParamIndex byte_code_idx,
                                             const void **byte_code, size_t *byte_code_size)
{
    const vnpu_compiled_result *r = (const vnpu_compiled_result *)compiled_result;

    if (!r || !byte_code || !byte_code_size)
        return kLiteRtStatusErrorInvalidArgument;
    if (byte_code_idx >= r->num_byte_code)
        return kLiteRtStatusErrorIndexOOB;
    *byte_code = r->byte_code[byte_code_idx];
    *byte_code_size = r->byte_code_size[byte_code_idx];
    return kLiteRtStatusOk;
}

LiteRtStatus LiteRtGetNumCompiledResultCalls(LiteRtCompiledResult compiled_result,
    LiteRtParamIndex *num_calls)
{
    const vnpu_compiled_result *r = (const vnpu_compiled_result *)compiled_result;

    if (!r || !num_calls)
        return kLiteRtStatusErrorInvalidArgument;
    *num_calls = r->num_calls;
    return kLiteRtStatusOk;
}

LiteRtStatus LiteRtGetCompiledResultCallInfo(LiteRtCompiledResult compiled_result, LiteRtParamIndex call_idx,
                                             const void **call_info, size_t *call_info_size,
                                             LiteRtParamIndex *byte_code_idx)
{
    const vnpu_compiled_result *r = (const vnpu_compiled_result *)compiled_result;

    if (!r || !call_info || !call_info_size || !byte_code_idx)
        return kLiteRtStatusErrorInvalidArgument;
    if (call_idx >= r->num_calls)
        return kLiteRtStatusErrorIndexOOB;
    *call_info = r->call_info[call_idx];
    *call_info_size = r->call_info_size[call_idx];
    *byte_code_idx = r->call_byte_code[call_idx];
    return kLiteRtStatusOk;
}

/* JIT executables handed over in memory: vnpu always hands bytecode. */
LiteRtStatus LiteRtGetCompiledResultHandle(LiteRtCompiledResult compiled_result, LiteRtParamIndex call_idx,
                                           void **handle)
{
    (void)compiled_result;
    (void)call_idx;
    (void)handle;
    return kLiteRtStatusErrorUnsupported;
}

LiteRtStatus LiteRtCompilerPluginRegisterAllTransformations(LiteRtCompilerPlugin plugin,
    void **transformations,
                                                            LiteRtParamIndex *num_patterns)
{
    if (!plugin || !transformations || !num_patterns)
        return kLiteRtStatusErrorInvalidArgument;
    *transformations = NULL;
    *num_patterns = 0;
    return kLiteRtStatusOk;
}

LiteRtStatus LiteRtCompilerPluginCheckCompilerCompatibility(LiteRtApiVersion api_version,
    LiteRtCompilerPlugin plugin,
                                                            LiteRtEnvironmentOptions env,
                                                                LiteRtOptions options,
                                                            const char *soc_model_name)
{
    (void)env;
    (void)options;
    if (!plugin)
        return kLiteRtStatusErrorInvalidArgument;
    if (api_version.major != VNPU_API_MAJOR || api_version.minor != VNPU_API_MINOR)
        return kLiteRtStatusErrorUnsupportedRuntimeVersion;
    if (soc_model_name && *soc_model_name && strcmp(soc_model_name, VNPU_SOC_MODEL) != 0)
        return kLiteRtStatusErrorUnsupportedCompilerVersion;
    return kLiteRtStatusOk;
}
"""

DISPATCH_SOURCE = r"""
static LiteRtStatus vnpu_get_vendor_id(const char **vendor_id)
{
    if (!vendor_id)
        return kLiteRtStatusErrorInvalidArgument;
    *vendor_id = VNPU_SOC_MANUFACTURER;
    return kLiteRtStatusOk;
}

static LiteRtStatus vnpu_get_build_id(const char **build_id)
{
    if (!build_id)
        return kLiteRtStatusErrorInvalidArgument;
    *build_id = VNPU_SDK_VERSION;
    return kLiteRtStatusOk;
}

static LiteRtStatus vnpu_get_capabilities(int *capabilities)
{
    if (!capabilities)
        return kLiteRtStatusErrorInvalidArgument;
    *capabilities = kLiteRtDispatchCapabilitiesBasic;
    return kLiteRtStatusOk;
}

static LiteRtStatus vnpu_check_runtime_compatibility(LiteRtApiVersion api_version,
    LiteRtEnvironmentOptions env,
                                                     LiteRtOptions options)
{
    (void)env;
    (void)options;
    if (api_version.major != VNPU_API_MAJOR || api_version.minor != VNPU_API_MINOR) {
        fprintf(stderr, "%s: LiteRT runtime API %d.%d.%d; this library implements %d.%d.%d (LiteRT 2.3)\n",
                VNPU_LIBRARY, api_version.major, api_version.minor, api_version.patch,
                VNPU_API_MAJOR, VNPU_API_MINOR, VNPU_API_PATCH);
        return kLiteRtStatusErrorUnsupportedRuntimeVersion;
    }
    return kLiteRtStatusOk;
}

static LiteRtStatus vnpu_set_options(LiteRtDispatchInvocationContext invocation_context,
    LiteRtOptions options)
{
    (void)options;
    return invocation_context ? kLiteRtStatusOk : kLiteRtStatusErrorInvalidArgument;
}

static LiteRtDispatchInterface vnpu_interface = {
    .initialize = vnpu_dispatch_initialize,
    .get_vendor_id = vnpu_get_vendor_id,
    .get_build_id = vnpu_get_build_id,
    .get_capabilities = vnpu_get_capabilities,
    .device_context_create = vnpu_dispatch_device_context_create,
    .device_context_destroy = vnpu_dispatch_device_context_destroy,
    .get_input_requirements = vnpu_dispatch_get_input_requirements,
    .get_output_requirements = vnpu_dispatch_get_output_requirements,
    .register_tensor_buffer = vnpu_dispatch_register_tensor_buffer,
    .unregister_tensor_buffer = vnpu_dispatch_unregister_tensor_buffer,
    .invocation_context_create = vnpu_dispatch_invocation_context_create,
    .invocation_context_destroy = vnpu_dispatch_invocation_context_destroy,
    .attach_input = vnpu_dispatch_attach_input,
    .attach_output = vnpu_dispatch_attach_output,
    .detach_input = vnpu_dispatch_detach_input,
    .detach_output = vnpu_dispatch_detach_output,
    .invoke = vnpu_dispatch_invoke,
    .check_runtime_compatibility = vnpu_check_runtime_compatibility,
    .invocation_context_set_options = vnpu_set_options,
};

LiteRtStatus LiteRtDispatchGetApi(LiteRtDispatchApi *api)
{
    if (!api)
        return kLiteRtStatusErrorInvalidArgument;
    /* The table's entries call into Python: start it before LiteRT calls any of them. */
    if (vnpu_ensure_python() != 0)
        return kLiteRtStatusErrorRuntimeFailure;
    memset(api, 0, sizeof *api);
    api->abi_header.struct_size = sizeof *api;
    api->abi_header.major_version = VNPU_ABI_MAJOR;
    api->version.major = VNPU_API_MAJOR;
    api->version.minor = VNPU_API_MINOR;
    api->version.patch = VNPU_API_PATCH;
    api->interface = &vnpu_interface;
    return kLiteRtStatusOk;
}
"""


def common_source(library: str, sdk_version: str) -> str:
    """The C both libraries start with (``library`` names it in messages): includes, the constants,
    Python's start."""
    from delegate_teflon.build import python_start_source

    major, minor, patch = API_VERSION
    return (
        f"""
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <string.h>
#include "vnpu_litert.h"
#define VNPU_API_MAJOR {major}
#define VNPU_API_MINOR {minor}
#define VNPU_API_PATCH {patch}
#define VNPU_ABI_MAJOR {ABI_MAJOR}
#define VNPU_COMPILER_CONTEXT_SIZE {COMPILER_CONTEXT_SIZE}
#define VNPU_SOC_MANUFACTURER "{SOC_MANUFACTURER}"
#define VNPU_SOC_MODEL "{SOC_MODEL}"
#define VNPU_SDK_VERSION "{sdk_version}"
#define VNPU_LIBRARY "{library}"
"""
        + python_start_source()  # its macros: build.py's set_source
        + _START
    )

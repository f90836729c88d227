// SPDX-License-Identifier: MIT
/*
 * libLiteRtCompilerPlugin_Vnpu.so's exported entry points (LiteRT's litert_compiler_plugin.h): the
 * pure accessors answer in C; creating the plugin, partitioning and compiling start (or join) Python
 * and call the extern "Python" callbacks litert_vendor.compiler_plugin implements. Compiled in one
 * unit with python_start.c, vendor_start.c and cffi's generated code (litert_vendor.build), which
 * defines the callbacks declared static below.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vnpu_vendor.h"

/* The build passes -Wno-unused-parameter for cffi's generated code around this file; here it is an error. */
#pragma GCC diagnostic push
#pragma GCC diagnostic error "-Wunused-parameter"

/* The callbacks written in Python (litert_vendor.compiler_plugin; cffi's extern "Python"). */
static int vnpu_plugin_create(const LiteRtCompilerContext *context);
static void vnpu_plugin_destroy(int handle);
static LiteRtStatus vnpu_plugin_partition(int handle, const char *soc_model,
                                          LiteRtSubgraph subgraph, LiteRtOpList selected_ops);
static LiteRtStatus vnpu_plugin_compile(int handle, const char *soc_model, LiteRtModel partitions,
                                        vnpu_compiled_result **result);
static void vnpu_plugin_destroy_result(vnpu_compiled_result *result);

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

LiteRtStatus LiteRtGetCompilerPluginSupportedSocModel(LiteRtCompilerPlugin plugin, LiteRtParamIndex soc_model_idx,
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

LiteRtStatus LiteRtGetCompiledResultByteCode(LiteRtCompiledResult compiled_result, LiteRtParamIndex byte_code_idx,
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

LiteRtStatus LiteRtGetNumCompiledResultCalls(LiteRtCompiledResult compiled_result, LiteRtParamIndex *num_calls)
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

LiteRtStatus LiteRtCompilerPluginRegisterAllTransformations(LiteRtCompilerPlugin plugin, void **transformations,
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
                                                            LiteRtEnvironmentOptions env, LiteRtOptions options,
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

#pragma GCC diagnostic pop

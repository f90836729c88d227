// SPDX-License-Identifier: MIT
/*
 * libLiteRtDispatch_Vnpu.so's C (LiteRT's litert_dispatch.h): LiteRtDispatchGetApi hands LiteRT the
 * function table; the vendor, build and capability accessors answer in C, every other entry is an
 * extern "Python" callback litert_vendor.dispatch implements. Compiled in one unit with
 * python_start.c, vendor_start.c and cffi's generated code (litert_vendor.build), which defines the
 * callbacks declared static below.
 */
#include <stdio.h>
#include <string.h>

#include "vnpu_vendor.h"

/* The build passes -Wno-unused-parameter for cffi's generated code around this file; here it is an error. */
#pragma GCC diagnostic push
#pragma GCC diagnostic error "-Wunused-parameter"

/* The callbacks written in Python (litert_vendor.dispatch; cffi's extern "Python"). */
static LiteRtStatus vnpu_dispatch_initialize(const LiteRtRuntimeContext *runtime_context,
                                             LiteRtEnvironment environment, LiteRtOptions options);
static LiteRtStatus vnpu_dispatch_device_context_create(const LiteRtRuntimeContext *runtime_context,
                                                        LiteRtOptions options,
                                                        LiteRtDispatchDeviceContext *device_context);
static LiteRtStatus vnpu_dispatch_device_context_destroy(LiteRtDispatchDeviceContext device_context);
static LiteRtStatus vnpu_dispatch_get_input_requirements(
    LiteRtDispatchInvocationContext invocation_context, int input_index,
    const LiteRtRankedTensorType *tensor_type, LiteRtTensorBufferRequirements *tensor_buffer_requirements);
static LiteRtStatus vnpu_dispatch_get_output_requirements(
    LiteRtDispatchInvocationContext invocation_context, int output_index,
    const LiteRtRankedTensorType *tensor_type, LiteRtTensorBufferRequirements *tensor_buffer_requirements);
static LiteRtStatus vnpu_dispatch_register_tensor_buffer(
    LiteRtDispatchDeviceContext device_context, LiteRtTensorBuffer tensor_buffer,
    LiteRtTensorBufferHandle *tensor_buffer_handle);
static LiteRtStatus vnpu_dispatch_unregister_tensor_buffer(
    LiteRtDispatchDeviceContext device_context, LiteRtTensorBufferHandle handle);
static LiteRtStatus vnpu_dispatch_invocation_context_create(
    const LiteRtRuntimeContext *runtime_context, LiteRtDispatchDeviceContext device_context,
    LiteRtDispatchExecutableType exec_type, const LiteRtMemBuffer *exec_bytecode_buffer,
    const char *function_name, int num_inputs, int num_outputs,
    LiteRtDispatchInvocationContext *invocation_context);
static LiteRtStatus vnpu_dispatch_invocation_context_destroy(
    LiteRtDispatchInvocationContext invocation_context);
static LiteRtStatus vnpu_dispatch_attach_input(LiteRtDispatchInvocationContext invocation_context,
                                               int graph_input_index,
                                               LiteRtTensorBufferHandle tensor_buffer_handle);
static LiteRtStatus vnpu_dispatch_attach_output(LiteRtDispatchInvocationContext invocation_context,
                                                int graph_output_index,
                                                LiteRtTensorBufferHandle tensor_buffer_handle);
static LiteRtStatus vnpu_dispatch_detach_input(LiteRtDispatchInvocationContext invocation_context,
                                               int graph_input_index,
                                               LiteRtTensorBufferHandle tensor_buffer_handle);
static LiteRtStatus vnpu_dispatch_detach_output(LiteRtDispatchInvocationContext invocation_context,
                                                int graph_output_index,
                                                LiteRtTensorBufferHandle tensor_buffer_handle);
static LiteRtStatus vnpu_dispatch_invoke(LiteRtDispatchInvocationContext invocation_context);

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

static LiteRtStatus vnpu_check_runtime_compatibility(LiteRtApiVersion api_version, LiteRtEnvironmentOptions env,
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

static LiteRtStatus vnpu_set_options(LiteRtDispatchInvocationContext invocation_context, LiteRtOptions options)
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

#pragma GCC diagnostic pop

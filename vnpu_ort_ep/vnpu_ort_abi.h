/* SPDX-License-Identifier: MIT */
/*
 * vnpu_ort_abi.h - the subset of onnxruntime's C ABI that libvnpu_ort_ep.so uses.
 *
 * Read from onnxruntime's include/onnxruntime/core/session/onnxruntime_c_api.h and
 * onnxruntime_ep_c_api.h of ORT_API_VERSION 24 (onnxruntime 1.24; the newest headers this project
 * could read; the wheel ships none), whose onnxruntime_c_api.cc closes API version 24 at slot 413
 * of OrtApi. Every function and struct member used here dates from API version 23 or earlier, so the
 * library asks for GetApi(VNPU_ORT_API_VERSION = 23) and declares version 23 in the structs it fills
 * (OrtEpFactory, OrtEp, OrtNodeComputeInfo, OrtNodeFusionOptions): onnxruntime reads no member of
 * them past that version. onnxruntime only ever appends to these tables and structs, so a later
 * runtime (1.32, API version 32, the one the project installs) keeps every slot below.
 *
 * OrtApi and OrtEpApi are function tables indexed by position: each unused entry before the last
 * one used keeps its slot as an opaque pointer, the slot numbers counted from the header (the
 * comment after each member; the _Static_asserts below check the arithmetic). Enumerations are the
 * header's, with the values this library uses; ONNXTensorElementDataType is onnx's TensorProto
 * data type numbering. Opaque handles are incomplete structs.
 *
 * The text between "cdef begin" and "cdef end" is also cffi's cdef (vnpu_ort_ep.build reads it):
 * plain declarations only there.
 */
#ifndef VNPU_ORT_ABI_H
#define VNPU_ORT_ABI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* cdef begin */
#define VNPU_ORT_API_VERSION 23

typedef enum OrtErrorCode {
    ORT_OK = 0,
    ORT_FAIL = 1,
    ORT_INVALID_ARGUMENT = 2,
    ORT_NOT_IMPLEMENTED = 9,
    ORT_INVALID_GRAPH = 10,
    ORT_EP_FAIL = 11
} OrtErrorCode;

typedef enum OrtLoggingLevel {
    ORT_LOGGING_LEVEL_VERBOSE = 0,
    ORT_LOGGING_LEVEL_INFO = 1,
    ORT_LOGGING_LEVEL_WARNING = 2,
    ORT_LOGGING_LEVEL_ERROR = 3,
    ORT_LOGGING_LEVEL_FATAL = 4
} OrtLoggingLevel;

typedef enum OrtOpAttrType {
    ORT_OP_ATTR_UNDEFINED = 0,
    ORT_OP_ATTR_INT = 1,
    ORT_OP_ATTR_INTS = 2,
    ORT_OP_ATTR_FLOAT = 3,
    ORT_OP_ATTR_FLOATS = 4,
    ORT_OP_ATTR_STRING = 5,
    ORT_OP_ATTR_STRINGS = 6,
    ORT_OP_ATTR_GRAPH = 7,
    ORT_OP_ATTR_TENSOR = 8
} OrtOpAttrType;

typedef enum OrtHardwareDeviceType {
    OrtHardwareDeviceType_CPU = 0,
    OrtHardwareDeviceType_GPU = 1,
    OrtHardwareDeviceType_NPU = 2
} OrtHardwareDeviceType;

typedef enum ONNXType {
    ONNX_TYPE_UNKNOWN = 0,
    ONNX_TYPE_TENSOR = 1
} ONNXType;

typedef enum OrtCompiledModelCompatibility {
    OrtCompiledModelCompatibility_EP_NOT_APPLICABLE = 0,
    OrtCompiledModelCompatibility_EP_SUPPORTED_OPTIMAL = 1,
    OrtCompiledModelCompatibility_EP_SUPPORTED_PREFER_RECOMPILATION = 2,
    OrtCompiledModelCompatibility_EP_UNSUPPORTED = 3
} OrtCompiledModelCompatibility;

typedef int ONNXTensorElementDataType;  /* enum ONNXTensorElementDataType: onnx.TensorProto's numbers */

typedef struct OrtStatus OrtStatus;
typedef struct OrtValue OrtValue;
typedef struct OrtTypeInfo OrtTypeInfo;
typedef struct OrtTensorTypeAndShapeInfo OrtTensorTypeAndShapeInfo;
typedef struct OrtSessionOptions OrtSessionOptions;
typedef struct OrtKernelContext OrtKernelContext;
typedef struct OrtLogger OrtLogger;
typedef struct OrtOpAttr OrtOpAttr;
typedef struct OrtKeyValuePairs OrtKeyValuePairs;
typedef struct OrtHardwareDevice OrtHardwareDevice;
typedef struct OrtEpDevice OrtEpDevice;
typedef struct OrtValueInfo OrtValueInfo;
typedef struct OrtNode OrtNode;
typedef struct OrtGraph OrtGraph;
typedef struct OrtEpGraphSupportInfo OrtEpGraphSupportInfo;
typedef struct OrtNodeComputeContext OrtNodeComputeContext;
typedef struct OrtMemoryInfo OrtMemoryInfo;
typedef struct OrtMemoryDevice OrtMemoryDevice;
typedef struct OrtAllocator OrtAllocator;
typedef struct OrtDataTransferImpl OrtDataTransferImpl;
typedef struct OrtSyncStreamImpl OrtSyncStreamImpl;
typedef struct OrtEpApi OrtEpApi;
typedef struct OrtModelEditorApi OrtModelEditorApi;
typedef struct OrtApi OrtApi;

/* OrtApiBase: never versioned, never grows. */
typedef struct OrtApiBase {
    const OrtApi *(*GetApi)(uint32_t version);
    const char *(*GetVersionString)(void);
} OrtApiBase;

/* OrtApi: slot numbers as in API version 24's table (all used slots are of version 23 or older). */
struct OrtApi {
    OrtStatus *(*CreateStatus)(OrtErrorCode code, const char *msg);  /* 0 */
    OrtErrorCode (*GetErrorCode)(const OrtStatus *status);  /* 1 */
    const char *(*GetErrorMessage)(const OrtStatus *status);  /* 2 */
    void *unused_3_50[48];
    OrtStatus *(*GetTensorMutableData)(OrtValue *value, void **out);  /* 51 */
    void *unused_52_54[3];
    OrtStatus *(*CastTypeInfoToTensorInfo)(const OrtTypeInfo *type_info, const OrtTensorTypeAndShapeInfo **out);  /* 55 */
    OrtStatus *(*GetOnnxTypeFromTypeInfo)(const OrtTypeInfo *type_info, ONNXType *out);  /* 56 */
    void *unused_57_59[3];
    OrtStatus *(*GetTensorElementType)(const OrtTensorTypeAndShapeInfo *info, ONNXTensorElementDataType *out);  /* 60 */
    OrtStatus *(*GetDimensionsCount)(const OrtTensorTypeAndShapeInfo *info, size_t *out);  /* 61 */
    OrtStatus *(*GetDimensions)(const OrtTensorTypeAndShapeInfo *info, int64_t *dim_values, size_t dim_values_length);  /* 62 */
    void *unused_63_64[2];
    OrtStatus *(*GetTensorTypeAndShape)(const OrtValue *value, OrtTensorTypeAndShapeInfo **out);  /* 65 */
    void *unused_66_87[22];
    OrtStatus *(*KernelContext_GetInputCount)(const OrtKernelContext *context, size_t *out);  /* 88 */
    OrtStatus *(*KernelContext_GetOutputCount)(const OrtKernelContext *context, size_t *out);  /* 89 */
    OrtStatus *(*KernelContext_GetInput)(const OrtKernelContext *context, size_t index, const OrtValue **out);  /* 90 */
    OrtStatus *(*KernelContext_GetOutput)(OrtKernelContext *context, size_t index, const int64_t *dim_values, size_t dim_count, OrtValue **out);  /* 91 */
    void *unused_92;
    void (*ReleaseStatus)(OrtStatus *input);  /* 93 */
    void *unused_94_95[2];
    void (*ReleaseValue)(OrtValue *input);  /* 96 */
    void *unused_97_98[2];
    void (*ReleaseTensorTypeAndShapeInfo)(OrtTensorTypeAndShapeInfo *input);  /* 99 */
    void *unused_100_210[111];
    OrtStatus *(*CreateOpAttr)(const char *name, const void *data, int len, OrtOpAttrType type, OrtOpAttr **op_attr);  /* 211 */
    void (*ReleaseOpAttr)(OrtOpAttr *input);  /* 212 */
    void *unused_213_236[24];
    OrtStatus *(*HasSessionConfigEntry)(const OrtSessionOptions *options, const char *config_key, int *out);  /* 237 */
    OrtStatus *(*GetSessionConfigEntry)(const OrtSessionOptions *options, const char *config_key, char *config_value, size_t *size);  /* 238 */
    void *unused_239_246[8];
    OrtStatus *(*Logger_LogMessage)(const OrtLogger *logger, OrtLoggingLevel log_severity_level, const char *message, const char *file_path, int line_number, const char *func_name);  /* 247 */
    void *unused_248_271[24];
    OrtStatus *(*ReadOpAttr)(const OrtOpAttr *op_attr, OrtOpAttrType type, void *data, size_t len, size_t *out);  /* 272 */
    void *unused_273_288[16];
    OrtStatus *(*GetValueInfoName)(const OrtValueInfo *value_info, const char **name);  /* 289 */
    OrtStatus *(*GetValueInfoTypeInfo)(const OrtValueInfo *value_info, const OrtTypeInfo **type_info);  /* 290 */
    const OrtModelEditorApi *(*GetModelEditorApi)(void);  /* 291 */
    void *unused_292_294[3];
    void (*CreateKeyValuePairs)(OrtKeyValuePairs **out);  /* 295 */
    void (*AddKeyValuePair)(OrtKeyValuePairs *kvps, const char *key, const char *value);  /* 296 */
    void *unused_297_299[3];
    void (*ReleaseKeyValuePairs)(OrtKeyValuePairs *input);  /* 300 */
    void *unused_301_306[6];
    OrtHardwareDeviceType (*HardwareDevice_Type)(const OrtHardwareDevice *device);  /* 307 */
    void *unused_308_316[9];
    const OrtEpApi *(*GetEpApi)(void);  /* 317 */
    OrtStatus *(*GetTensorSizeInBytes)(const OrtValue *ort_value, size_t *size);  /* 318 */
    void *unused_319_325[7];
    OrtStatus *(*ValueInfo_GetInitializerValue)(const OrtValueInfo *value_info, const OrtValue **initializer_value);  /* 326 */
    void *unused_327_330[4];
    OrtStatus *(*ValueInfo_IsConstantInitializer)(const OrtValueInfo *value_info, bool *is_constant_initializer);  /* 331 */
    void *unused_332_333[2];
    OrtStatus *(*Graph_GetModelPath)(const OrtGraph *graph, const char **model_path);  /* 334 (ORTCHAR_T is char on Linux) */
    OrtStatus *(*Graph_GetOnnxIRVersion)(const OrtGraph *graph, int64_t *onnx_ir_version);  /* 335 */
    OrtStatus *(*Graph_GetNumOperatorSets)(const OrtGraph *graph, size_t *num_operator_sets);  /* 336 */
    OrtStatus *(*Graph_GetOperatorSets)(const OrtGraph *graph, const char **domains, int64_t *opset_versions, size_t num_operator_sets);  /* 337 */
    OrtStatus *(*Graph_GetNumInputs)(const OrtGraph *graph, size_t *num_inputs);  /* 338 */
    OrtStatus *(*Graph_GetInputs)(const OrtGraph *graph, const OrtValueInfo **inputs, size_t num_inputs);  /* 339 */
    OrtStatus *(*Graph_GetNumOutputs)(const OrtGraph *graph, size_t *num_outputs);  /* 340 */
    OrtStatus *(*Graph_GetOutputs)(const OrtGraph *graph, const OrtValueInfo **outputs, size_t num_outputs);  /* 341 */
    OrtStatus *(*Graph_GetNumInitializers)(const OrtGraph *graph, size_t *num_initializers);  /* 342 */
    OrtStatus *(*Graph_GetInitializers)(const OrtGraph *graph, const OrtValueInfo **initializers, size_t num_initializers);  /* 343 */
    OrtStatus *(*Graph_GetNumNodes)(const OrtGraph *graph, size_t *num_nodes);  /* 344 */
    OrtStatus *(*Graph_GetNodes)(const OrtGraph *graph, const OrtNode **nodes, size_t num_nodes);  /* 345 */
    void *unused_346_348[3];
    OrtStatus *(*Node_GetName)(const OrtNode *node, const char **node_name);  /* 349 */
    OrtStatus *(*Node_GetOperatorType)(const OrtNode *node, const char **operator_type);  /* 350 */
    OrtStatus *(*Node_GetDomain)(const OrtNode *node, const char **domain_name);  /* 351 */
    void *unused_352;
    OrtStatus *(*Node_GetNumInputs)(const OrtNode *node, size_t *num_inputs);  /* 353 */
    OrtStatus *(*Node_GetInputs)(const OrtNode *node, const OrtValueInfo **inputs, size_t num_inputs);  /* 354 */
    OrtStatus *(*Node_GetNumOutputs)(const OrtNode *node, size_t *num_outputs);  /* 355 */
    OrtStatus *(*Node_GetOutputs)(const OrtNode *node, const OrtValueInfo **outputs, size_t num_outputs);  /* 356 */
    void *unused_357_358[2];
    OrtStatus *(*Node_GetNumAttributes)(const OrtNode *node, size_t *num_attributes);  /* 359 */
    OrtStatus *(*Node_GetAttributes)(const OrtNode *node, const OrtOpAttr **attributes, size_t num_attributes);  /* 360 */
    void *unused_361;
    OrtStatus *(*OpAttr_GetTensorAttributeAsOrtValue)(const OrtOpAttr *attribute, OrtValue **attr_tensor);  /* 362 */
    OrtStatus *(*OpAttr_GetType)(const OrtOpAttr *attribute, OrtOpAttrType *type);  /* 363 */
    OrtStatus *(*OpAttr_GetName)(const OrtOpAttr *attribute, const char **name);  /* 364 */
    void *unused_365_377[13];
    OrtStatus *(*GetTensorData)(const OrtValue *value, const void **out);  /* 378 */
};

/* OrtEpApi (onnxruntime_ep_c_api.h): the first five slots, all of version 23 or older. */
struct OrtEpApi {
    OrtStatus *(*CreateEpDevice)(void *ep_factory, const OrtHardwareDevice *hardware_device,
                                 const OrtKeyValuePairs *ep_metadata, const OrtKeyValuePairs *ep_options,
                                 OrtEpDevice **ep_device);  /* 0 */
    void (*ReleaseEpDevice)(OrtEpDevice *input);  /* 1 */
    OrtStatus *(*EpGraphSupportInfo_AddNodesToFuse)(OrtEpGraphSupportInfo *graph_support_info,
                                                    const OrtNode *const *nodes, size_t num_nodes,
                                                    const void *node_fusion_options);  /* 2 */
    void *EpGraphSupportInfo_AddSingleNode;  /* 3 */
    const char *(*NodeComputeContext_NodeName)(const OrtNodeComputeContext *context);  /* 4 */
};

/* OrtModelEditorApi (onnxruntime_c_api.h, a full build's): CreateNode makes the EPContext nodes. */
struct OrtModelEditorApi {
    void *unused_0_5[6];
    OrtStatus *(*CreateNode)(const char *operator_name, const char *domain_name, const char *node_name,
                             const char *const *input_names, size_t input_names_len,
                             const char *const *output_names, size_t output_names_len,
                             OrtOpAttr **attributes, size_t attribs_len, OrtNode **node);  /* 6 */
};

/* Structs the library fills: every member up to version 23, in the header's order. */
typedef struct OrtNodeFusionOptions {
    uint32_t ort_version_supported;
    bool drop_constant_initializers;
} OrtNodeFusionOptions;

typedef struct OrtNodeComputeInfo {
    uint32_t ort_version_supported;
    OrtStatus *(*CreateState)(struct OrtNodeComputeInfo *this_ptr, OrtNodeComputeContext *compute_context,
                              void **compute_state);
    OrtStatus *(*Compute)(struct OrtNodeComputeInfo *this_ptr, void *compute_state,
                          OrtKernelContext *kernel_context);
    void (*ReleaseState)(struct OrtNodeComputeInfo *this_ptr, void *compute_state);
} OrtNodeComputeInfo;

typedef struct OrtEp {
    uint32_t ort_version_supported;
    const char *(*GetName)(const struct OrtEp *this_ptr);
    OrtStatus *(*GetCapability)(struct OrtEp *this_ptr, const OrtGraph *graph,
                                OrtEpGraphSupportInfo *graph_support_info);
    OrtStatus *(*Compile)(struct OrtEp *this_ptr, const OrtGraph **graphs, const OrtNode **fused_nodes,
                          size_t count, OrtNodeComputeInfo **node_compute_infos, OrtNode **ep_context_nodes);
    void (*ReleaseNodeComputeInfos)(struct OrtEp *this_ptr, OrtNodeComputeInfo **node_compute_infos,
                                    size_t num_node_compute_infos);
    void *GetPreferredDataLayout;             /* optional: NCHW, onnxruntime's default */
    void *ShouldConvertDataLayoutForOp;
    void *SetDynamicOptions;
    void *OnRunStart;
    void *OnRunEnd;
    void *CreateAllocator;                    /* none: the EP computes on host memory */
    void *CreateSyncStreamForDevice;
    void *GetCompiledModelCompatibilityInfo;
} OrtEp;

typedef struct OrtEpFactory {
    uint32_t ort_version_supported;
    const char *(*GetName)(const struct OrtEpFactory *this_ptr);
    const char *(*GetVendor)(const struct OrtEpFactory *this_ptr);
    OrtStatus *(*GetSupportedDevices)(struct OrtEpFactory *this_ptr, const OrtHardwareDevice *const *devices,
                                      size_t num_devices, OrtEpDevice **ep_devices, size_t max_ep_devices,
                                      size_t *num_ep_devices);
    OrtStatus *(*CreateEp)(struct OrtEpFactory *this_ptr, const OrtHardwareDevice *const *devices,
                           const OrtKeyValuePairs *const *ep_metadata_pairs, size_t num_devices,
                           const OrtSessionOptions *session_options, const OrtLogger *logger, OrtEp **ep);
    void (*ReleaseEp)(struct OrtEpFactory *this_ptr, OrtEp *ep);
    uint32_t (*GetVendorId)(const struct OrtEpFactory *this_ptr);
    const char *(*GetVersion)(const struct OrtEpFactory *this_ptr);
    /* onnxruntime calls the members below without checking them for NULL. */
    OrtStatus *(*ValidateCompiledModelCompatibilityInfo)(struct OrtEpFactory *this_ptr,
                                                         const OrtHardwareDevice *const *devices,
                                                         size_t num_devices, const char *compatibility_info,
                                                         OrtCompiledModelCompatibility *model_compatibility);
    OrtStatus *(*CreateAllocator)(struct OrtEpFactory *this_ptr, const OrtMemoryInfo *memory_info,
                                  const OrtKeyValuePairs *allocator_options, OrtAllocator **allocator);
    void (*ReleaseAllocator)(struct OrtEpFactory *this_ptr, OrtAllocator *allocator);
    OrtStatus *(*CreateDataTransfer)(struct OrtEpFactory *this_ptr, OrtDataTransferImpl **data_transfer);
    bool (*IsStreamAware)(const struct OrtEpFactory *this_ptr);
    OrtStatus *(*CreateSyncStreamForDevice)(struct OrtEpFactory *this_ptr, const OrtMemoryDevice *memory_device,
                                            const OrtKeyValuePairs *stream_options,
                                            OrtSyncStreamImpl **stream);
} OrtEpFactory;
/* cdef end */

/* The library's exports: CreateEpApiFactoriesFn and ReleaseEpApiFactoryFn. */
OrtStatus *CreateEpFactories(const char *registered_name, const OrtApiBase *ort_api_base,
                             const OrtLogger *default_logger, OrtEpFactory **factories, size_t max_factories,
                             size_t *num_factories);
OrtStatus *ReleaseEpFactory(OrtEpFactory *factory);

_Static_assert(offsetof(OrtApi, CreateStatus) / sizeof(void *) == 0, "OrtApi slot of CreateStatus");
_Static_assert(offsetof(OrtApi, GetErrorCode) / sizeof(void *) == 1, "OrtApi slot of GetErrorCode");
_Static_assert(offsetof(OrtApi, GetErrorMessage) / sizeof(void *) == 2, "OrtApi slot of GetErrorMessage");
_Static_assert(offsetof(OrtApi, GetTensorMutableData) / sizeof(void *) == 51, "OrtApi slot of GetTensorMutableData");
_Static_assert(offsetof(OrtApi, CastTypeInfoToTensorInfo) / sizeof(void *) == 55, "OrtApi slot of CastTypeInfoToTensorInfo");
_Static_assert(offsetof(OrtApi, GetOnnxTypeFromTypeInfo) / sizeof(void *) == 56, "OrtApi slot of GetOnnxTypeFromTypeInfo");
_Static_assert(offsetof(OrtApi, GetTensorElementType) / sizeof(void *) == 60, "OrtApi slot of GetTensorElementType");
_Static_assert(offsetof(OrtApi, GetDimensionsCount) / sizeof(void *) == 61, "OrtApi slot of GetDimensionsCount");
_Static_assert(offsetof(OrtApi, GetDimensions) / sizeof(void *) == 62, "OrtApi slot of GetDimensions");
_Static_assert(offsetof(OrtApi, GetTensorTypeAndShape) / sizeof(void *) == 65, "OrtApi slot of GetTensorTypeAndShape");
_Static_assert(offsetof(OrtApi, KernelContext_GetInputCount) / sizeof(void *) == 88, "OrtApi slot of KernelContext_GetInputCount");
_Static_assert(offsetof(OrtApi, KernelContext_GetOutputCount) / sizeof(void *) == 89, "OrtApi slot of KernelContext_GetOutputCount");
_Static_assert(offsetof(OrtApi, KernelContext_GetInput) / sizeof(void *) == 90, "OrtApi slot of KernelContext_GetInput");
_Static_assert(offsetof(OrtApi, KernelContext_GetOutput) / sizeof(void *) == 91, "OrtApi slot of KernelContext_GetOutput");
_Static_assert(offsetof(OrtApi, ReleaseStatus) / sizeof(void *) == 93, "OrtApi slot of ReleaseStatus");
_Static_assert(offsetof(OrtApi, ReleaseValue) / sizeof(void *) == 96, "OrtApi slot of ReleaseValue");
_Static_assert(offsetof(OrtApi, ReleaseTensorTypeAndShapeInfo) / sizeof(void *) == 99, "OrtApi slot of ReleaseTensorTypeAndShapeInfo");
_Static_assert(offsetof(OrtApi, CreateOpAttr) / sizeof(void *) == 211, "OrtApi slot of CreateOpAttr");
_Static_assert(offsetof(OrtApi, ReleaseOpAttr) / sizeof(void *) == 212, "OrtApi slot of ReleaseOpAttr");
_Static_assert(offsetof(OrtApi, HasSessionConfigEntry) / sizeof(void *) == 237, "OrtApi slot of HasSessionConfigEntry");
_Static_assert(offsetof(OrtApi, GetSessionConfigEntry) / sizeof(void *) == 238, "OrtApi slot of GetSessionConfigEntry");
_Static_assert(offsetof(OrtApi, Logger_LogMessage) / sizeof(void *) == 247, "OrtApi slot of Logger_LogMessage");
_Static_assert(offsetof(OrtApi, ReadOpAttr) / sizeof(void *) == 272, "OrtApi slot of ReadOpAttr");
_Static_assert(offsetof(OrtApi, GetValueInfoName) / sizeof(void *) == 289, "OrtApi slot of GetValueInfoName");
_Static_assert(offsetof(OrtApi, GetValueInfoTypeInfo) / sizeof(void *) == 290, "OrtApi slot of GetValueInfoTypeInfo");
_Static_assert(offsetof(OrtApi, CreateKeyValuePairs) / sizeof(void *) == 295, "OrtApi slot of CreateKeyValuePairs");
_Static_assert(offsetof(OrtApi, AddKeyValuePair) / sizeof(void *) == 296, "OrtApi slot of AddKeyValuePair");
_Static_assert(offsetof(OrtApi, ReleaseKeyValuePairs) / sizeof(void *) == 300, "OrtApi slot of ReleaseKeyValuePairs");
_Static_assert(offsetof(OrtApi, GetModelEditorApi) / sizeof(void *) == 291, "OrtApi slot of GetModelEditorApi");
_Static_assert(offsetof(OrtApi, HardwareDevice_Type) / sizeof(void *) == 307, "OrtApi slot of HardwareDevice_Type");
_Static_assert(offsetof(OrtApi, GetEpApi) / sizeof(void *) == 317, "OrtApi slot of GetEpApi");
_Static_assert(offsetof(OrtApi, GetTensorSizeInBytes) / sizeof(void *) == 318, "OrtApi slot of GetTensorSizeInBytes");
_Static_assert(offsetof(OrtApi, ValueInfo_GetInitializerValue) / sizeof(void *) == 326, "OrtApi slot of ValueInfo_GetInitializerValue");
_Static_assert(offsetof(OrtApi, ValueInfo_IsConstantInitializer) / sizeof(void *) == 331, "OrtApi slot of ValueInfo_IsConstantInitializer");
_Static_assert(offsetof(OrtApi, Graph_GetModelPath) / sizeof(void *) == 334, "OrtApi slot of Graph_GetModelPath");
_Static_assert(offsetof(OrtApi, Graph_GetOnnxIRVersion) / sizeof(void *) == 335, "OrtApi slot of Graph_GetOnnxIRVersion");
_Static_assert(offsetof(OrtApi, Graph_GetNumOperatorSets) / sizeof(void *) == 336, "OrtApi slot of Graph_GetNumOperatorSets");
_Static_assert(offsetof(OrtApi, Graph_GetOperatorSets) / sizeof(void *) == 337, "OrtApi slot of Graph_GetOperatorSets");
_Static_assert(offsetof(OrtApi, Graph_GetNumInputs) / sizeof(void *) == 338, "OrtApi slot of Graph_GetNumInputs");
_Static_assert(offsetof(OrtApi, Graph_GetInputs) / sizeof(void *) == 339, "OrtApi slot of Graph_GetInputs");
_Static_assert(offsetof(OrtApi, Graph_GetNumOutputs) / sizeof(void *) == 340, "OrtApi slot of Graph_GetNumOutputs");
_Static_assert(offsetof(OrtApi, Graph_GetOutputs) / sizeof(void *) == 341, "OrtApi slot of Graph_GetOutputs");
_Static_assert(offsetof(OrtApi, Graph_GetNumInitializers) / sizeof(void *) == 342, "OrtApi slot of Graph_GetNumInitializers");
_Static_assert(offsetof(OrtApi, Graph_GetInitializers) / sizeof(void *) == 343, "OrtApi slot of Graph_GetInitializers");
_Static_assert(offsetof(OrtApi, Graph_GetNumNodes) / sizeof(void *) == 344, "OrtApi slot of Graph_GetNumNodes");
_Static_assert(offsetof(OrtApi, Graph_GetNodes) / sizeof(void *) == 345, "OrtApi slot of Graph_GetNodes");
_Static_assert(offsetof(OrtApi, Node_GetName) / sizeof(void *) == 349, "OrtApi slot of Node_GetName");
_Static_assert(offsetof(OrtApi, Node_GetOperatorType) / sizeof(void *) == 350, "OrtApi slot of Node_GetOperatorType");
_Static_assert(offsetof(OrtApi, Node_GetDomain) / sizeof(void *) == 351, "OrtApi slot of Node_GetDomain");
_Static_assert(offsetof(OrtApi, Node_GetNumInputs) / sizeof(void *) == 353, "OrtApi slot of Node_GetNumInputs");
_Static_assert(offsetof(OrtApi, Node_GetInputs) / sizeof(void *) == 354, "OrtApi slot of Node_GetInputs");
_Static_assert(offsetof(OrtApi, Node_GetNumOutputs) / sizeof(void *) == 355, "OrtApi slot of Node_GetNumOutputs");
_Static_assert(offsetof(OrtApi, Node_GetOutputs) / sizeof(void *) == 356, "OrtApi slot of Node_GetOutputs");
_Static_assert(offsetof(OrtApi, Node_GetNumAttributes) / sizeof(void *) == 359, "OrtApi slot of Node_GetNumAttributes");
_Static_assert(offsetof(OrtApi, Node_GetAttributes) / sizeof(void *) == 360, "OrtApi slot of Node_GetAttributes");
_Static_assert(offsetof(OrtApi, OpAttr_GetTensorAttributeAsOrtValue) / sizeof(void *) == 362, "OrtApi slot of OpAttr_GetTensorAttributeAsOrtValue");
_Static_assert(offsetof(OrtApi, OpAttr_GetType) / sizeof(void *) == 363, "OrtApi slot of OpAttr_GetType");
_Static_assert(offsetof(OrtApi, OpAttr_GetName) / sizeof(void *) == 364, "OrtApi slot of OpAttr_GetName");
_Static_assert(offsetof(OrtApi, GetTensorData) / sizeof(void *) == 378, "OrtApi slot of GetTensorData");
_Static_assert(offsetof(OrtModelEditorApi, CreateNode) / sizeof(void *) == 6, "OrtModelEditorApi slot of CreateNode");
_Static_assert(offsetof(OrtEpApi, NodeComputeContext_NodeName) / sizeof(void *) == 4, "OrtEpApi slot 4");
_Static_assert(offsetof(OrtEp, GetCompiledModelCompatibilityInfo) / sizeof(void *) == 12, "OrtEp of version 23");
_Static_assert(offsetof(OrtEpFactory, CreateSyncStreamForDevice) / sizeof(void *) == 13,
               "OrtEpFactory of version 23");

#endif /* VNPU_ORT_ABI_H */

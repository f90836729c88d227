/* SPDX-License-Identifier: MIT */
/*
 * vnpu_litert.h - the subset of LiteRT's vendor C API that vnpu's compiler plugin
 * (libLiteRtCompilerPlugin_Vnpu.so) and dispatch library (libLiteRtDispatch_Vnpu.so) use.
 *
 * Read from google-ai-edge/LiteRT at the commit that set LiteRT 2.3.0 (19a1585ff, "Bump LiteRT SDK
 * versions to 2.3.0"), the release the ai-edge-litert 2.3.0 wheel carries: litert/c/litert_common.h
 * (LITERT_API_VERSION 0.1.0), litert_model_types.h, litert_layout.h, litert_tensor_buffer_types.h,
 * litert/c/internal/litert_abi_header.h, litert_compiler_context.h, litert_runtime_context.h,
 * litert/vendors/c/litert_compiler_plugin.h, litert_dispatch.h and litert_dispatch_api.h.
 *
 * Layouts are LiteRT's, member for member (LiteRT checks them with static_asserts on 64-bit
 * targets; tests/litert checks ours against the same sizes). Members vnpu never calls are typed
 * void * (same size and alignment as the function pointers they stand for); enums are given only
 * the values vnpu uses. The file is plain C that cffi's cdef also reads: no macros in declarations.
 */
#ifndef VNPU_LITERT_H
#define VNPU_LITERT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* --- litert_common.h ---------------------------------------------------------------------- */
typedef struct LiteRtApiVersion {
    int major;
    int minor;
    int patch;
} LiteRtApiVersion;

typedef enum {
    kLiteRtStatusOk = 0,
    kLiteRtStatusErrorInvalidArgument = 1,
    kLiteRtStatusErrorMemoryAllocationFailure = 2,
    kLiteRtStatusErrorRuntimeFailure = 3,
    kLiteRtStatusErrorUnsupported = 5,
    kLiteRtStatusErrorNotFound = 6,
    kLiteRtStatusErrorWrongVersion = 8,
    kLiteRtStatusErrorIndexOOB = 1000,
    kLiteRtStatusErrorCompilation = 504,
    kLiteRtStatusErrorUnsupportedRuntimeVersion = 4000,
    kLiteRtStatusErrorUnsupportedCompilerVersion = 4001,
    kLiteRtStatusErrorIncompatibleByteCodeVersion = 4002
} LiteRtStatus;

typedef enum {
    kLiteRtHwAcceleratorNone = 0,
    kLiteRtHwAcceleratorCpu = 1,
    kLiteRtHwAcceleratorGpu = 2,
    kLiteRtHwAcceleratorNpu = 4
} LiteRtHwAccelerators;

typedef enum {
    kLiteRtTensorBufferLockModeRead = 0,
    kLiteRtTensorBufferLockModeWrite = 1,
    kLiteRtTensorBufferLockModeReadWrite = 2
} LiteRtTensorBufferLockMode;

typedef size_t LiteRtParamIndex;

/* LITERT_DEFINE_HANDLE: opaque pointers. */
typedef struct LiteRtModelT *LiteRtModel;
typedef struct LiteRtSubgraphT *LiteRtSubgraph;
typedef struct LiteRtOpT *LiteRtOp;
typedef struct LiteRtTensorT *LiteRtTensor;
typedef struct LiteRtWeightsT *LiteRtWeights;
typedef struct LiteRtOpListT *LiteRtOpList;
typedef struct LiteRtOptionsT *LiteRtOptions;
typedef struct LiteRtOpaqueOptionsT *LiteRtOpaqueOptions;
typedef struct LiteRtEnvironmentT *LiteRtEnvironment;
typedef struct LiteRtEnvironmentOptionsT *LiteRtEnvironmentOptions;
typedef struct LiteRtTensorBufferT *LiteRtTensorBuffer;
typedef struct LiteRtTensorBufferRequirementsT *LiteRtTensorBufferRequirements;
typedef struct LiteRtEventT *LiteRtEvent;
typedef struct LiteRtCompilerPluginT *LiteRtCompilerPlugin;
typedef struct LiteRtCompiledResultT *LiteRtCompiledResult;
typedef struct LiteRtDispatchDeviceContextT *LiteRtDispatchDeviceContext;
typedef struct LiteRtDispatchInvocationContextT *LiteRtDispatchInvocationContext;
typedef struct LiteRtAny LiteRtAny;          /* only passed by pointer here */
typedef int LiteRtEnvOptionTag;              /* an enum */
typedef int LiteRtOpCode;                    /* an enum: TFLite's builtin operator codes */

/* --- litert_layout.h, litert_model_types.h ----------------------------------------------- */
typedef enum {
    kLiteRtElementTypeNone = 0,
    kLiteRtElementTypeFloat32 = 1,
    kLiteRtElementTypeInt32 = 2,
    kLiteRtElementTypeUInt8 = 3,
    kLiteRtElementTypeInt64 = 4,
    kLiteRtElementTypeBool = 6,
    kLiteRtElementTypeInt16 = 7,
    kLiteRtElementTypeInt8 = 9
} LiteRtElementType;

typedef struct {
    unsigned int rank : 7;
    unsigned int has_strides : 1;
    int32_t dimensions[8];                   /* LITERT_TENSOR_MAX_RANK */
    uint32_t strides[8];
} LiteRtLayout;                              /* 68 bytes */

typedef struct {
    LiteRtElementType element_type;
} LiteRtUnrankedTensorType;

typedef struct {
    LiteRtElementType element_type;
    LiteRtLayout layout;
} LiteRtRankedTensorType;                    /* 72 bytes */

typedef enum {
    kLiteRtRankedTensorType = 0,
    kLiteRtUnrankedTensorType = 1
} LiteRtTensorTypeId;

typedef struct {
    float scale;
    int64_t zero_point;
} LiteRtQuantizationPerTensor;               /* 16 bytes */

typedef struct {
    int32_t quantized_dimension;
    uint64_t num_channels;
    float *scales;
    int64_t *zero_points;
} LiteRtQuantizationPerChannel;              /* 32 bytes */

typedef enum {
    kLiteRtQuantizationNone = 0,
    kLiteRtQuantizationPerTensor = 1,
    kLiteRtQuantizationPerChannel = 2,
    kLiteRtQuantizationBlockWise = 3
} LiteRtQuantizationTypeId;

typedef struct LiteRtTensorDefiningOp {
    LiteRtOp op;
    LiteRtParamIndex op_output_index;
} LiteRtTensorDefiningOp;

typedef struct LiteRtModelSerializationOptions {
    size_t bytecode_alignment;
} LiteRtModelSerializationOptions;

/* --- litert_tensor_buffer_types.h ------------------------------------------------------- */
typedef enum {
    kLiteRtTensorBufferTypeUnknown = 0,
    kLiteRtTensorBufferTypeHostMemory = 1,
    kLiteRtTensorBufferTypeDmaBuf = 4
} LiteRtTensorBufferType;

/* --- internal/litert_abi_header.h: the first member of every versioned function table --- */
typedef struct LiteRtAbiHeader {
    uint16_t struct_size;                    /* the table's size as its provider built it */
    uint16_t major_version;                  /* 1 in LiteRT 2.3 */
    uint16_t minor_version;
    uint16_t reserved;
} LiteRtAbiHeader;

/* --- internal/litert_compiler_context.h: what LiteRT hands a compiler plugin (1048 bytes) - */
typedef struct LiteRtCompilerContext {
    LiteRtAbiHeader abi_header;
    LiteRtStatus (*get_num_model_subgraphs)(LiteRtModel model, LiteRtParamIndex* num_subgraphs);
    LiteRtStatus (*get_model_subgraph)(LiteRtModel model, LiteRtParamIndex subgraph_index, LiteRtSubgraph* subgraph);
    LiteRtStatus (*get_num_subgraph_ops)(LiteRtSubgraph subgraph, LiteRtParamIndex* num_ops);
    LiteRtStatus (*get_subgraph_op)(LiteRtSubgraph subgraph, LiteRtParamIndex op_index, LiteRtOp* op);
    LiteRtStatus (*get_num_subgraph_inputs)(LiteRtSubgraph subgraph, LiteRtParamIndex* num_inputs);
    LiteRtStatus (*get_subgraph_input)(LiteRtSubgraph subgraph, LiteRtParamIndex input_index, LiteRtTensor* input);
    LiteRtStatus (*get_num_subgraph_outputs)(LiteRtSubgraph subgraph, LiteRtParamIndex* num_outputs);
    LiteRtStatus (*get_subgraph_output)(LiteRtSubgraph subgraph, LiteRtParamIndex output_index, LiteRtTensor* output);
    LiteRtStatus (*get_op_code)(LiteRtOp op, LiteRtOpCode* code);
    LiteRtStatus (*get_custom_code)(LiteRtOp op, const char** code);
    LiteRtStatus (*get_num_op_inputs)(LiteRtOp op, LiteRtParamIndex* num_inputs);
    LiteRtStatus (*get_op_input)(LiteRtOp op, LiteRtParamIndex input_index, LiteRtTensor* input);
    LiteRtStatus (*get_num_op_outputs)(LiteRtOp op, LiteRtParamIndex* num_outputs);
    LiteRtStatus (*get_op_output)(LiteRtOp op, LiteRtParamIndex output_index, LiteRtTensor* output);
    LiteRtStatus (*get_tensor_name)(LiteRtTensor tensor, const char** name);
    LiteRtStatus (*get_tensor_index)(LiteRtTensor tensor, uint32_t* tensor_index);
    LiteRtStatus (*get_tensor_type_id)(LiteRtTensor tensor, LiteRtTensorTypeId* type_id);
    LiteRtStatus (*get_ranked_tensor_type)(LiteRtTensor tensor, LiteRtRankedTensorType* ranked_tensor_type);
    LiteRtStatus (*get_unranked_tensor_type)(LiteRtTensor tensor, LiteRtUnrankedTensorType* unranked_tensor_type);
    LiteRtStatus (*get_quantization_type_id)(LiteRtTensor tensor, LiteRtQuantizationTypeId* q_type_id);
    LiteRtStatus (*get_per_tensor_quantization)(LiteRtTensor tensor, LiteRtQuantizationPerTensor* per_tensor_quantization);
    LiteRtStatus (*get_per_channel_quantization)(LiteRtTensor tensor, LiteRtQuantizationPerChannel* per_channel_quantization);
    LiteRtStatus (*get_num_tensor_uses)(LiteRtTensor tensor, LiteRtParamIndex* num_uses);
    LiteRtStatus (*get_tensor_use)(LiteRtTensor tensor, LiteRtParamIndex use_index, LiteRtOp* user, LiteRtParamIndex* user_arg_index);
    LiteRtStatus (*get_tensor_defining_op)(LiteRtTensor tensor, bool* has_defining_op, LiteRtTensorDefiningOp* defining_op);
    LiteRtStatus (*get_tensor_weights)(LiteRtTensor tensor, LiteRtWeights* weights);
    LiteRtStatus (*get_weights_buffer_id)(LiteRtWeights weights, int32_t* buffer_id);
    LiteRtStatus (*get_weights_bytes)(LiteRtWeights weights, const void** addr, size_t* size);
    LiteRtStatus (*get_shlo_composite_op_name)(LiteRtOp op, const char** name);
    LiteRtStatus (*get_shlo_composite_op_decomposition_subgraph_index)(LiteRtOp op, int32_t* decomposition_subgraph_index);
    LiteRtStatus (*get_shlo_composite_op_attributes)(LiteRtOp op, const uint8_t** attributes, int32_t* attributes_size);
    LiteRtStatus (*get_shlo_composite_op_version)(LiteRtOp op, int32_t* version);
    LiteRtStatus (*push_op)(LiteRtOpList op_list, LiteRtOp op, LiteRtParamIndex partition_index);
    LiteRtStatus (*get_opaque_options)(LiteRtOptions options, LiteRtOpaqueOptions* opaque_options);
    LiteRtStatus (*find_opaque_options_data)(LiteRtOpaqueOptions options, const char* payload_identifier, void** payload_data);
    void (*destroy_options)(LiteRtOptions options);
    LiteRtStatus (*get_environment_options_value)(LiteRtEnvironmentOptions options, LiteRtEnvOptionTag tag, LiteRtAny* value);
    LiteRtStatus (*get_strided_slice_begin_mask_option)(LiteRtOp op, int32_t* begin_mask);
    LiteRtStatus (*get_strided_slice_end_mask_option)(LiteRtOp op, int32_t* end_mask);
    LiteRtStatus (*get_strided_slice_shrink_axis_mask_option)(LiteRtOp op, int32_t* shrink_axis_mask);
    LiteRtStatus (*get_strided_slice_ellipsis_mask_option)(LiteRtOp op, int32_t* ellipsis_mask);
    LiteRtStatus (*get_strided_slice_new_axis_mask_option)(LiteRtOp op, int32_t* new_axis_mask);
    LiteRtStatus (*get_strided_slice_offset_option)(LiteRtOp op, bool* offset);
    LiteRtStatus (*get_sub_fused_activation_option)(LiteRtOp op, uint32_t* fused_activation);
    LiteRtStatus (*get_sum_keep_dims_option)(LiteRtOp op, bool* keepdims);
    LiteRtStatus (*get_conv_2d_padding_option)(LiteRtOp op, uint32_t* padding);
    LiteRtStatus (*get_conv_2d_stride_w_option)(LiteRtOp op, int32_t* stride_w);
    LiteRtStatus (*get_conv_2d_stride_h_option)(LiteRtOp op, int32_t* stride_h);
    LiteRtStatus (*get_conv_2d_fused_activation_option)(LiteRtOp op, uint32_t* fused_activation_function);
    LiteRtStatus (*get_conv_2d_dilation_w_option)(LiteRtOp op, int32_t* dilation_w_factor);
    LiteRtStatus (*get_conv_2d_dilation_h_option)(LiteRtOp op, int32_t* dilation_h_factor);
    LiteRtStatus (*get_depthwise_conv_2d_padding_option)(LiteRtOp op, uint32_t* padding);
    LiteRtStatus (*get_depthwise_conv_2d_stride_w_option)(LiteRtOp op, int32_t* stride_w);
    LiteRtStatus (*get_depthwise_conv_2d_stride_h_option)(LiteRtOp op, int32_t* stride_h);
    LiteRtStatus (*get_depthwise_conv_2d_depth_multiplier_option)(LiteRtOp op, int32_t* depth_multiplier);
    LiteRtStatus (*get_depthwise_conv_2d_fused_activation_option)(LiteRtOp op, uint32_t* fused_activation_function);
    LiteRtStatus (*get_depthwise_conv_2d_dilation_w_option)(LiteRtOp op, int32_t* dilation_w_factor);
    LiteRtStatus (*get_depthwise_conv_2d_dilation_h_option)(LiteRtOp op, int32_t* dilation_h_factor);
    LiteRtStatus (*get_transpose_conv_padding_option)(LiteRtOp op, uint32_t* padding);
    LiteRtStatus (*get_transpose_conv_stride_w_option)(LiteRtOp op, int32_t* stride_w);
    LiteRtStatus (*get_transpose_conv_stride_h_option)(LiteRtOp op, int32_t* stride_h);
    LiteRtStatus (*get_transpose_conv_fused_activation_option)(LiteRtOp op, uint32_t* fused_activation_function);
    LiteRtStatus (*get_add_fused_activation_option)(LiteRtOp op, uint32_t* fused_activation);
    LiteRtStatus (*get_mul_fused_activation_option)(LiteRtOp op, uint32_t* fused_activation);
    LiteRtStatus (*get_div_fused_activation_option)(LiteRtOp op, uint32_t* fused_activation);
    LiteRtStatus (*get_fully_connected_fused_activation_option)(LiteRtOp op, uint32_t* fused_activation);
    LiteRtStatus (*get_fully_connected_weights_format_option)(LiteRtOp op, uint32_t* weights_format);
    LiteRtStatus (*get_fully_connected_keep_num_dims_option)(LiteRtOp op, bool* keep_num_dims);
    LiteRtStatus (*get_fully_connected_quantized_bias_type_option)(LiteRtOp op, uint32_t* quantized_bias_type);
    LiteRtStatus (*get_fully_connected_asymmetric_quantize_input_option)(LiteRtOp op, bool* asymmetric_quantize_input);
    LiteRtStatus (*get_softmax_beta_option)(LiteRtOp op, float* beta);
    LiteRtStatus (*get_concatenation_axis_option)(LiteRtOp op, int32_t* axis);
    LiteRtStatus (*get_concatenation_fused_activation_option)(LiteRtOp op, uint32_t* fused_activation);
    LiteRtStatus (*get_split_num_splits_option)(LiteRtOp op, int32_t* num_splits);
    LiteRtStatus (*get_mean_keep_dims_option)(LiteRtOp op, bool* keepdims);
    LiteRtStatus (*get_reduce_max_keep_dims_option)(LiteRtOp op, bool* keepdims);
    LiteRtStatus (*get_resize_bilinear_align_corners_option)(LiteRtOp op, bool* align_corners);
    LiteRtStatus (*get_resize_bilinear_half_pixel_center_option)(LiteRtOp op, bool* half_pixel_centers);
    LiteRtStatus (*get_resize_nearest_neighbor_align_corners_option)(LiteRtOp op, bool* align_corners);
    LiteRtStatus (*get_resize_nearest_neighbor_half_pixel_center_option)(LiteRtOp op, bool* half_pixel_centers);
    LiteRtStatus (*get_batch_matmul_adj_x_option)(LiteRtOp op, bool* adj_x);
    LiteRtStatus (*get_batch_matmul_adj_y_option)(LiteRtOp op, bool* adj_y);
    LiteRtStatus (*get_batch_matmul_asymmetric_quantize_input_option)(LiteRtOp op, bool* asymmetric_quantize_input);
    LiteRtStatus (*get_average_pool_2d_padding_option)(LiteRtOp op, uint32_t* padding);
    LiteRtStatus (*get_average_pool_2d_stride_w_option)(LiteRtOp op, int32_t* stride_w);
    LiteRtStatus (*get_average_pool_2d_stride_h_option)(LiteRtOp op, int32_t* stride_h);
    LiteRtStatus (*get_average_pool_2d_filter_width_option)(LiteRtOp op, int32_t* filter_width);
    LiteRtStatus (*get_average_pool_2d_filter_height_option)(LiteRtOp op, int32_t* filter_height);
    LiteRtStatus (*get_average_pool_2d_fused_activation_option)(LiteRtOp op, uint32_t* fused_activation);
    LiteRtStatus (*get_max_pool_2d_padding_option)(LiteRtOp op, uint32_t* padding);
    LiteRtStatus (*get_max_pool_2d_stride_w_option)(LiteRtOp op, int32_t* stride_w);
    LiteRtStatus (*get_max_pool_2d_stride_h_option)(LiteRtOp op, int32_t* stride_h);
    LiteRtStatus (*get_max_pool_2d_filter_width_option)(LiteRtOp op, int32_t* filter_width);
    LiteRtStatus (*get_max_pool_2d_filter_height_option)(LiteRtOp op, int32_t* filter_height);
    LiteRtStatus (*get_max_pool_2d_fused_activation_option)(LiteRtOp op, uint32_t* fused_activation);
    LiteRtStatus (*get_leaky_relu_alpha_option)(LiteRtOp op, float* alpha);
    LiteRtStatus (*get_reshape_new_shape_option)(LiteRtOp op, const int32_t** new_shape, int32_t* new_shape_size);
    LiteRtStatus (*get_reduce_min_keep_dims_option)(LiteRtOp op, bool* keepdims);
    LiteRtStatus (*get_reduce_any_keep_dims_option)(LiteRtOp op, bool* keepdims);
    LiteRtStatus (*get_reduce_all_keep_dims_option)(LiteRtOp op, bool* keepdims);
    LiteRtStatus (*get_pack_axis_option)(LiteRtOp op, int32_t* axis);
    LiteRtStatus (*get_pack_values_count_option)(LiteRtOp op, int32_t* values_count);
    LiteRtStatus (*get_one_hot_axis_option)(LiteRtOp op, int32_t* axis);
    LiteRtStatus (*get_unpack_axis_option)(LiteRtOp op, int32_t* axis);
    LiteRtStatus (*get_unpack_num_option)(LiteRtOp op, int32_t* num);
    LiteRtStatus (*get_gather_axis_option)(LiteRtOp op, int32_t* axis);
    LiteRtStatus (*get_gather_batch_dims_option)(LiteRtOp op, int32_t* batch_dims);
    LiteRtStatus (*get_conv_3d_padding_option)(LiteRtOp op, uint32_t* padding);
    LiteRtStatus (*get_conv_3d_stride_d_option)(LiteRtOp op, int32_t* stride_d);
    LiteRtStatus (*get_conv_3d_stride_w_option)(LiteRtOp op, int32_t* stride_w);
    LiteRtStatus (*get_conv_3d_stride_h_option)(LiteRtOp op, int32_t* stride_h);
    LiteRtStatus (*get_conv_3d_fused_activation_option)(LiteRtOp op, uint32_t* fused_activation_function);
    LiteRtStatus (*get_conv_3d_dilation_d_option)(LiteRtOp op, int32_t* dilation_d_factor);
    LiteRtStatus (*get_conv_3d_dilation_w_option)(LiteRtOp op, int32_t* dilation_w_factor);
    LiteRtStatus (*get_conv_3d_dilation_h_option)(LiteRtOp op, int32_t* dilation_h_factor);
    LiteRtStatus (*get_l2_pool_2d_padding_option)(LiteRtOp op, uint32_t* padding);
    LiteRtStatus (*get_l2_pool_2d_stride_w_option)(LiteRtOp op, int32_t* stride_w);
    LiteRtStatus (*get_l2_pool_2d_stride_h_option)(LiteRtOp op, int32_t* stride_h);
    LiteRtStatus (*get_l2_pool_2d_filter_width_option)(LiteRtOp op, int32_t* filter_width);
    LiteRtStatus (*get_l2_pool_2d_filter_height_option)(LiteRtOp op, int32_t* filter_height);
    LiteRtStatus (*get_l2_pool_2d_fused_activation_option)(LiteRtOp op, uint32_t* fused_activation_function);
    LiteRtStatus (*get_depth_to_space_block_size_option)(LiteRtOp op, int32_t* block_size);
    LiteRtStatus (*get_space_to_depth_block_size_option)(LiteRtOp op, int32_t* block_size);
    LiteRtStatus (*get_cumsum_exclusive_option)(LiteRtOp op, bool* exclusive);
    LiteRtStatus (*get_cumsum_reverse_option)(LiteRtOp op, bool* reverse);
    LiteRtStatus (*get_gelu_approximate_option)(LiteRtOp op, bool* approximate);
    LiteRtStatus (*get_mirror_pad_mode_option)(LiteRtOp op, uint32_t* mode);
    LiteRtStatus (*get_squeeze_dims_option)(LiteRtOp op, const int32_t** squeeze_dims, int32_t* num_squeeze_dims);
    LiteRtStatus (*get_custom_options)(LiteRtOp op, const uint8_t** custom_options, int32_t* custom_options_size);
    LiteRtStatus (*serialize_model_with_signatures)(LiteRtModel model, uint8_t** buf, size_t* size, size_t* offset, bool share_weights, char** signature_keys, size_t num_signatures, LiteRtModelSerializationOptions options);
} LiteRtCompilerContext;

/* --- internal/litert_runtime_context.h: what LiteRT hands a dispatch library (400 bytes) -- */
typedef struct LiteRtRuntimeContext {
    LiteRtAbiHeader abi_header;
    LiteRtStatus (*create_tensor_buffer_requirements)(int num_supported_tensor_buffer_types, const LiteRtTensorBufferType* supported_tensor_buffer_types, size_t buffer_size, int num_strides, const uint32_t* strides, LiteRtTensorBufferRequirements* requirements);
    void *get_external_litert_buffer_context_tensor_buffer;
    void *external_litert_buffer_context_create_tensor_buffer;
    void *external_litert_buffer_context_register_tensor_buffer;
    void *external_litert_buffer_context_unregister_tensor_buffer;
    void *external_litert_buffer_context_register_buffer_requirements;
    void *external_litert_buffer_context_get_environment;
    void *external_litert_buffer_context_is_async_execution_mode;
    void *external_litert_buffer_context_destroy;
    LiteRtStatus (*get_opaque_options)(LiteRtOptions options, LiteRtOpaqueOptions* opaque_options);
    LiteRtStatus (*find_opaque_options_data)(LiteRtOpaqueOptions options, const char* payload_identifier, void** payload_data);
    void *destroy_options;
    void *get_environment_options;
    void *get_environment_options_value;
    void *environment_has_gpu_environment;
    void *add_environment_options;
    void *gpu_environment_create;
    void *wrap_delegate;
    void *unwrap_delegate;
    void *create_tensor_buffer_from_host_memory;
    void *create_managed_tensor_buffer;
    void *destroy_tensor_buffer;
    LiteRtStatus (*get_tensor_buffer_type)(LiteRtTensorBuffer tensor_buffer, LiteRtTensorBufferType* buffer_type);
    void *get_tensor_buffer_tensor_type;
    void *get_tensor_buffer_size;
    LiteRtStatus (*get_tensor_buffer_packed_size)(LiteRtTensorBuffer tensor_buffer, size_t* size);
    LiteRtStatus (*get_tensor_buffer_offset)(LiteRtTensorBuffer tensor_buffer, size_t* offset);
    LiteRtStatus (*lock_tensor_buffer)(LiteRtTensorBuffer tensor_buffer, void** host_mem_addr, LiteRtTensorBufferLockMode mode);
    LiteRtStatus (*unlock_tensor_buffer)(LiteRtTensorBuffer tensor_buffer);
    void *get_tensor_buffer_host_memory;
    void *get_tensor_buffer_opencl_memory;
    void *get_tensor_buffer_gl_buffer;
    void *get_tensor_buffer_custom_tensor_buffer_handle;
    void *get_tensor_buffer_ahwb;
    LiteRtStatus (*get_tensor_buffer_dma_buf_buffer)(LiteRtTensorBuffer tensor_buffer, void** dmabuf_buffer_addr, int* dmabuf_buffer_fd);
    void *get_tensor_buffer_fast_rpc_buffer;
    void *has_tensor_buffer_event;
    void *get_tensor_buffer_event;
    void *set_tensor_buffer_event;
    void *create_managed_event;
    void *create_event_from_sync_fence_fd;
    void *get_event_event_type;
    void *get_event_sync_fence_fd;
    void *create_event_from_opencl_event;
    void *get_event_opencl_event;
    void *set_custom_event;
    void *get_custom_event;
    void *wait_event;
    void *external_litert_buffer_context_get_run_options;
} LiteRtRuntimeContext;

/* --- vendors/c/litert_dispatch.h ------------------------------------------------------ */
typedef uint64_t LiteRtTensorBufferHandle;

typedef enum {
    kLiteRtDispatchCapabilitiesNone = 0,
    kLiteRtDispatchCapabilitiesBasic = 1,
    kLiteRtDispatchCapabilitiesAsync = 2,
    kLiteRtDispatchCapabilitiesGraph = 4
} LiteRtDispatchCapabilities;

typedef enum {
    kLiteRtDispatchExecutableTypeUnknown = 0,
    kLiteRtDispatchExecutableTypeDspLibrary = 1,
    kLiteRtDispatchExecutableTypeMlModel = 2,
    kLiteRtDispatchExecutableTypeJitHandle = 3,
    kLiteRtDispatchExecutableTypeTfliteModel = 4
} LiteRtDispatchExecutableType;

typedef struct LiteRtMemBuffer {
    int fd;                                  /* -1 when the bytecode is not in a file */
    const void *base_addr;
    size_t offset;                           /* the bytecode is base_addr[offset, offset + size) */
    size_t size;
    size_t alloc_base_file_offset;
} LiteRtMemBuffer;

/* --- vendors/c/litert_dispatch_api.h: the table LiteRtDispatchGetApi fills ------------- */
typedef struct LiteRtDispatchInterface {
    LiteRtStatus (*initialize)(const LiteRtRuntimeContext *runtime_context, LiteRtEnvironment environment, LiteRtOptions options);
    LiteRtStatus (*get_vendor_id)(const char **vendor_id);
    LiteRtStatus (*get_build_id)(const char **build_id);
    LiteRtStatus (*get_capabilities)(int *capabilities);
    LiteRtStatus (*device_context_create)(const LiteRtRuntimeContext *runtime_context, LiteRtOptions options, LiteRtDispatchDeviceContext *device_context);
    LiteRtStatus (*device_context_destroy)(LiteRtDispatchDeviceContext device_context);
    LiteRtStatus (*get_input_requirements)(LiteRtDispatchInvocationContext invocation_context, int input_index, const LiteRtRankedTensorType *tensor_type, LiteRtTensorBufferRequirements *tensor_buffer_requirements);
    LiteRtStatus (*get_output_requirements)(LiteRtDispatchInvocationContext invocation_context, int output_index, const LiteRtRankedTensorType *tensor_type, LiteRtTensorBufferRequirements *tensor_buffer_requirements);
    LiteRtStatus (*register_tensor_buffer)(LiteRtDispatchDeviceContext device_context, LiteRtTensorBuffer tensor_buffer, LiteRtTensorBufferHandle *tensor_buffer_handle);
    LiteRtStatus (*unregister_tensor_buffer)(LiteRtDispatchDeviceContext device_context, LiteRtTensorBufferHandle handle);
    LiteRtStatus (*invocation_context_create)(const LiteRtRuntimeContext *runtime_context, LiteRtDispatchDeviceContext device_context, LiteRtDispatchExecutableType exec_type, const LiteRtMemBuffer *exec_bytecode_buffer, const char *function_name, int num_inputs, int num_outputs, LiteRtDispatchInvocationContext *invocation_context);
    LiteRtStatus (*invocation_context_destroy)(LiteRtDispatchInvocationContext invocation_context);
    void *invocation_context_set_scheduling_info;
    LiteRtStatus (*attach_input)(LiteRtDispatchInvocationContext invocation_context, int graph_input_index, LiteRtTensorBufferHandle tensor_buffer_handle);
    LiteRtStatus (*attach_output)(LiteRtDispatchInvocationContext invocation_context, int graph_output_index, LiteRtTensorBufferHandle tensor_buffer_handle);
    LiteRtStatus (*detach_input)(LiteRtDispatchInvocationContext invocation_context, int graph_input_index, LiteRtTensorBufferHandle tensor_buffer_handle);
    LiteRtStatus (*detach_output)(LiteRtDispatchInvocationContext invocation_context, int graph_output_index, LiteRtTensorBufferHandle tensor_buffer_handle);
    LiteRtStatus (*invoke)(LiteRtDispatchInvocationContext invocation_context);
    void *start_metrics_collection;
    void *stop_metrics_collection;
    void *get_num_metrics;
    void *get_metric;
    void *destroy_metrics;
    LiteRtStatus (*check_runtime_compatibility)(LiteRtApiVersion api_version, LiteRtEnvironmentOptions env, LiteRtOptions options);
    LiteRtStatus (*invocation_context_set_options)(LiteRtDispatchInvocationContext invocation_context, LiteRtOptions options);
    void *get_hooks;
    /* LITERT_ENABLE_FABRIC_INTEGRATION builds append attach/detach_edge_buffer: kept NULL. */
    void *attach_edge_buffer;
    void *detach_edge_buffer;
} LiteRtDispatchInterface;

typedef struct LiteRtDispatchApi {
    LiteRtAbiHeader abi_header;
    LiteRtApiVersion version;
    LiteRtDispatchInterface *interface;
    void *async_interface;                   /* LiteRtDispatchAsyncInterface *: none */
    void *graph_interface;                   /* LiteRtDispatchGraphInterface *: none */
    void *tensor_buffer_handlers_def;        /* LiteRtCustomTensorBufferHandlersDef *: none */
} LiteRtDispatchApi;                         /* 56 bytes */

#endif /* VNPU_LITERT_H */

/* SPDX-License-Identifier: MIT */
/*
 * The TFLite C ABI the vnpu delegate speaks (LP64 Linux), and the records of the invoke Python
 * prepares. delegate_teflon/abi.py's docstring says which runtime layouts these mirror.
 *
 * The block between the interface markers is also cffi's cdef (delegate_teflon.build reads it), so
 * it holds only what cffi parses: declarations, no preprocessor lines.
 */
#ifndef VNPU_TEFLON_ABI_H
#define VNPU_TEFLON_ABI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* --- interface: begin (cffi's cdef reads from here to the end marker) */
typedef int TfLiteStatus;      /* kTfLiteOk = 0, kTfLiteError = 1 */
typedef int TfLiteType;        /* enum TfLiteType */

typedef struct TfLiteIntArray {
    int size;
    int data[];
} TfLiteIntArray;

/* TfLiteFloatArray, layout of tflite 2.14 and LiteRT: a flexible array. */
typedef struct vnpu_float_array_inline {
    int size;
    float data[];
} vnpu_float_array_inline;

/* TfLiteFloatArray, layout of recent TensorFlow: a view. */
typedef struct vnpu_float_array_view {
    float *data;
    int size;
    _Bool owning;
} vnpu_float_array_view;

typedef struct TfLiteQuantizationParams {
    float scale;
    int32_t zero_point;
} TfLiteQuantizationParams;

typedef struct TfLiteQuantization {
    int type;                  /* kTfLiteNoQuantization = 0, kTfLiteAffineQuantization = 1 */
    void *params;
} TfLiteQuantization;

typedef struct TfLiteAffineQuantization {
    void *scale;               /* a TfLiteFloatArray of the runtime's layout */
    TfLiteIntArray *zero_point;
    int32_t quantized_dimension;
} TfLiteAffineQuantization;

typedef struct TfLiteTensor {
    TfLiteType type;
    void *data;
    TfLiteIntArray *dims;
    TfLiteQuantizationParams params;
    int allocation_type;       /* kTfLiteMmapRo = 1, kTfLiteArenaRw = 2, ... */
    size_t bytes;
    const void *allocation;
    const char *name;
    void *delegate;
    int buffer_handle;
    _Bool data_is_stale;
    _Bool is_variable;
    TfLiteQuantization quantization;
    void *sparsity;
    const TfLiteIntArray *dims_signature;
} TfLiteTensor;

typedef struct TfLiteNode {
    TfLiteIntArray *inputs;
    TfLiteIntArray *outputs;
    TfLiteIntArray *intermediates;
    TfLiteIntArray *temporaries;
    void *user_data;
    void *builtin_data;
    const void *custom_initial_data;
    int custom_initial_data_size;
    void *delegate;
    _Bool might_have_side_effect;
} TfLiteNode;

/* The prefix of TfLiteRegistration every version shares (the runtime's, read through a pointer). */
typedef struct vnpu_registration_prefix {
    void *init;
    void *free;
    void *prepare;
    void *invoke;
    void *profiling_string;
    int32_t builtin_code;
    const char *custom_name;
    int version;
} vnpu_registration_prefix;

struct TfLiteDelegate;
struct TfLiteDelegateParams;

/* The prefix of TfLiteContext the delegate uses (unchanged from 2.3 to today). */
typedef struct TfLiteContext {
    size_t tensors_size;
    TfLiteStatus (*GetExecutionPlan)(struct TfLiteContext *context, TfLiteIntArray **execution_plan);
    TfLiteTensor *tensors;
    void *impl_;
    void *ResizeTensor;
    void *ReportError;         /* void (*)(TfLiteContext *, const char *fmt, ...): see vnpu_report */
    void *AddTensors;
    TfLiteStatus (*GetNodeAndRegistration)(struct TfLiteContext *, int node_index, TfLiteNode **node,
                                           vnpu_registration_prefix **registration);
    void *ReplaceNodeSubsetsWithDelegateKernels;   /* takes TfLiteRegistration BY VALUE */
    int recommended_num_threads;
    void *GetExternalContext;
    void *SetExternalContext;
    _Bool allow_fp32_relax_to_fp16;
    void *profiler;
    void *AllocatePersistentBuffer;
    void *AllocateBufferForEval;
    void *RequestScratchBufferInArena;
    void *GetScratchBuffer;
    void *ResizeTensorExplicit;
    /* Available inside TfLiteDelegate.Prepare only (2.3 and later): the partitions TFLite would make
       of a node set, without making them. */
    TfLiteStatus (*PreviewDelegatePartitioning)(struct TfLiteContext *context,
                                                const TfLiteIntArray *nodes_to_replace,
                                                struct TfLiteDelegateParams **partition_params_array,
                                                int *num_partitions);
} TfLiteContext;

typedef struct TfLiteDelegate {
    void *data_;
    TfLiteStatus (*Prepare)(TfLiteContext *context, struct TfLiteDelegate *delegate);
    void *CopyFromBufferHandle;
    void *CopyToBufferHandle;
    void *FreeBufferHandle;
    int64_t flags;
    void *opaque_delegate_builder;
} TfLiteDelegate;

typedef struct TfLiteDelegateParams {
    TfLiteDelegate *delegate;
    TfLiteIntArray *nodes_to_replace;
    TfLiteIntArray *input_tensors;
    TfLiteIntArray *output_tensors;
} TfLiteDelegateParams;

/* builtin_op_data.h: prefixes of the option structs of the ops the NPU may take. */
typedef struct TfLiteConvParams {
    int padding;               /* kTfLitePaddingSame = 1, kTfLitePaddingValid = 2 */
    int stride_width;
    int stride_height;
    int activation;            /* TfLiteFusedActivation */
    int dilation_width_factor;
    int dilation_height_factor;
} TfLiteConvParams;

typedef struct TfLiteDepthwiseConvParams {
    int padding;
    int stride_width;
    int stride_height;
    int depth_multiplier;
    int activation;
    int dilation_width_factor;
    int dilation_height_factor;
} TfLiteDepthwiseConvParams;

typedef struct TfLitePoolParams {
    int padding;
    int stride_width;
    int stride_height;
    int filter_width;
    int filter_height;
    int activation;
} TfLitePoolParams;

typedef struct TfLiteFullyConnectedParams {
    int activation;
    int weights_format;
    _Bool keep_num_dims;
    _Bool asymmetric_quantize_inputs;
} TfLiteFullyConnectedParams;

typedef struct TfLiteAddParams {
    int activation;
    _Bool pot_scale_int16;
} TfLiteAddParams;

typedef struct TfLiteSubParams {
    int activation;
    _Bool pot_scale_int16;
} TfLiteSubParams;

typedef struct TfLiteMulParams {
    int activation;
} TfLiteMulParams;

typedef struct TfLiteConcatenationParams {
    int axis;
    int activation;
} TfLiteConcatenationParams;

typedef struct TfLiteReshapeParams {
    int32_t shape[8];
    int num_dimensions;
} TfLiteReshapeParams;

typedef struct TfLiteReducerParams {
    _Bool keep_dims;
} TfLiteReducerParams;

typedef struct TfLiteStridedSliceParams {
    int begin_mask;
    int end_mask;
    int ellipsis_mask;
    int new_axis_mask;
    int shrink_axis_mask;
    _Bool offset;
} TfLiteStridedSliceParams;

typedef struct TfLiteResizeNearestNeighborParams {
    _Bool align_corners;
    _Bool half_pixel_centers;
} TfLiteResizeNearestNeighborParams;

typedef struct TfLiteLeakyReluParams {
    float alpha;
} TfLiteLeakyReluParams;

typedef struct TfLiteGeluParams {
    _Bool approximate;
} TfLiteGeluParams;

typedef struct TfLitePackParams {
    int values_count;
    int axis;
} TfLitePackParams;

typedef struct TfLiteGatherParams {
    int axis;
    int batch_dims;
} TfLiteGatherParams;

typedef struct TfLiteSoftmaxParams {
    float beta;
} TfLiteSoftmaxParams;

typedef struct TfLiteResizeBilinearParams {
    _Bool align_corners;
    _Bool half_pixel_centers;
} TfLiteResizeBilinearParams;

typedef struct TfLiteBatchMatMulParams {
    _Bool adj_x;
    _Bool adj_y;
    _Bool asymmetric_quantize_inputs;
} TfLiteBatchMatMulParams;

typedef struct TfLiteDepthToSpaceParams {  /* TfLiteSpaceToDepthParams has the same layout */
    int block_size;
} TfLiteDepthToSpaceParams;

typedef struct TfLiteTransposeConvParams {  /* LiteRT appends quantized_bias_type: a prefix */
    int padding;
    int stride_width;
    int stride_height;
    int activation;
} TfLiteTransposeConvParams;

/* The three TfLiteRegistration layouts (see the module docstring). */
typedef struct vnpu_registration_v1 {
    void *init; void *free; void *prepare; void *invoke; void *profiling_string;
    int32_t builtin_code; const char *custom_name; int version;
} vnpu_registration_v1;

typedef struct vnpu_registration_v3 {
    void *init; void *free; void *prepare; void *invoke; void *profiling_string;
    int32_t builtin_code; const char *custom_name; int version;
    void *registration_external; void *async_kernel;
} vnpu_registration_v3;

typedef struct vnpu_registration_v4 {
    void *init; void *free; void *prepare; void *invoke; void *profiling_string;
    int32_t builtin_code; const char *custom_name; int version;
    void *registration_external; void *async_kernel; uint64_t inplace_operator;
} vnpu_registration_v4;

/* One byte copy of an invoke: a runtime tensor into its place in the arena, or back out. */
typedef struct vnpu_copy {
    void *dst;
    const void *src;
    size_t size;
} vnpu_copy;

/* A delegate kernel: its handle in the Python registry, and the invoke Python prepared. */
typedef struct vnpu_partition {
    int handle;
    int ready;                 /* the fields below are current: vnpu_invoke runs the invoke in C */
    int fd;                    /* the accel node for C's own ioctls; -1: vnpu_kernel_run submits */
    int io_count;              /* the partition's inputs, then its outputs: */
    const int *io_tensors;     /*   their tensor indices */
    void *const *io_data;      /*   the runtime's buffers the copies below were made for */
    int in_count;
    const vnpu_copy *copies_in;
    int out_count;
    const vnpu_copy *copies_out;
    void *submit;              /* struct drm_vnpu_submit of the partition's job, reused */
    void *wait;                /* struct drm_vnpu_bo_wait on the arena, reused */
    int64_t timeout_ns;        /* the wait's deadline, from the SUBMIT */
    uint64_t c_invokes;        /* invokes vnpu_invoke ran without Python's invoke */
} vnpu_partition;

/* C helpers (prepared_invoke.c), callable from Python. */
TfLiteStatus vnpu_replace_nodes(TfLiteContext *context, int registration_layout,
                                const TfLiteIntArray *nodes, TfLiteDelegate *delegate);
void vnpu_report(TfLiteContext *context, const char *message);
const char *vnpu_object_of(const void *address);
void vnpu_call_report_error(void (*report_error)(const char *), const char *message);
TfLiteStatus vnpu_resize_tensor(TfLiteContext *context, int tensor, int rank, const int *dims);
/* Set by Python (plugin._defer) when a signal handler's work waits for the invoke's end. */
extern int vnpu_deferred;
/* --- interface: end --- */

#endif /* VNPU_TEFLON_ABI_H */

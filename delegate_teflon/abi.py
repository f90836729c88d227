"""The TFLite C ABI the delegate speaks, as C declarations shared by cffi's cdef and the C source.

These mirror ``tensorflow/lite/core/c/common.h`` and ``builtin_op_data.h`` of the supported runtimes
(tflite-runtime 2.14, ai-edge-litert 2.x) on LP64 Linux. TFLite promises that struct fields are only
ever appended, so a *prefix* of a struct is stable; where a struct changed or grew, this file keeps one
declaration per layout and :mod:`delegate_teflon.runtime_abi` picks one at run time:

- ``TfLiteRegistration`` is passed *by value* to ``ReplaceNodeSubsetsWithDelegateKernels``, so the
  delegate's copy must be exactly the runtime's. 2.14 and every later release have the 88-byte layout
  ending in ``inplace_operator`` (``vnpu_registration_v4``); releases before 2.13 had shorter ones
  (``_v1``: 64 bytes, up to ``version``; ``_v3``: 80 bytes, up to ``async_kernel``).
- ``TfLiteFloatArray`` (per-channel scales) was ``{int size; float data[];}`` for years; recent
  TensorFlow turned it into ``{float *data; int size; bool owning;}``. Both are declared.
- ``TfLiteContext``, ``TfLiteTensor`` and ``TfLiteNode`` are owned by the runtime; only the prefix the
  delegate reads is declared (the runtime allocates them, never the delegate). The context's prefix
  ends at ``PreviewDelegatePartitioning`` (since TFLite 2.3).
- ``TfLiteDelegate`` is allocated by the delegate: its full 56-byte layout is declared (unchanged since
  2.9) and zero-initialised.
"""

from __future__ import annotations

# Types and the structs the delegate reads or builds. Used verbatim by the C source and by cdef.
TYPES = r"""
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
"""

# The invoke C runs by itself once Python has prepared it (vnpu_invoke in C_SOURCE; filled by
# delegate_teflon.plugin). Each delegate kernel's TfLiteNode.user_data is one vnpu_partition.
PARTITION_TYPES = r"""
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
"""

# C helpers (bodies in C_SOURCE), callable from Python.
HELPERS = r"""
TfLiteStatus vnpu_replace_nodes(TfLiteContext *context, int registration_layout,
                                const TfLiteIntArray *nodes, TfLiteDelegate *delegate);
void vnpu_report(TfLiteContext *context, const char *message);
const char *vnpu_object_of(const void *address);
void vnpu_call_report_error(void (*report_error)(const char *), const char *message);
TfLiteStatus vnpu_resize_tensor(TfLiteContext *context, int tensor, int rank, const int *dims);
/* Set by Python (plugin._defer) when a signal handler's work waits for the invoke's end. */
extern int vnpu_deferred;
"""

# Callbacks implemented in Python (cffi extern "Python": each takes the GIL, which Invoke released).
CALLBACKS = r"""
extern "Python" TfLiteStatus vnpu_delegate_prepare(TfLiteContext *context, TfLiteDelegate *delegate);
extern "Python" void *vnpu_kernel_init(TfLiteContext *context, const char *buffer, size_t length);
extern "Python" void vnpu_kernel_free(TfLiteContext *context, void *buffer);
extern "Python" TfLiteStatus vnpu_kernel_prepare(TfLiteContext *context, TfLiteNode *node);
extern "Python" TfLiteStatus vnpu_kernel_invoke(TfLiteContext *context, TfLiteNode *node);
extern "Python" TfLiteStatus vnpu_kernel_run(TfLiteContext *context, int handle);
extern "Python" TfLiteStatus vnpu_kernel_failed(TfLiteContext *context, int handle, unsigned long request,
                                                int error, int32_t job_status, uint64_t fault_va);
extern "Python" TfLiteDelegate *vnpu_plugin_create(char **options_keys, char **options_values,
                                                   size_t num_options, void (*report_error)(const char *));
extern "Python" void vnpu_plugin_destroy(TfLiteDelegate *delegate);
"""

# The exported plugin entry points (delegates/external/external_delegate_adaptor.cc), written in C
# (delegate_teflon.build.HOST_SOURCE): they start Python in a host that has none, then call
# vnpu_plugin_create / vnpu_plugin_destroy.
EXPORTS = r"""
TfLiteDelegate *tflite_plugin_create_delegate(char **options_keys, char **options_values,
                                              size_t num_options,
                                              void (*report_error)(const char *));
void tflite_plugin_destroy_delegate(TfLiteDelegate *delegate);
"""

C_SOURCE = (
    r"""
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>

#include "drm/vnpu_accel.h"
"""
    + TYPES
    + PARTITION_TYPES
    + r"""
static TfLiteStatus vnpu_delegate_prepare(TfLiteContext *context, TfLiteDelegate *delegate);
static void *vnpu_kernel_init(TfLiteContext *context, const char *buffer, size_t length);
static void vnpu_kernel_free(TfLiteContext *context, void *buffer);
static TfLiteStatus vnpu_kernel_prepare(TfLiteContext *context, TfLiteNode *node);
static TfLiteStatus vnpu_kernel_invoke(TfLiteContext *context, TfLiteNode *node);
static TfLiteStatus vnpu_kernel_run(TfLiteContext *context, int handle);
static TfLiteStatus vnpu_kernel_failed(TfLiteContext *context, int handle, unsigned long request, int error,
                                       int32_t job_status, uint64_t fault_va);
static TfLiteDelegate *vnpu_plugin_create(char **options_keys, char **options_values, size_t num_options,
                                          void (*report_error)(const char *));
static void vnpu_plugin_destroy(TfLiteDelegate *delegate);
void vnpu_report(TfLiteContext *context, const char *message);

#define VNPU_BUILTIN_DELEGATE 51   /* BuiltinOperator_DELEGATE */

/* A kernel's init: Python records the partition and names it by a handle; its vnpu_partition,
   which the node keeps as user_data, lives until the kernel's free. */
static void *vnpu_init(TfLiteContext *context, const char *buffer, size_t length)
{
    void *handle = vnpu_kernel_init(context, buffer, length);
    vnpu_partition *partition;

    if (!handle)
        return NULL;
    partition = calloc(1, sizeof(*partition));
    if (!partition) {
        vnpu_kernel_free(context, handle);
        vnpu_report(context, "vnpu delegate: init: out of memory");
        return NULL;
    }
    partition->handle = (int)(intptr_t)handle;
    partition->fd = -1;
    return partition;
}

/* Python is finalizing: the process is ending. From then on a kernel's free leaves Python and the
   kernel's record alone: once the modules are torn down cffi cannot call the delegate's Python (it
   prints that def_extern() was not called), and Python's side of the kernel still points to the
   record (the delegate's destroy, later in the finalization, writes to it). */
static int vnpu_python_finalizing(void)
{
#if PY_VERSION_HEX >= 0x030D0000
    return Py_IsFinalizing();
#else
    return _Py_IsFinalizing();
#endif
}

static void vnpu_free(TfLiteContext *context, void *buffer)
{
    vnpu_partition *partition = buffer;

    if (!partition)
        return;
    if (vnpu_python_finalizing())
        return;
    vnpu_kernel_free(context, (void *)(intptr_t)partition->handle);
    free(partition);
}

/* libdrm's rule: an ioctl a signal interrupted is made again (SUBMIT queues nothing before it
   can be interrupted; BO_WAIT's deadline is absolute). Returns 0 or the errno. */
static int vnpu_ioctl(int fd, unsigned long request, void *arg)
{
    int ret;

    do {
        ret = ioctl(fd, request, arg);
    } while (ret == -1 && errno == EINTR);
    return ret == -1 ? errno : 0;
}

/* A signal's Python handler that a callback of the invoke held back (vnpu_deferred, set by
   plugin._defer) runs here, in the caller's frame, once the runtime's invoke has returned to Python:
   a pending call runs at the first bytecode the main thread executes, and while it is pending the
   invoke's remaining vnpu kernels make no Python call that could run it earlier. */
int vnpu_deferred;                       /* 0 none, 1 held back, 2 its pending call is queued */

static int vnpu_run_deferred(void *unused)
{
    PyObject *plugin, *result = NULL;

    (void)unused;
    vnpu_deferred = 0;
    plugin = PyImport_ImportModule("delegate_teflon.plugin");
    if (plugin) {
        result = PyObject_CallMethod(plugin, "_run_deferred", NULL);
        Py_DECREF(plugin);
    }
    if (!result) {
        /* The handler's exception, raised in the caller's frame without the delegate's frames. */
        PyObject *type, *value, *traceback;

        PyErr_Fetch(&type, &value, &traceback);
        PyErr_NormalizeException(&type, &value, &traceback);
        Py_XDECREF(traceback);
        if (value)
            PyException_SetTraceback(value, Py_None);
        PyErr_Restore(type, value, NULL);
        return -1;
    }
    Py_DECREF(result);
    return 0;
}

/* After a Python callback of the invoke: a held-back handler ends the invoke (its outputs are
   left as they are; the runtime's nodes after it still run) and runs once it has returned. */
static TfLiteStatus vnpu_after_python(TfLiteStatus status)
{
    if (vnpu_deferred == 1 && Py_AddPendingCall(vnpu_run_deferred, NULL) == 0)
        vnpu_deferred = 2;
    return vnpu_deferred ? 0 : status;
}

/* A kernel's invoke. Once Python has run one and prepared the next (the arena's copies, the
   SUBMIT and BO_WAIT arguments), an invoke whose tensors are still where they were is this
   function alone: copy in, SUBMIT and BO_WAIT on the accel node (on another backend, one call into
   Python's submit), copy out. Anything else is Python's invoke, which prepares again. */
static TfLiteStatus vnpu_invoke(TfLiteContext *context, TfLiteNode *node)
{
    vnpu_partition *p = node->user_data;
    struct drm_vnpu_bo_wait *wait;
    struct timespec now;
    int i, error;

    if (vnpu_deferred)
        return vnpu_after_python(0);     /* an interrupted invoke: the rest is skipped */
    if (!p || !p->ready)
        return vnpu_after_python(vnpu_kernel_invoke(context, node));
    for (i = 0; i < p->io_count; i++)
        if (context->tensors[p->io_tensors[i]].data != p->io_data[i])
            return vnpu_after_python(vnpu_kernel_invoke(context, node));
    for (i = 0; i < p->in_count; i++)
        memcpy(p->copies_in[i].dst, p->copies_in[i].src, p->copies_in[i].size);
    if (p->fd < 0) {
        error = vnpu_kernel_run(context, p->handle);
        if (error || vnpu_deferred)
            return vnpu_after_python(error);
    } else {
        error = vnpu_ioctl(p->fd, DRM_IOCTL_VNPU_SUBMIT, p->submit);
        if (error)
            return vnpu_after_python(
                vnpu_kernel_failed(context, p->handle, DRM_IOCTL_VNPU_SUBMIT, error, 0, 0));
        wait = p->wait;
        clock_gettime(CLOCK_MONOTONIC, &now);
        wait->timeout_ns = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec + p->timeout_ns;
        wait->job_status = 0;
        wait->fault_va = 0;
        error = vnpu_ioctl(p->fd, DRM_IOCTL_VNPU_BO_WAIT, wait);
        if (error || wait->job_status)
            return vnpu_after_python(
                vnpu_kernel_failed(context, p->handle, DRM_IOCTL_VNPU_BO_WAIT, error,
                                   error ? 0 : wait->job_status, error ? 0 : wait->fault_va));
    }
    for (i = 0; i < p->out_count; i++)
        memcpy(p->copies_out[i].dst, p->copies_out[i].src, p->copies_out[i].size);
    p->c_invokes++;
    return 0;
}

/* Fill one registration layout: zero everything, then set the fields every layout has. */
#define VNPU_FILL(reg) do {                                  \
        memset(&(reg), 0, sizeof(reg));                      \
        (reg).init = (void *)vnpu_init;                      \
        (reg).free = (void *)vnpu_free;                      \
        (reg).prepare = (void *)vnpu_kernel_prepare;         \
        (reg).invoke = (void *)vnpu_invoke;                  \
        (reg).builtin_code = VNPU_BUILTIN_DELEGATE;          \
        (reg).custom_name = "vnpu";                          \
        (reg).version = 1;                                   \
    } while (0)

/* ReplaceNodeSubsetsWithDelegateKernels takes the registration by value: the call must be made
   with the runtime's exact struct type, which C (not libffi) gets right for each layout. */
TfLiteStatus vnpu_replace_nodes(TfLiteContext *context, int registration_layout,
                                const TfLiteIntArray *nodes, TfLiteDelegate *delegate)
{
    switch (registration_layout) {
    case 1: {
        vnpu_registration_v1 reg;
        VNPU_FILL(reg);
        return ((TfLiteStatus (*)(TfLiteContext *, vnpu_registration_v1, const TfLiteIntArray *,
                                  TfLiteDelegate *))context->ReplaceNodeSubsetsWithDelegateKernels)(
            context, reg, nodes, delegate);
    }
    case 3: {
        vnpu_registration_v3 reg;
        VNPU_FILL(reg);
        return ((TfLiteStatus (*)(TfLiteContext *, vnpu_registration_v3, const TfLiteIntArray *,
                                  TfLiteDelegate *))context->ReplaceNodeSubsetsWithDelegateKernels)(
            context, reg, nodes, delegate);
    }
    case 4: {
        vnpu_registration_v4 reg;
        VNPU_FILL(reg);
        return ((TfLiteStatus (*)(TfLiteContext *, vnpu_registration_v4, const TfLiteIntArray *,
                                  TfLiteDelegate *))context->ReplaceNodeSubsetsWithDelegateKernels)(
            context, reg, nodes, delegate);
    }
    default:
        return 1;
    }
}

/* ReportError is variadic: cffi cannot pass through a printf format safely, C can. */
void vnpu_report(TfLiteContext *context, const char *message)
{
    if (context && context->ReportError)
        ((void (*)(TfLiteContext *, const char *, ...))context->ReportError)(context, "%s", message);
}

/* The file name of the shared object that holds `address` (which runtime owns a function). */
const char *vnpu_object_of(const void *address)
{
    Dl_info info;
    if (address && dladdr(address, &info) && info.dli_fname)
        return info.dli_fname;
    return NULL;
}

void vnpu_call_report_error(void (*report_error)(const char *), const char *message)
{
    if (report_error)
        report_error(message);
}

/* context->ResizeTensor takes ownership of the new dims, which the runtime frees with free():
   they are malloc'ed here, as TfLiteIntArrayCreate does. */
TfLiteStatus vnpu_resize_tensor(TfLiteContext *context, int tensor, int rank, const int *dims)
{
    TfLiteIntArray *shape = malloc(sizeof(TfLiteIntArray) + (size_t)rank * sizeof(int));
    if (!shape)
        return 1;
    shape->size = rank;
    memcpy(shape->data, dims, (size_t)rank * sizeof(int));
    return ((TfLiteStatus (*)(TfLiteContext *, TfLiteTensor *, TfLiteIntArray *))context->ResizeTensor)(
        context, &context->tensors[tensor], shape);
}
"""
)

CDEF = TYPES + PARTITION_TYPES + HELPERS + CALLBACKS

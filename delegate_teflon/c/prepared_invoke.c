// SPDX-License-Identifier: MIT
/*
 * libteflon.so's C: the invoke Python prepared (copies, and the job's run, libaccel's
 * vnpu_prepared_run(), without Python), the by-value registration call, and the helpers Python calls. It is compiled as one translation unit
 * with cffi's generated code (delegate_teflon.build), which defines the extern "Python" callbacks
 * declared static below and includes Python.h first.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <Python.h>
#include <dlfcn.h>
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "drm/vnpu_accel.h"
#include "prepared_run.h"
#include "teflon_abi.h"

/* The build passes -Wno-unused-parameter for cffi's generated code around this file; here it is an error. */
#pragma GCC diagnostic push
#pragma GCC diagnostic error "-Wunused-parameter"

/* The callbacks written in Python (delegate_teflon.plugin; cffi's extern "Python"). */
static TfLiteStatus vnpu_delegate_prepare(TfLiteContext *context, TfLiteDelegate *delegate);
static void *vnpu_kernel_init(TfLiteContext *context, const char *buffer, size_t length);
static void vnpu_kernel_free(TfLiteContext *context, void *buffer);
static TfLiteStatus vnpu_kernel_prepare(TfLiteContext *context, TfLiteNode *node);
static TfLiteStatus vnpu_kernel_invoke(TfLiteContext *context, TfLiteNode *node);
static TfLiteStatus vnpu_kernel_run(TfLiteContext *context, int handle);
static TfLiteStatus vnpu_kernel_failed(TfLiteContext *context, int handle, int result, int step);
static TfLiteDelegate *vnpu_plugin_create(char **options_keys, char **options_values, size_t num_options,
                                          void (*report_error)(const char *));
static void vnpu_plugin_destroy(TfLiteDelegate *delegate);

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
   function alone: copy in, the job's run on the accel node (vnpu_prepared_run(); on another
   backend, one call into Python's submit), copy out. Anything else is Python's invoke, which
   prepares again. A failed run's exception is Python's (vnpu_kernel_failed). */
static TfLiteStatus vnpu_invoke(TfLiteContext *context, TfLiteNode *node)
{
    vnpu_partition *p = node->user_data;
    int i, error, step;

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
        step = VNPU_RUN_SUBMIT;
        error = vnpu_prepared_run(p->fd, p->submit, p->wait, p->timeout_ns, VNPU_RUN_RESTART, &step);
        if (error)
            return vnpu_after_python(vnpu_kernel_failed(context, p->handle, error, step));
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

#pragma GCC diagnostic pop

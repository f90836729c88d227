// SPDX-License-Identifier: MIT
/*
 * libteflon.so's exported plugin entry points (TFLite's external_delegate_adaptor.cc): in a host
 * without Python they first start the interpreter the library was built for, then call the Python
 * plugin's create and destroy (vnpu_start_python: python_start.c). Every failure on the way goes to
 * stderr and to report_error. Compiled after prepared_invoke.c and python_start.c, in one unit.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

/* The build passes -Wno-unused-parameter for cffi's generated code around this file; here it is an error. */
#pragma GCC diagnostic push
#pragma GCC diagnostic error "-Wunused-parameter"

TfLiteDelegate *tflite_plugin_create_delegate(char **options_keys, char **options_values,
                                              size_t num_options, void (*report_error)(const char *))
{
    pthread_mutex_lock(&vnpu_start_lock);
    if (vnpu_started == 0) {
        vnpu_started = vnpu_start_python() == 0 ? 1 : -1;
        if (vnpu_started == 1 && cffi_start_python() != 0) {
            snprintf(vnpu_start_error, sizeof vnpu_start_error,
                     "vnpu delegate: the delegate's Python code did not load (Python home %s; "
                     "the traceback is on stderr)", VNPU_PYTHON_HOME);
            vnpu_started = -1;
        }
    }
    pthread_mutex_unlock(&vnpu_start_lock);
    if (vnpu_started < 0) {
        fprintf(stderr, "%s\n", vnpu_start_error);
        if (report_error)
            report_error(vnpu_start_error);
        return NULL;
    }
    return vnpu_plugin_create(options_keys, options_values, num_options, report_error);
}

void tflite_plugin_destroy_delegate(TfLiteDelegate *delegate)
{
    if (delegate && vnpu_started > 0)
        vnpu_plugin_destroy(delegate);
}

#pragma GCC diagnostic pop

// SPDX-License-Identifier: MIT
/*
 * libteflon.so's exported plugin entry points (TFLite's external_delegate_adaptor.cc): in a host
 * without Python they first start the interpreter the library was built for, then call the Python
 * plugin's create and destroy. Every failure on the way goes to stderr and to report_error.
 * Compiled after prepared_invoke.c, in the same translation unit.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

/* The build passes -Wno-unused-parameter for cffi's generated code around this file; here it is an error. */
#pragma GCC diagnostic push
#pragma GCC diagnostic error "-Wunused-parameter"

/* The Python home the library starts in a host without Python; $PYTHONHOME overrides it. */
#ifndef VNPU_PYTHON_HOME
#error "VNPU_PYTHON_HOME: the build defines it (delegate_teflon.build)"
#endif

static pthread_mutex_t vnpu_start_lock = PTHREAD_MUTEX_INITIALIZER;
static int vnpu_started;                 /* 0 not yet, 1 running, -1 failed */
static char vnpu_start_error[1024];

/* Python's own start, for a host that has none. */
static int vnpu_start_python(void)
{
    Dl_info info;
    PyConfig config;
    PyStatus status;
    const char *home = getenv("PYTHONHOME") ? getenv("PYTHONHOME") : VNPU_PYTHON_HOME;

    if (Py_IsInitialized())
        return 0;                        /* a Python host: the delegate joins its interpreter */
    /* A host that dlopen()s us RTLD_LOCAL loads libpython as our private dependency, but Python's
       extension modules (_cffi_backend, numpy) look up the Py* symbols globally: make them global. */
    if (!dladdr((void *)&Py_IsInitialized, &info) || !info.dli_fname ||
        !dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_GLOBAL)) {
        snprintf(vnpu_start_error, sizeof vnpu_start_error,
                 "vnpu delegate: cannot make libpython's symbols global: %s", dlerror());
        return -1;
    }
    PyConfig_InitPythonConfig(&config);
    config.install_signal_handlers = 0;  /* the host's signals stay the host's */
    config.parse_argv = 0;
    status = PyConfig_SetBytesString(&config, &config.home, home);
    if (!PyStatus_Exception(status))
        status = Py_InitializeFromConfig(&config);
    PyConfig_Clear(&config);
    if (PyStatus_Exception(status)) {
        snprintf(vnpu_start_error, sizeof vnpu_start_error,
                 "vnpu delegate: cannot start Python (home %s): %s", home,
                 status.err_msg ? status.err_msg : "exit requested");
        return -1;
    }
    PySys_SetObject("_vnpu_teflon_embedded", Py_True);
    PyEval_SaveThread();                 /* the callbacks take the GIL when they run */
    return 0;
}

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

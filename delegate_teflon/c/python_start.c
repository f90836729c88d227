// SPDX-License-Identifier: MIT
/*
 * Python's start for a library built with cffi's embedding mode (libteflon.so, the LiteRT vendor
 * libraries): vnpu_start_python() starts the Python the library was built for in a host that has
 * none (a C or C++ program), or returns 0 at once in a Python host. Errors land in
 * vnpu_start_error. Compiled in the same unit as cffi's generated code, which includes Python.h.
 *
 * The build defines: VNPU_PYTHON_HOME (the Python home; $PYTHONHOME overrides it), VNPU_START_LABEL
 * (the library's name in messages) and VNPU_START_FLAG (the sys attribute set to True when the
 * library started Python, which tells its init code it runs embedded).
 */
#include <Python.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#if !defined(VNPU_PYTHON_HOME) || !defined(VNPU_START_LABEL) || !defined(VNPU_START_FLAG)
#error "VNPU_PYTHON_HOME, VNPU_START_LABEL and VNPU_START_FLAG: the build defines them"
#endif

#pragma GCC diagnostic push
#pragma GCC diagnostic error "-Wunused-parameter"

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
        return 0;                        /* a Python host: the library joins its interpreter */
    /* A host that dlopen()s us RTLD_LOCAL loads libpython as our private dependency, but Python's
       extension modules (_cffi_backend, numpy) look up the Py* symbols globally: make them global. */
    if (!dladdr((void *)&Py_IsInitialized, &info) || !info.dli_fname ||
        !dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_GLOBAL)) {
        snprintf(vnpu_start_error, sizeof vnpu_start_error,
                 VNPU_START_LABEL ": cannot make libpython's symbols global: %s", dlerror());
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
                 VNPU_START_LABEL ": cannot start Python (home %s): %s", home,
                 status.err_msg ? status.err_msg : "exit requested");
        return -1;
    }
    PySys_SetObject(VNPU_START_FLAG, Py_True);
    PyEval_SaveThread();                 /* the callbacks take the GIL when they run */
    return 0;
}

#pragma GCC diagnostic pop

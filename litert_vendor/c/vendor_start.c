// SPDX-License-Identifier: MIT
/*
 * Python's start for both LiteRT vendor libraries: vnpu_ensure_python() starts the Python the
 * library was built for (vnpu_start_python, delegate_teflon/c/python_start.c) once, then cffi's
 * embedded module, whose init code imports the library's Python half; vnpu_library_file() tells
 * that init code where the library is. Compiled after
 * python_start.c, in one unit with cffi's generated code (litert_vendor.build).
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

#include "vnpu_vendor.h"

/* 0 when Python and the library's module run; -1 (and one line on stderr) when they cannot. */
static int vnpu_ensure_python(void)
{
    pthread_mutex_lock(&vnpu_start_lock);
    if (vnpu_started == 0) {
        vnpu_started = vnpu_start_python() == 0 ? 1 : -1;
        if (vnpu_started == 1 && cffi_start_python() != 0) {
            snprintf(vnpu_start_error, sizeof vnpu_start_error,
                     "%s: its Python code did not load (Python home %s; the traceback is on stderr)",
                     VNPU_LIBRARY, VNPU_PYTHON_HOME);
            vnpu_started = -1;
        }
    }
    pthread_mutex_unlock(&vnpu_start_lock);
    if (vnpu_started < 0) {
        fprintf(stderr, "%s\n", vnpu_start_error);
        return -1;
    }
    return 0;
}

/* This library's own file, which the init code finds the installed package from. */
const char *vnpu_library_file(void)
{
    Dl_info info;

    if (dladdr((void *)&vnpu_library_file, &info) && info.dli_fname)
        return info.dli_fname;
    return NULL;
}

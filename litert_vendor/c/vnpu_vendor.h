/* SPDX-License-Identifier: MIT */
/*
 * What vnpu's two LiteRT vendor libraries share (libLiteRtCompilerPlugin_Vnpu.so, compiler_plugin.c;
 * libLiteRtDispatch_Vnpu.so, dispatch.c): LiteRT's vendor C API (vnpu_litert.h), the constants the
 * build defines from litert_vendor/abi.py, the record a Compile hands back, and the helper the init
 * code finds the library's own file with.
 *
 * The block between the interface markers is also cffi's cdef (litert_vendor.build reads it), so it
 * holds only what cffi parses: declarations, no preprocessor lines.
 */
#ifndef VNPU_VENDOR_H
#define VNPU_VENDOR_H

#include <stddef.h>

#include "vnpu_litert.h"

#if !defined(VNPU_API_MAJOR) || !defined(VNPU_API_MINOR) || !defined(VNPU_API_PATCH) || \
	!defined(VNPU_ABI_MAJOR) || !defined(VNPU_COMPILER_CONTEXT_SIZE) || \
	!defined(VNPU_SOC_MANUFACTURER) || !defined(VNPU_SOC_MODEL) || !defined(VNPU_SDK_VERSION) || \
	!defined(VNPU_LIBRARY)
#error "VNPU_API_*, VNPU_ABI_MAJOR, VNPU_COMPILER_CONTEXT_SIZE, VNPU_SOC_*, VNPU_SDK_VERSION, VNPU_LIBRARY: the build defines them"
#endif

/* --- interface: begin (cffi's cdef reads from here to the end marker) */
/* The compiled result a Compile returns: Python fills it and keeps it alive until LiteRT destroys it. */
typedef struct vnpu_compiled_result {
    size_t num_byte_code;
    const void *const *byte_code;
    const size_t *byte_code_size;
    size_t num_calls;
    const char *const *call_info;          /* a partition's function name, NUL-terminated */
    const size_t *call_info_size;          /* without the NUL */
    const size_t *call_byte_code;          /* which byte code module a call runs */
} vnpu_compiled_result;

/* The path of the library this is compiled into (vendor_start.c), or NULL. */
const char *vnpu_library_file(void);
/* --- interface: end --- */

#endif /* VNPU_VENDOR_H */

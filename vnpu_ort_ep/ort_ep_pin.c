// SPDX-License-Identifier: MIT
/*
 * libvnpu_ort_ep.so's own C: it pins the library in memory when it is loaded.
 *
 * onnxruntime's unregister_execution_provider_library dlclose()s the library, but the Python
 * module it holds (sys.modules["_vnpu_ort_ep"], whose code and callbacks are this library)
 * outlives that: with RTLD_NODELETE a later call into it, or Python's own teardown, never jumps
 * into an unmapped object. Everything else the library does is Python (vnpu_ort_ep.plugin).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include "vnpu_ort_abi.h"

__attribute__((constructor)) static void vnpu_ort_pin(void)
{
	Dl_info info;

	if (dladdr((void *)&vnpu_ort_pin, &info) && info.dli_fname)
		dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
}

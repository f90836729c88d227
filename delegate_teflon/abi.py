"""The TFLite C ABI the delegate speaks: ``c/teflon_abi.h``, whose interface block is also cffi's cdef.

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

from pathlib import Path

from vnpu_common.cbuild import PREPARED_RUN_C_DIR, interface

C_DIR = Path(__file__).resolve().with_name("c")
HEADER = C_DIR / "teflon_abi.h"
# The C files of libteflon.so, in the order they are compiled as one unit after cffi's prologue; the
# last is libaccel's run of a prepared job, which the invoke calls (one source with libvnpu_run.so).
SOURCES = (
    C_DIR / "prepared_invoke.c",
    C_DIR / "python_start.c",
    C_DIR / "embedding_host.c",
    PREPARED_RUN_C_DIR / "prepared_run.c",
)
# The directories of the headers those include: TFLite's ABI (teflon_abi.h), the prepared run's.
INCLUDE_DIRS = (C_DIR, PREPARED_RUN_C_DIR)
# Python's start, which every library built with cffi's embedding mode shares (litert_vendor too).
PYTHON_START = C_DIR / "python_start.c"

# The callbacks implemented in Python: cffi's own syntax (extern "Python"; each takes the GIL, which
# Invoke released), so the minimal cdef stays here; prepared_invoke.c declares their C side.
CALLBACKS = r"""
extern "Python" TfLiteStatus vnpu_delegate_prepare(TfLiteContext *context, TfLiteDelegate *delegate);
extern "Python" void *vnpu_kernel_init(TfLiteContext *context, const char *buffer, size_t length);
extern "Python" void vnpu_kernel_free(TfLiteContext *context, void *buffer);
extern "Python" TfLiteStatus vnpu_kernel_prepare(TfLiteContext *context, TfLiteNode *node);
extern "Python" TfLiteStatus vnpu_kernel_invoke(TfLiteContext *context, TfLiteNode *node);
extern "Python" TfLiteStatus vnpu_kernel_run(TfLiteContext *context, int handle);
extern "Python" TfLiteStatus vnpu_kernel_failed(TfLiteContext *context, int handle, int result, int step);
extern "Python" TfLiteDelegate *vnpu_plugin_create(char **options_keys, char **options_values,
                                                   size_t num_options, void (*report_error)(const char *));
extern "Python" void vnpu_plugin_destroy(TfLiteDelegate *delegate);
"""


def cdef() -> str:
    """cffi's declarations: the header's interface block (types and C helpers), then the callbacks."""
    return interface(HEADER.read_text()) + CALLBACKS

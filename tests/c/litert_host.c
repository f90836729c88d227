/* A C host with no Python: runs a .tflite model through LiteRT's CompiledModel C API (libLiteRt.so
 * from the ai-edge-litert wheel) with vnpu, and compares every output with reference bytes.
 *
 *     litert_host npu LIBDIR MODEL VNPU_OPTIONS INPUT_FILE... REFERENCE_FILE...
 *     litert_host delegate LIBTEFLON MODEL DEVICE INPUT_FILE... REFERENCE_FILE...
 *
 * npu: vnpu as LiteRT's NPU vendor. LIBDIR holds libLiteRtCompilerPlugin_Vnpu.so and
 * libLiteRtDispatch_Vnpu.so: it is given to the environment as both the compiler plugin and the
 * dispatch library directory, so a plain .tflite is compiled just in time and an AOT-compiled one
 * (DISPATCH_OP nodes) runs as it is. VNPU_OPTIONS is the payload of the "vnpu" opaque options added
 * to the compilation options ("device=/dev/accel/accel0"); an empty string adds none.
 *
 * delegate: libteflon.so, the TFLite external delegate, inside LiteRT. libLiteRt.so exports no
 * TfLiteInterpreter* API, so the delegate reaches the runtime as an accelerator this host registers:
 * its CreateDelegate callback calls tflite_plugin_create_delegate ("device" = DEVICE) and wraps the
 * TfLiteDelegate with LiteRtWrapDelegate. LiteRT 2.3 applies an NPU-class accelerator only to a
 * model holding DISPATCH_OP nodes, so this one does its own JIT compilation under the GPU class
 * and the options ask for that class alone: LiteRT's CPU accelerator (XNNPACK) is not applied, and
 * compilation fails ("Some ops are not accelerated") unless the delegate takes every node.
 *
 * Either way the compilation options ask for one accelerator class alone, so "fully accelerated:
 * yes" means no node ran on LiteRT's CPU kernels. One raw file per signature input (written into
 * the input buffer as is) and one per output (the bytes it must equal). Exit status: 0 all outputs
 * equal, 1 some differ, 2 setup failure.
 *
 * The declarations are LiteRT 2.3's litert/c headers (litert_common.h, litert_any.h,
 * litert_environment_options.h, litert_environment.h, litert_model.h, litert_options.h,
 * litert_opaque_options.h, litert_compiled_model.h, litert_tensor_buffer.h,
 * internal/litert_accelerator_registration.h, internal/litert_delegate_wrapper.h), which the wheel
 * does not ship.
 */
#include <dlfcn.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- litert/c declarations (LiteRT 2.3) ---- */
typedef int LiteRtStatus; /* kLiteRtStatusOk = 0 */
typedef int LiteRtHwAcceleratorSet;
typedef size_t LiteRtParamIndex;
enum { kLiteRtHwAcceleratorGpu = 1 << 1, kLiteRtHwAcceleratorNpu = 1 << 2 };
enum { kLiteRtTensorBufferLockModeRead = 0, kLiteRtTensorBufferLockModeWrite = 1 };
enum { kLiteRtEnvOptionTagCompilerPluginLibraryDir = 0, kLiteRtEnvOptionTagDispatchLibraryDir = 1 };
enum { kLiteRtAnyTypeString = 8 };

typedef struct LiteRtEnvironmentT *LiteRtEnvironment;
typedef struct LiteRtModelT *LiteRtModel;
typedef struct LiteRtSignatureT *LiteRtSignature;
typedef struct LiteRtTensorT *LiteRtTensor;
typedef struct LiteRtOptionsT *LiteRtOptions;
typedef struct LiteRtOpaqueOptionsT *LiteRtOpaqueOptions;
typedef struct LiteRtCompiledModelT *LiteRtCompiledModel;
typedef struct LiteRtTensorBufferT *LiteRtTensorBuffer;
typedef struct LiteRtTensorBufferRequirementsT *LiteRtTensorBufferRequirements;
typedef struct LiteRtAcceleratorT *LiteRtAccelerator;
typedef const struct LiteRtAcceleratorT *LiteRtAcceleratorConst;
typedef struct LiteRtDelegateWrapperT *LiteRtDelegateWrapper;
typedef struct LiteRtRuntimeContext LiteRtRuntimeContext;
typedef struct { int major, minor, patch; } LiteRtApiVersion;
typedef struct {
    int type; /* LiteRtAnyType */
    union {
        bool bool_value;
        int64_t int_value;
        double real_value;
        const char *str_value;
        const void *ptr_value;
    };
} LiteRtAny;
typedef struct {
    int tag; /* LiteRtEnvOptionTag */
    LiteRtAny value;
} LiteRtEnvOption; /* 24 bytes */
typedef struct {
    unsigned int rank : 7;
    unsigned int has_strides : 1;
    int32_t dimensions[8];
    uint32_t strides[8];
} LiteRtLayout;
typedef struct {
    int element_type;
    LiteRtLayout layout;
} LiteRtRankedTensorType;

LiteRtStatus LiteRtCreateEnvironment(int num_options, const LiteRtEnvOption *options,
                                     LiteRtEnvironment *environment);
void LiteRtDestroyEnvironment(LiteRtEnvironment environment);
LiteRtStatus LiteRtCreateAccelerator(LiteRtAccelerator *accelerator);
LiteRtStatus LiteRtSetAcceleratorGetName(LiteRtAccelerator accelerator,
                                         LiteRtStatus (*GetName)(LiteRtAcceleratorConst, const char **));
LiteRtStatus LiteRtSetAcceleratorGetVersion(LiteRtAccelerator accelerator,
                                            LiteRtStatus (*GetVersion)(LiteRtAcceleratorConst,
                                                                       LiteRtApiVersion *));
LiteRtStatus LiteRtSetAcceleratorGetHardwareSupport(
    LiteRtAccelerator accelerator, LiteRtStatus (*GetHardwareSupport)(LiteRtAcceleratorConst,
                                                                      LiteRtHwAcceleratorSet *));
LiteRtStatus LiteRtSetDelegateFunction(
    LiteRtAccelerator accelerator,
    LiteRtStatus (*CreateDelegate)(LiteRtRuntimeContext *runtime_context, LiteRtEnvironment env,
                                   LiteRtAcceleratorConst accelerator, LiteRtOptions options,
                                   LiteRtDelegateWrapper *delegate));
LiteRtStatus LiteRtSetIsAcceleratorDelegateResponsibleForJitCompilation(
    LiteRtAccelerator accelerator,
    LiteRtStatus (*IsResponsible)(LiteRtAcceleratorConst, bool *does_jit_compilation));
LiteRtStatus LiteRtRegisterAccelerator(LiteRtEnvironment environment, LiteRtAccelerator accelerator,
                                       void *data, void (*ReleaseData)(void *));
LiteRtStatus LiteRtWrapDelegate(void *tflite_opaque_delegate, void (*deleter)(void *),
                                LiteRtDelegateWrapper *wrapper);
LiteRtStatus LiteRtCreateModelFromFile(LiteRtEnvironment environment, const char *filename,
                                       LiteRtModel *model);
void LiteRtDestroyModel(LiteRtModel model);
LiteRtStatus LiteRtGetModelSignature(LiteRtModel model, LiteRtParamIndex signature_index,
                                     LiteRtSignature *signature);
LiteRtStatus LiteRtGetNumSignatureInputs(LiteRtSignature signature, LiteRtParamIndex *num_inputs);
LiteRtStatus LiteRtGetNumSignatureOutputs(LiteRtSignature signature, LiteRtParamIndex *num_outputs);
LiteRtStatus LiteRtGetSignatureInputTensorByIndex(LiteRtSignature signature, LiteRtParamIndex index,
                                                  LiteRtTensor *tensor);
LiteRtStatus LiteRtGetSignatureOutputTensorByIndex(LiteRtSignature signature, LiteRtParamIndex index,
                                                   LiteRtTensor *tensor);
LiteRtStatus LiteRtGetRankedTensorType(LiteRtTensor tensor, LiteRtRankedTensorType *type);
LiteRtStatus LiteRtCreateOptions(LiteRtOptions *options);
void LiteRtDestroyOptions(LiteRtOptions options);
LiteRtStatus LiteRtSetOptionsHardwareAccelerators(LiteRtOptions options,
                                                  LiteRtHwAcceleratorSet hardware_accelerators);
LiteRtStatus LiteRtCreateOpaqueOptions(const char *payload_identifier, void *payload_data,
                                       void (*payload_destructor)(void *payload_data),
                                       LiteRtOpaqueOptions *options);
LiteRtStatus LiteRtAddOpaqueOptions(LiteRtOptions options, LiteRtOpaqueOptions opaque_options);
LiteRtStatus LiteRtCreateCompiledModel(LiteRtEnvironment environment, LiteRtModel model,
                                       LiteRtOptions compilation_options,
                                       LiteRtCompiledModel *compiled_model);
void LiteRtDestroyCompiledModel(LiteRtCompiledModel compiled_model);
LiteRtStatus LiteRtCompiledModelIsNonCpuFullyAccelerated(LiteRtCompiledModel compiled_model,
                                                        bool *non_cpu_fully_accelerated);
LiteRtStatus LiteRtGetCompiledModelInputTensorLayout(LiteRtCompiledModel compiled_model,
                                                     LiteRtParamIndex signature_index,
                                                     LiteRtParamIndex input_index, LiteRtLayout *layout);
LiteRtStatus LiteRtGetCompiledModelOutputTensorLayouts(LiteRtCompiledModel compiled_model,
                                                       LiteRtParamIndex signature_index,
                                                       size_t num_layouts, LiteRtLayout *layouts,
                                                       bool update_allocation);
LiteRtStatus LiteRtGetCompiledModelInputBufferRequirements(
    LiteRtCompiledModel compiled_model, LiteRtParamIndex signature_index,
    LiteRtParamIndex input_index, LiteRtTensorBufferRequirements *requirements);
LiteRtStatus LiteRtGetCompiledModelOutputBufferRequirements(
    LiteRtCompiledModel compiled_model, LiteRtParamIndex signature_index,
    LiteRtParamIndex output_index, LiteRtTensorBufferRequirements *requirements);
LiteRtStatus LiteRtRunCompiledModel(LiteRtCompiledModel compiled_model,
                                    LiteRtParamIndex signature_index, size_t num_input_buffers,
                                    LiteRtTensorBuffer *input_buffers, size_t num_output_buffers,
                                    LiteRtTensorBuffer *output_buffers);
LiteRtStatus LiteRtCreateManagedTensorBufferFromRequirements(
    LiteRtEnvironment env, const LiteRtRankedTensorType *tensor_type,
    LiteRtTensorBufferRequirements requirements, LiteRtTensorBuffer *buffer);
void LiteRtDestroyTensorBuffer(LiteRtTensorBuffer buffer);
LiteRtStatus LiteRtGetTensorBufferPackedSize(LiteRtTensorBuffer buffer, size_t *size);
LiteRtStatus LiteRtLockTensorBuffer(LiteRtTensorBuffer buffer, void **host_mem_addr, int lock_mode);
LiteRtStatus LiteRtUnlockTensorBuffer(LiteRtTensorBuffer buffer);
/* ---- end of litert/c declarations ---- */

#define MAX_TENSORS 16

/* ---- delegate mode: libteflon.so as a GPU-class accelerator ---- */
static const char *device;
static void *(*plugin_create)(char **, char **, size_t, void (*)(const char *));
static void (*plugin_destroy)(void *);

static void report_error(const char *message) { fprintf(stderr, "report_error: %s\n", message); }

static LiteRtStatus get_name(LiteRtAcceleratorConst accelerator, const char **name)
{
    (void)accelerator;
    *name = "vnpu";
    return 0;
}

static LiteRtStatus get_version(LiteRtAcceleratorConst accelerator, LiteRtApiVersion *version)
{
    (void)accelerator;
    *version = (LiteRtApiVersion){1, 0, 0};
    return 0;
}

static LiteRtStatus get_hardware(LiteRtAcceleratorConst accelerator, LiteRtHwAcceleratorSet *hw)
{
    (void)accelerator;
    *hw = kLiteRtHwAcceleratorGpu;
    return 0;
}

static LiteRtStatus does_jit(LiteRtAcceleratorConst accelerator, bool *jit)
{
    (void)accelerator;
    *jit = true;
    return 0;
}

static LiteRtStatus create_delegate(LiteRtRuntimeContext *runtime_context, LiteRtEnvironment env,
                                    LiteRtAcceleratorConst accelerator, LiteRtOptions options,
                                    LiteRtDelegateWrapper *wrapper)
{
    (void)runtime_context, (void)env, (void)accelerator, (void)options;
    char *keys[] = {"device"}, *values[] = {(char *)device};
    void *delegate = plugin_create(keys, values, 1, report_error); /* a TfLiteDelegate * */
    if (!delegate)
        return 3; /* kLiteRtStatusErrorRuntimeFailure; report_error said why */
    fprintf(stderr, "litert_host: delegate created\n");
    LiteRtStatus status = LiteRtWrapDelegate(delegate, plugin_destroy, wrapper);
    if (status != 0)
        plugin_destroy(delegate);
    return status;
}

static long read_file(const char *path, void *dst, size_t size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    size_t n = fread(dst, 1, size, f);
    int extra = fgetc(f) != EOF;
    fclose(f);
    return extra ? (long)size + 1 : (long)n;
}

#define CHECK(call)                                                                     \
    do {                                                                                \
        LiteRtStatus status_ = (call);                                                  \
        if (status_ != 0) {                                                             \
            fprintf(stderr, "litert_host: %s failed with status %d\n", #call, status_); \
            return 2;                                                                   \
        }                                                                               \
    } while (0)

/* delegate mode: libteflon.so's entry points, and its accelerator registered with env; 0 or 2. */
static int register_delegate(LiteRtEnvironment env, const char *library)
{
    void *lib = dlopen(library, RTLD_LAZY | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "litert_host: %s\n", dlerror());
        return 2;
    }
    plugin_create = (void *(*)(char **, char **, size_t, void (*)(const char *)))dlsym(
        lib, "tflite_plugin_create_delegate");
    plugin_destroy = (void (*)(void *))dlsym(lib, "tflite_plugin_destroy_delegate");
    if (!plugin_create || !plugin_destroy) {
        fprintf(stderr, "litert_host: %s exports no TFLite external delegate\n", library);
        return 2;
    }
    LiteRtAccelerator accelerator;
    CHECK(LiteRtCreateAccelerator(&accelerator));
    CHECK(LiteRtSetAcceleratorGetName(accelerator, get_name));
    CHECK(LiteRtSetAcceleratorGetVersion(accelerator, get_version));
    CHECK(LiteRtSetAcceleratorGetHardwareSupport(accelerator, get_hardware));
    CHECK(LiteRtSetDelegateFunction(accelerator, create_delegate));
    CHECK(LiteRtSetIsAcceleratorDelegateResponsibleForJitCompilation(accelerator, does_jit));
    CHECK(LiteRtRegisterAccelerator(env, accelerator, NULL, NULL));
    return 0;
}

int main(int argc, char **argv)
{
    bool npu = argc >= 2 && strcmp(argv[1], "npu") == 0;
    if (argc < 5 || (!npu && strcmp(argv[1], "delegate") != 0)) {
        fprintf(stderr, "usage: %s npu LIBDIR MODEL VNPU_OPTIONS INPUT... REFERENCE...\n"
                        "       %s delegate LIBTEFLON MODEL DEVICE INPUT... REFERENCE...\n",
                argv[0], argv[0]);
        return 2;
    }
    const char *lib = argv[2], *model_path = argv[3], *arg = argv[4];
    char **files = argv + 5;
    int n_files = argc - 5;

    LiteRtEnvironment env;
    if (npu) {
        LiteRtEnvOption env_options[2] = {
            {kLiteRtEnvOptionTagCompilerPluginLibraryDir, {kLiteRtAnyTypeString, {.str_value = lib}}},
            {kLiteRtEnvOptionTagDispatchLibraryDir, {kLiteRtAnyTypeString, {.str_value = lib}}},
        };
        CHECK(LiteRtCreateEnvironment(2, env_options, &env));
    } else {
        CHECK(LiteRtCreateEnvironment(0, NULL, &env));
        device = arg;
        if (register_delegate(env, lib) != 0)
            return 2;
    }

    LiteRtModel model;
    CHECK(LiteRtCreateModelFromFile(env, model_path, &model));
    LiteRtSignature signature;
    CHECK(LiteRtGetModelSignature(model, 0, &signature));
    LiteRtParamIndex n_in, n_out;
    CHECK(LiteRtGetNumSignatureInputs(signature, &n_in));
    CHECK(LiteRtGetNumSignatureOutputs(signature, &n_out));
    if (n_in > MAX_TENSORS || n_out > MAX_TENSORS || (size_t)n_files != n_in + n_out) {
        fprintf(stderr, "litert_host: the model has %zu inputs and %zu outputs: give one file each\n",
                n_in, n_out);
        return 2;
    }

    LiteRtOptions options;
    CHECK(LiteRtCreateOptions(&options));
    CHECK(LiteRtSetOptionsHardwareAccelerators(options,
                                                npu ? kLiteRtHwAcceleratorNpu : kLiteRtHwAcceleratorGpu));
    if (npu && arg[0]) {
        /* LiteRT owns the payload from here and frees it with the options. */
        LiteRtOpaqueOptions vnpu;
        CHECK(LiteRtCreateOpaqueOptions("vnpu", strdup(arg), free, &vnpu));
        CHECK(LiteRtAddOpaqueOptions(options, vnpu));
    }
    LiteRtCompiledModel compiled;
    CHECK(LiteRtCreateCompiledModel(env, model, options, &compiled));
    bool on_npu = false;
    CHECK(LiteRtCompiledModelIsNonCpuFullyAccelerated(compiled, &on_npu));
    printf("fully accelerated: %s\n", on_npu ? "yes" : "no");

    /* The signature's tensor types may have a dynamic batch (-1); the compiled model's layouts are
     * the shapes it was allocated with. */
    LiteRtLayout output_layouts[MAX_TENSORS];
    CHECK(LiteRtGetCompiledModelOutputTensorLayouts(compiled, 0, n_out, output_layouts, false));
    LiteRtTensorBuffer inputs[MAX_TENSORS], outputs[MAX_TENSORS];
    for (size_t i = 0; i < n_in + n_out; i++) {
        bool is_in = i < n_in;
        size_t k = is_in ? i : i - n_in;
        LiteRtTensor tensor;
        LiteRtRankedTensorType type;
        LiteRtTensorBufferRequirements req; /* owned by the compiled model */
        if (is_in) {
            CHECK(LiteRtGetSignatureInputTensorByIndex(signature, k, &tensor));
            CHECK(LiteRtGetCompiledModelInputBufferRequirements(compiled, 0, k, &req));
        } else {
            CHECK(LiteRtGetSignatureOutputTensorByIndex(signature, k, &tensor));
            CHECK(LiteRtGetCompiledModelOutputBufferRequirements(compiled, 0, k, &req));
        }
        CHECK(LiteRtGetRankedTensorType(tensor, &type));
        if (is_in)
            CHECK(LiteRtGetCompiledModelInputTensorLayout(compiled, 0, k, &type.layout));
        else
            type.layout = output_layouts[k];
        CHECK(LiteRtCreateManagedTensorBufferFromRequirements(env, &type, req,
                                                              is_in ? &inputs[k] : &outputs[k]));
        if (is_in) {
            size_t size;
            void *host;
            CHECK(LiteRtGetTensorBufferPackedSize(inputs[k], &size));
            CHECK(LiteRtLockTensorBuffer(inputs[k], &host, kLiteRtTensorBufferLockModeWrite));
            long got = read_file(files[k], host, size);
            CHECK(LiteRtUnlockTensorBuffer(inputs[k]));
            if (got != (long)size) {
                fprintf(stderr, "litert_host: input %zu needs %zu bytes; %s has %s\n", k, size,
                        files[k], got < 0 ? "none (cannot read it)" : "another size");
                return 2;
            }
        }
    }

    CHECK(LiteRtRunCompiledModel(compiled, 0, n_in, inputs, n_out, outputs));

    int all_equal = 1;
    for (size_t k = 0; k < n_out; k++) {
        size_t size, differing = 0;
        void *host;
        CHECK(LiteRtGetTensorBufferPackedSize(outputs[k], &size));
        unsigned char *want = malloc(size + 1);
        long got = read_file(files[n_in + k], want, size);
        if (got != (long)size) {
            fprintf(stderr, "litert_host: output %zu has %zu bytes; reference %s has %s\n", k, size,
                    files[n_in + k], got < 0 ? "none (cannot read it)" : "another size");
            return 2;
        }
        CHECK(LiteRtLockTensorBuffer(outputs[k], &host, kLiteRtTensorBufferLockModeRead));
        for (size_t b = 0; b < size; b++)
            differing += ((unsigned char *)host)[b] != want[b];
        CHECK(LiteRtUnlockTensorBuffer(outputs[k]));
        free(want);
        printf("output %zu: %zu bytes, %zu differing\n", k, size, differing);
        all_equal &= differing == 0;
    }

    for (size_t k = 0; k < n_in; k++)
        LiteRtDestroyTensorBuffer(inputs[k]);
    for (size_t k = 0; k < n_out; k++)
        LiteRtDestroyTensorBuffer(outputs[k]);
    LiteRtDestroyCompiledModel(compiled); /* delegate mode: tflite_plugin_destroy_delegate */
    LiteRtDestroyOptions(options);
    LiteRtDestroyModel(model);
    LiteRtDestroyEnvironment(env);
    return all_equal ? 0 : 1;
}

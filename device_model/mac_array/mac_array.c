/* The NPU's MAC array: int8/uint8 CONV2D, DEPTHWISE_CONV2D and FULLY_CONNECTED with exact integer
 * accumulation and TFLite's requantization (numerics/ is the readable reference; a test checks
 * that both give identical bytes).
 *
 * Arithmetic model: accumulators are 32-bit and wrap modulo 2**32 (unsigned arithmetic, so no
 * undefined overflow). The sum of (x - x_zp) * (w - w_zp) modulo 2**32 does not depend on the
 * order of the additions, so every kernel below, however it is blocked or vectorised, gives the
 * reference's int32 accumulator bit for bit.
 *
 * Operands are "narrow" (int16) when every x - x_zp and w - w_zp fits in int16, which the Python
 * side decides from the dtypes and zero points; otherwise "wide" (int32) and only the generic
 * kernels run. Each kernel exists in a generic build and an AVX2 build of the same source
 * (a target attribute, not -march=native, so one binary serves every x86-64 host that shares the
 * cache); mac_cpu_isa() says which the running CPU can execute.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The build passes -Wno-unused-parameter for cffi's generated wrappers; here it is an error. */
#pragma GCC diagnostic push
#pragma GCC diagnostic error "-Wunused-parameter"

/* --- interface: begin (build.py hands this block to cffi's cdef: the one declaration of the types
 * and functions Python calls) --- */
struct mac_layer {
    int64_t n, h, w, cin;
    int64_t kh, kw, cout;
    int64_t stride_h, stride_w, dil_h, dil_w, pad_top, pad_left;
    int64_t out_h, out_w;
    int64_t depth_multiplier;
    int64_t kpad;     /* GEMM depth rounded up to even; depthwise: taps rounded up to even */
    int64_t cout_pad; /* channels rounded up to NR (GEMM) or DW_BLOCK (depthwise) */
    int32_t kind;
    int32_t wide;      /* operands are int32, not int16 */
    int32_t in_signed; /* input bytes are int8 (else uint8) */
    int32_t out_signed;
    int32_t input_zp;
    int32_t output_zp;
    int32_t lo, hi;         /* the activation clamp combined with the output dtype's range */
    int32_t zp_byte_ok;     /* input_zp is a value of the input dtype: padding can point at it */
    int32_t simple_quant;   /* no multiplier is INT32_MIN (SRDHM's one saturating case) */
    int32_t single_rounding; /* TFLITE_SINGLE_ROUNDING: one 64-bit product and one rounding shift */
    const void *packed;     /* weights - w_zp, packed (int16 or int32, see pack_* in __init__.py) */
    const int32_t *bias;    /* [cout] */
    const int32_t *multiplier;
    const int32_t *shift;
    /* The u8 x s8 operands of the AVX-512 VNNI GEMM (vpdpbusd), NULL when the layer does not
     * qualify (see conv_vnni): weights - w_zp as int8 [panel][k4 / 4][NR][4], and the bias with
     * -(x_zp + flip) * sum(w - w_zp) folded in, [cout_pad]. */
    const int8_t *packed8;
    const int32_t *bias8;
    int64_t k4;        /* GEMM depth (depthwise: taps) rounded up to a multiple of 4 */
    const int32_t *rq; /* [5][rq_n] per channel: left shift, right shift, 2**right - 1, its half, multiplier */
    const int32_t *dw_bias; /* depthwise: bias - input_zp * sum over taps of (w - w_zp), modulo 2**32, per
                             * channel: the bias of the fast kernels, which multiply raw inputs */
    int64_t rq_n;      /* channels in rq, bias8 and (depthwise) each tap of packed8 */
};

/* One parameter region of a bound layer: the n bytes at mem (the device's memory) and the copy
 * the layer's plan was built from. Or, with packed set (copy NULL), the layer's GEMM filter
 * [cout][K] whose bytes less the zero point zp are its packed8: MAC_CHECK_PACKED compares them with
 * packed8; MAC_CHECK_REPACK (every byte less zp is an int8, so no filter can leave the VNNI
 * kernel's range) packs them afresh for the VNNI kernel at each run and compares nothing, so the
 * job reads its weights once, as the hardware would. */
struct mac_check {
    const void *mem;
    const void *copy;
    size_t n;
    int32_t packed;
    int32_t zp;
};

/* A FULLY_CONNECTED whose filter is an activation (mac_run_dynamic): the plan's layer (geometry,
 * requantization, bias: its packed weights are not read) and the filter as it lies in memory, a
 * [rows][K] matrix with rows = shape[0] * shape[1] * shape[2] (the layer's cout) and K = shape[3]
 * (its cin), element (i0, i1, i2, k) at filter + i0 * strides[0] + ... + k * strides[3] bytes
 * (attention's keys read transposed, say). */
struct mac_dynamic {
    const struct mac_layer *layer;
    const void *filter;
    int64_t shape[4];
    int64_t strides[4];
    int32_t zp;
    int32_t filter_signed;
};

/* A pooling layer (mac_pool below). */
struct mac_pool {
    int64_t n, h, w, c;
    int64_t fh, fw, sh, sw, pt, pl, oh, ow;
    int32_t lo, hi;
    int32_t average;
    int32_t in_signed;
    int32_t isa; /* the C variant (MAC_ISA_*): AVX-512 takes MAXPOOL's bytes 64 at a time */
};

/* A softmax unit (mac_run_units): mac_softmax's arguments but its buffers. */
struct mac_softmax_unit {
    const int32_t *exps, *rescaled;
    int64_t rows, depth;
    int32_t in_signed, out_signed;
};

int mac_cpu_isa(void);
int mac_run(const struct mac_layer *L, const void *in, void *out, int isa);
int mac_equal(const void *a, const void *b, size_t n);
int mac_filter_equals_packed(const struct mac_layer *L, const void *mem, int32_t zp);
int mac_run_checked(const struct mac_layer *L, const void *in, void *out, int isa, const struct mac_check *checks,
                    int nchecks);
int mac_run_dynamic(const struct mac_dynamic *D, const void *in, void *out, int isa, const struct mac_check *checks,
                    int nchecks);
int mac_pool(const struct mac_pool *P, const void *in, void *out);
void mac_lookup(const uint8_t *a, const uint8_t *b, const void *table, void *out, size_t n, int esize, int fa,
                int fb);
void mac_lookup_strided(const uint8_t *a, const int64_t *sa, const uint8_t *b, const int64_t *sb,
                        const void *table, void *out, const int64_t *shape, int esize, int fa, int fb);
int mac_softmax(const void *in, void *out, int64_t rows, int64_t depth, int in_signed, int out_signed,
                const int32_t *exps, const int32_t *rescaled);
void mac_resize_bilinear(const void *in, void *out, const int64_t *dims, const int64_t *y0, const int64_t *y1,
                         const int64_t *dy, const int64_t *x0, const int64_t *x1, const int64_t *dx, int in_signed,
                         int single_rounding, int isa);
void mac_copy_strided(const uint8_t *src, const int64_t *ss, uint8_t *dst, const int64_t *ds, const int64_t *shape,
                      int esize);

/* One bound unit of a stream (mac_run_units): a layer (mac_run_checked; spec a struct mac_dynamic for
 * MAC_UNIT_DYNAMIC, mac_run_dynamic), a lookup (mac_lookup, or
 * mac_lookup_strided when shape is set), a pool (mac_pool), a strided copy (mac_copy_strided) or a
 * softmax (mac_softmax, spec a struct mac_softmax_unit), with that function's arguments. */
struct mac_unit {
    int32_t kind; /* MAC_UNIT_* */
    int32_t isa;  /* a layer's variant */
    const void *spec; /* struct mac_layer * (layer), struct mac_dynamic * (dynamic) or struct mac_pool * (pool) */
    const void *a, *b, *table;
    void *out;
    const struct mac_check *checks;
    int64_t nchecks;
    int64_t n; /* lookup elements */
    int32_t esize, fa, fb;
    const int64_t *shape, *sa, *sb; /* a strided lookup's shape and input strides, else NULL; a copy's
                                     * shape and source and destination strides */
};
int64_t mac_run_units(const struct mac_unit *units, int64_t n, int *status);
/* --- interface: end --- */

#define MAC_UNIT_LAYER 0
#define MAC_UNIT_LOOKUP 1
#define MAC_UNIT_POOL 2
#define MAC_UNIT_COPY 3
#define MAC_UNIT_SOFTMAX 4
#define MAC_UNIT_DYNAMIC 5

#define MAC_CHECK_PACKED 1
#define MAC_CHECK_REPACK 2

#if defined(__x86_64__) || defined(__i386__)
#define MAC_X86 1
#include <immintrin.h>
#else
#define MAC_X86 0
#endif

#define MAC_ISA_GENERIC 0
#define MAC_ISA_AVX2 1
#define MAC_ISA_AVX512VNNI 2

#define KIND_CONV 0
#define KIND_DEPTHWISE 1

#define MR 6  /* GEMM micro-tile: output pixels */
#define NR 16 /* GEMM micro-tile: output channels (two AVX2 vectors of int32) */
#define DW_BLOCK 16

/* --- requantization: MultiplyByQuantizedMultiplier with TFLite's double rounding ------------------ */
static inline int32_t requant_one(uint32_t acc, int32_t m, int32_t s, int32_t zp, int32_t lo, int32_t hi)
{
    int left = s > 0 ? s : 0;
    int right = s > 0 ? 0 : -s;
    int32_t x = (int32_t)(acc << left); /* the int32 left shift, wrapping */
    int64_t high;
    if (x == INT32_MIN && m == INT32_MIN)
        high = INT32_MAX;
    else
        high = ((int64_t)x * m + ((int64_t)1 << 30)) >> 31; /* SRDHM: add 2**30, floor */
    if (right)
        high = (high + ((int64_t)1 << (right - 1)) - (high < 0)) >> right; /* RoundingDivideByPOT */
    int64_t v = high + zp;
    if (v < lo)
        v = lo;
    if (v > hi)
        v = hi; /* numpy.clip order: hi wins when lo > hi */
    return (int32_t)v;
}

/* TFLITE_SINGLE_ROUNDING's MultiplyByQuantizedMultiplier: (x * m + 2**(30 - s)) >> (31 - s), the
 * int32 result wrapping as the reference's; s is in [-31, 30], so the shift is 1..62. */
static inline int32_t requant_single(uint32_t acc, int32_t m, int32_t s, int32_t zp, int32_t lo, int32_t hi)
{
    int total = 31 - s;
    int64_t r = ((int64_t)(int32_t)acc * m + ((int64_t)1 << (total - 1))) >> total;
    int64_t v = (int64_t)(int32_t)(uint32_t)r + zp;
    if (v < lo)
        v = lo;
    if (v > hi)
        v = hi;
    return (int32_t)v;
}

/* Channel c's requantization in the layer's rounding. */
static inline int32_t requant_channel(const struct mac_layer *L, uint32_t acc, int64_t c)
{
    if (L->single_rounding)
        return requant_single(acc, L->multiplier[c], L->shift[c], L->output_zp, L->lo, L->hi);
    return requant_one(acc, L->multiplier[c], L->shift[c], L->output_zp, L->lo, L->hi);
}

static inline __attribute__((always_inline)) void requant_row_generic(
    const struct mac_layer *L, const uint32_t *acc, int64_t c0, int64_t c1, void *out)
{
    /* acc[0] is channel c0's accumulator */
    for (int64_t c = c0; c < c1; c++) {
        int32_t v = requant_channel(L, acc[c - c0] + (uint32_t)L->bias[c], c);
        if (L->out_signed)
            ((int8_t *)out)[c] = (int8_t)v;
        else
            ((uint8_t *)out)[c] = (uint8_t)v;
    }
}

/* --- generic kernels: plain C the compiler vectorises for whatever target it is built for ---------- */
#define DEFINE_GENERIC(T, SUFFIX) \
    /* One output pixel's GEMM row of K values (x - x_zp; 0 where the window leaves the input). */ \
    static inline __attribute__((always_inline)) void im2col_row_##SUFFIX( \
        const struct mac_layer *L, const void *in, int64_t b, int64_t oh, int64_t ow, T *row) \
    { \
        int64_t cin = L->cin, zp = L->input_zp; \
        T *dst = row; \
        for (int64_t ky = 0; ky < L->kh; ky++) { \
            int64_t iy = oh * L->stride_h - L->pad_top + ky * L->dil_h; \
            for (int64_t kx = 0; kx < L->kw; kx++, dst += cin) { \
                int64_t ix = ow * L->stride_w - L->pad_left + kx * L->dil_w; \
                if (iy < 0 || iy >= L->h || ix < 0 || ix >= L->w) { \
                    memset(dst, 0, (size_t)cin * sizeof(T)); \
                    continue; \
                } \
                int64_t off = ((b * L->h + iy) * L->w + ix) * cin; \
                if (L->in_signed) { \
                    const int8_t *src = (const int8_t *)in + off; \
                    for (int64_t c = 0; c < cin; c++) \
                        dst[c] = (T)((int32_t)src[c] - (int32_t)zp); \
                } else { \
                    const uint8_t *src = (const uint8_t *)in + off; \
                    for (int64_t c = 0; c < cin; c++) \
                        dst[c] = (T)((int32_t)src[c] - (int32_t)zp); \
                } \
            } \
        } \
        for (int64_t k = L->kh * L->kw * cin; k < L->kpad; k++) \
            row[k] = 0; \
    } \
 \
    /* acc[MR][NR] (row stride ldc) = A[MR][kpad] (row stride lda) x one packed panel [kpad/2][NR][2]. */ \
    static inline __attribute__((always_inline)) void kernel_##SUFFIX( \
        const T *a, int64_t lda, const T *b, int64_t kpairs, uint32_t *c, int64_t ldc) \
    { \
        uint32_t acc[MR][NR]; \
        memset(acc, 0, sizeof(acc)); \
        for (int64_t k = 0; k < kpairs; k++, b += 2 * NR) { \
            for (int r = 0; r < MR; r++) { \
                uint32_t a0 = (uint32_t)(int32_t)a[r * lda + 2 * k]; \
                uint32_t a1 = (uint32_t)(int32_t)a[r * lda + 2 * k + 1]; \
                for (int j = 0; j < NR; j++) \
                    acc[r][j] += a0 * (uint32_t)(int32_t)b[2 * j] + a1 * (uint32_t)(int32_t)b[2 * j + 1]; \
            } \
        } \
        for (int r = 0; r < MR; r++) \
            memcpy(c + r * ldc, acc[r], sizeof(acc[r])); \
    } \
 \
    /* Depthwise, one output pixel, channels [c0, c1): acc[c] = sum over valid taps. */ \
    static inline __attribute__((always_inline)) void dw_pixel_##SUFFIX( \
        const struct mac_layer *L, const void *in, int64_t b, int64_t oh, int64_t ow, int64_t c0, \
        int64_t c1, uint32_t *acc) \
    { \
        const T *w = (const T *)L->packed; \
        int64_t dm = L->depth_multiplier, cp = L->cout_pad; \
        for (int64_t c = c0; c < c1; c++) \
            acc[c] = 0; \
        for (int64_t ky = 0; ky < L->kh; ky++) { \
            int64_t iy = oh * L->stride_h - L->pad_top + ky * L->dil_h; \
            if (iy < 0 || iy >= L->h) \
                continue; \
            for (int64_t kx = 0; kx < L->kw; kx++) { \
                int64_t ix = ow * L->stride_w - L->pad_left + kx * L->dil_w; \
                if (ix < 0 || ix >= L->w) \
                    continue; \
                int64_t tap = ky * L->kw + kx; \
                const T *wt = w + (tap / 2) * cp * 2 + (tap % 2); \
                int64_t off = ((b * L->h + iy) * L->w + ix) * L->cin; \
                for (int64_t c = c0; c < c1; c++) { \
                    int32_t x = L->in_signed ? (int32_t)((const int8_t *)in)[off + c / dm] \
                                             : (int32_t)((const uint8_t *)in)[off + c / dm]; \
                    int64_t p = (c / DW_BLOCK) * DW_BLOCK + dw_perm(c % DW_BLOCK); \
                    acc[c] += (uint32_t)(x - L->input_zp) * (uint32_t)(int32_t)wt[2 * p]; \
                } \
            } \
        } \
    }

/* Within a block of 16 depthwise channels the packed weights are in the order the AVX2 kernel's
 * 256-bit unpacks produce: channels 0-3, 8-11, 4-7, 12-15. */
static inline int64_t dw_perm(int64_t c)
{
    static const int8_t pos[DW_BLOCK] = {0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 12, 13, 14, 15};
    return pos[c];
}

DEFINE_GENERIC(int16_t, i16)
DEFINE_GENERIC(int32_t, i32)

/* --- drivers (each built twice: generic and AVX2) --------------------------------------------------- */
/* Rows of output pixels per GEMM block: its A rows (im2col) and int32 results stay in the caches. */
static int64_t block_rows(const struct mac_layer *L, size_t elem)
{
    /* Every weight panel is read once per block: few, tall blocks when the weights are large. */
    int64_t rows = (192 * 1024) / (L->kpad ? L->kpad * (int64_t)elem : 1); /* kpad 0: no input channels */
    int64_t acc_rows = (512 * 1024) / (L->cout_pad * 4);
    if (acc_rows < rows)
        rows = acc_rows;
    rows = rows / MR * MR;
    return rows < MR ? MR : rows;
}

#define DEFINE_DRIVERS(SUFFIX, ATTR, GEMM16, REQUANT, DWFAST, HAS_DWFAST) \
    ATTR static int conv_##SUFFIX(const struct mac_layer *L, const void *in, void *out) \
    { \
        int64_t M = L->n * L->out_h * L->out_w, K2 = L->kpad / 2, cp = L->cout_pad; \
        size_t elem = L->wide ? 4 : 2; \
        int64_t mb = block_rows(L, elem); \
        if (mb > (M + MR - 1) / MR * MR) \
            mb = (M + MR - 1) / MR * MR; \
        void *a = aligned_alloc(64, ((size_t)(mb * L->kpad) * elem + 64) / 64 * 64); \
        uint32_t *acc = aligned_alloc(64, ((size_t)(mb * cp) * 4 + 63) / 64 * 64); \
        if (!a || !acc) { \
            free(a); \
            free(acc); \
            return -1; \
        } \
        int64_t os = L->cout; \
        for (int64_t m0 = 0; m0 < M; m0 += mb) { \
            int64_t rows = M - m0 < mb ? M - m0 : mb; \
            int64_t tiles = (rows + MR - 1) / MR; \
            /* the block's first pixel, then counted up: no division per row */ \
            int64_t ow = m0 % L->out_w, oh = m0 / L->out_w % L->out_h, b = m0 / L->out_w / L->out_h; \
            for (int64_t r = 0; r < tiles * MR; r++) { \
                if (L->wide) { \
                    int32_t *row = (int32_t *)a + r * L->kpad; \
                    if (r < rows) \
                        im2col_row_i32(L, in, b, oh, ow, row); \
                    else \
                        memset(row, 0, (size_t)L->kpad * 4); \
                } else { \
                    int16_t *row = (int16_t *)a + r * L->kpad; \
                    if (r < rows) \
                        im2col_row_i16(L, in, b, oh, ow, row); \
                    else \
                        memset(row, 0, (size_t)L->kpad * 2); \
                } \
                if (++ow == L->out_w) { \
                    ow = 0; \
                    if (++oh == L->out_h) { \
                        oh = 0; \
                        b++; \
                    } \
                } \
            } \
            for (int64_t p = 0; p < cp / NR; p++) { \
                for (int64_t t = 0; t < tiles; t++) { \
                    uint32_t *c = acc + t * MR * cp + p * NR; \
                    if (L->wide) \
                        kernel_i32((const int32_t *)a + t * MR * L->kpad, L->kpad, \
                                   (const int32_t *)L->packed + p * L->kpad * NR, K2, c, cp); \
                    else \
                        GEMM16((const int16_t *)a + t * MR * L->kpad, L->kpad, \
                               (const int16_t *)L->packed + p * L->kpad * NR, K2, c, cp); \
                } \
            } \
            for (int64_t r = 0; r < rows; r++) \
                REQUANT(L, acc + r * cp, (char *)out + (m0 + r) * os); \
        } \
        free(a); \
        free(acc); \
        return 0; \
    } \
 \
    ATTR static int depthwise_##SUFFIX(const struct mac_layer *L, const void *in, void *out) \
    { \
        uint32_t *acc = malloc((size_t)L->cout_pad * 4); \
        const uint8_t **taps = malloc((size_t)(L->kpad + 4) * sizeof(*taps)); \
        uint8_t *zrow = malloc((size_t)L->cin + 64); \
        if (!acc || !taps || !zrow) { \
            free(acc); \
            free(taps); \
            free(zrow); \
            return -1; \
        } \
        memset(zrow, (uint8_t)L->input_zp, (size_t)L->cin + 64); \
        int fast = HAS_DWFAST && !L->wide && L->depth_multiplier == 1 && L->zp_byte_ok; \
        /* HAS_DWFAST 2: the fast kernel takes any channel count (masked tails), else whole blocks */ \
        int64_t fast_end = fast ? (HAS_DWFAST == 2 ? L->cout : L->cout / DW_BLOCK * DW_BLOCK) : 0; \
        int64_t ntaps = L->kh * L->kw; \
        int64_t tap_end = (ntaps + 3) / 4 * 4; /* the kernels read taps in pairs (AVX2) or fours (VNNI) */ \
        /* The fast kernel multiplies raw inputs; taps outside the input read a row of zero-point \
         * bytes, so sum (x - zp) w = sum x w - zp * sum w with the same per-channel sum everywhere: \
         * it joins the bias (all modulo 2**32). */ \
        struct mac_layer LF = *L; \
        int64_t *toff = malloc((size_t)(ntaps + 1) * 8); \
        if (!toff) { \
            free(acc), free(taps), free(zrow); \
            return -1; \
        } \
        LF.bias = L->dw_bias; /* the plan's, worked out once (a global pool's 256 taps: 20 us a call) */ \
        for (int64_t t = 0; t < ntaps; t++) \
            toff[t] = ((t / L->kw) * L->dil_h * L->w + (t % L->kw) * L->dil_w) * L->cin; \
        int64_t span_h = (L->kh - 1) * L->dil_h, span_w = (L->kw - 1) * L->dil_w; \
        /* the output columns whose windows lie inside the input: [ow_lo, ow_hi) */ \
        int64_t sw = L->stride_w, lim = L->w - 1 - span_w + L->pad_left; \
        int64_t ow_lo = (L->pad_left + sw - 1) / sw, ow_hi = lim < 0 ? 0 : lim / sw + 1; \
        if (ow_hi > L->out_w) \
            ow_hi = L->out_w; \
        if (ow_lo > ow_hi) \
            ow_lo = ow_hi; \
        for (int64_t b = 0; b < L->n; b++) \
            for (int64_t oh = 0; oh < L->out_h; oh++) { \
                int64_t iy0 = oh * L->stride_h - L->pad_top; \
                int inside = fast_end && iy0 >= 0 && iy0 + span_h < L->h; \
                char *orow = (char *)out + (b * L->out_h + oh) * L->out_w * L->cout; \
                if (inside && ow_hi > ow_lo) { \
                    /* the row's interior in one call: the taps of its first pixel, stepped by \
                     * stride_w * cin; the padding taps read a real tap (their weights are zero) */ \
                    const uint8_t *base = \
                        (const uint8_t *)in + ((b * L->h + iy0) * L->w + ow_lo * sw - L->pad_left) * L->cin; \
                    for (int64_t t = 0; t < tap_end; t++) \
                        taps[t] = base + toff[t < ntaps ? t : 0]; \
                    DWFAST(&LF, taps, fast_end, orow + ow_lo * L->cout, ow_hi - ow_lo, sw * L->cin, L->cout); \
                } \
                for (int64_t ow = 0; ow < L->out_w; ow++) { \
                    char *o = orow + ow * L->cout; \
                    if (fast_end && !(inside && ow >= ow_lo && ow < ow_hi)) { \
                        for (int64_t ky = 0; ky < L->kh; ky++) { \
                            int64_t iy = iy0 + ky * L->dil_h; \
                            for (int64_t kx = 0; kx < L->kw; kx++) { \
                                int64_t ix = ow * sw - L->pad_left + kx * L->dil_w; \
                                int ok = iy >= 0 && iy < L->h && ix >= 0 && ix < L->w; \
                                taps[ky * L->kw + kx] = \
                                    ok ? (const uint8_t *)in + ((b * L->h + iy) * L->w + ix) * L->cin \
                                       : zrow; \
                            } \
                        } \
                        for (int64_t t = ntaps; t < tap_end; t++) \
                            taps[t] = zrow; \
                        DWFAST(&LF, taps, fast_end, o, 1, 0, 0); \
                    } \
                    if (fast_end < L->cout) { \
                        if (L->wide) \
                            dw_pixel_i32(L, in, b, oh, ow, fast_end, L->cout, acc); \
                        else \
                            dw_pixel_i16(L, in, b, oh, ow, fast_end, L->cout, acc); \
                        requant_row_generic(L, acc + fast_end, fast_end, L->cout, o); \
                    } \
                } \
            } \
        free(acc), free(taps), free(zrow), free(toff); \
        return 0; \
    }

static inline __attribute__((always_inline)) void requant_generic(const struct mac_layer *L, const uint32_t *acc,
                                                                  void *out)
{
    requant_row_generic(L, acc, 0, L->cout, out);
}

static inline __attribute__((always_inline)) void dw_none(const struct mac_layer *L, const uint8_t **taps,
                                                          int64_t c_end, char *out, int64_t n, int64_t step,
                                                          int64_t ostep)
{
    (void)L, (void)taps, (void)c_end, (void)out, (void)n, (void)step, (void)ostep;
}

DEFINE_DRIVERS(generic, , kernel_i16, requant_generic, dw_none, 0)

#if MAC_X86
/* --- AVX2 ------------------------------------------------------------------------------------------ */
#define AVX2 __attribute__((target("avx2")))

/* 6 pixels x 16 channels: each step takes one pair of K (two int16 of A broadcast as one int32)
 * against the panel's 16 pairs; vpmaddwd forms a0*b0 + a1*b1 per lane, wrapping like the C model. */
AVX2 static inline void gemm_6x16_avx2(const int16_t *a, int64_t lda, const int16_t *b, int64_t kpairs,
                                       uint32_t *c, int64_t ldc)
{
    __m256i c00 = _mm256_setzero_si256(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
    __m256i c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
    const int16_t *a0 = a, *a1 = a + lda, *a2 = a + 2 * lda, *a3 = a + 3 * lda, *a4 = a + 4 * lda,
                  *a5 = a + 5 * lda;
    for (int64_t k = 0; k < kpairs; k++, b += 2 * NR) {
        __m256i b0 = _mm256_loadu_si256((const __m256i *)b);
        __m256i b1 = _mm256_loadu_si256((const __m256i *)(b + 16));
        int32_t v;
        __m256i x;
#define ROW(R) \
    memcpy(&v, a##R + 2 * k, 4); \
    x = _mm256_set1_epi32(v); \
    c##R##0 = _mm256_add_epi32(c##R##0, _mm256_madd_epi16(x, b0)); \
    c##R##1 = _mm256_add_epi32(c##R##1, _mm256_madd_epi16(x, b1));
        ROW(0) ROW(1) ROW(2) ROW(3) ROW(4) ROW(5)
#undef ROW
    }
#define STORE(R) \
    _mm256_storeu_si256((__m256i *)(c + R * ldc), c##R##0); \
    _mm256_storeu_si256((__m256i *)(c + R * ldc + 8), c##R##1);
    STORE(0) STORE(1) STORE(2) STORE(3) STORE(4) STORE(5)
#undef STORE
}

/* 8 channels of int32 accumulators -> 8 clamped int32 values (requant_one, lane by lane; the caller
 * guarantees no multiplier is INT32_MIN). */
AVX2 static inline __m256i requant8_avx2(__m256i acc, const struct mac_layer *L, int64_t c)
{
    __m256i bias = _mm256_loadu_si256((const __m256i *)(L->bias + c));
    __m256i m = _mm256_loadu_si256((const __m256i *)(L->multiplier + c));
    __m256i s = _mm256_loadu_si256((const __m256i *)(L->shift + c));
    __m256i zero = _mm256_setzero_si256();
    __m256i left = _mm256_max_epi32(s, zero);
    __m256i right = _mm256_max_epi32(_mm256_sub_epi32(zero, s), zero);
    __m256i x = _mm256_sllv_epi32(_mm256_add_epi32(acc, bias), left);
    __m256i nudge = _mm256_set1_epi64x((int64_t)1 << 30);
    __m256i pe = _mm256_add_epi64(_mm256_mul_epi32(x, m), nudge);
    __m256i po = _mm256_add_epi64(_mm256_mul_epi32(_mm256_srli_epi64(x, 32), _mm256_srli_epi64(m, 32)), nudge);
    /* bits 31..62 of each 64-bit product: the low half of pe >> 31, the high half of po << 1 */
    __m256i h = _mm256_blend_epi32(_mm256_srli_epi64(pe, 31), _mm256_slli_epi64(po, 1), 0xAA);
    /* RoundingDivideByPOT as gemmlowp writes it: (h >> e) + (remainder > (mask >> 1) + (h < 0)) */
    __m256i one = _mm256_set1_epi32(1);
    __m256i mask = _mm256_sub_epi32(_mm256_sllv_epi32(one, right), one);
    __m256i rem = _mm256_and_si256(h, mask);
    __m256i thr = _mm256_sub_epi32(_mm256_srli_epi32(mask, 1), _mm256_cmpgt_epi32(zero, h));
    __m256i q = _mm256_sub_epi32(_mm256_srav_epi32(h, right), _mm256_cmpgt_epi32(rem, thr));
    /* clamp before adding the zero point: q + zp could leave int32 */
    __m256i zp = _mm256_set1_epi32(L->output_zp);
    q = _mm256_max_epi32(q, _mm256_set1_epi32(L->lo - L->output_zp));
    q = _mm256_min_epi32(q, _mm256_set1_epi32(L->hi - L->output_zp));
    return _mm256_add_epi32(q, zp);
}

AVX2 static inline void store8_avx2(__m256i v, int out_signed, void *dst)
{
    __m128i p16 = _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    __m128i p8 = out_signed ? _mm_packs_epi16(p16, p16) : _mm_packus_epi16(p16, p16);
    _mm_storel_epi64((__m128i *)dst, p8);
}

AVX2 static inline void requant_avx2(const struct mac_layer *L, const uint32_t *acc, void *out)
{
    int64_t c = 0;
    if (L->simple_quant && !L->single_rounding && L->lo - (int64_t)L->output_zp >= INT32_MIN &&
        L->hi - (int64_t)L->output_zp <= INT32_MAX) {
        for (; c + 8 <= L->cout; c += 8) {
            __m256i v = requant8_avx2(_mm256_loadu_si256((const __m256i *)(acc + c)), L, c);
            store8_avx2(v, L->out_signed, (char *)out + c);
        }
    }
    requant_row_generic(L, acc + c, c, L->cout, out);
}

/* 16 depthwise channels from two taps: x0, x1 (16 int16 each) interleaved by the in-lane unpacks
 * into pairs (channels 0-3 and 8-11 | 4-7 and 12-15) against weights packed in that order. */
AVX2 static inline __m256i dw_load16(const uint8_t *p, int in_signed)
{
    __m128i raw = _mm_loadu_si128((const __m128i *)p);
    return in_signed ? _mm256_cvtepi8_epi16(raw) : _mm256_cvtepu8_epi16(raw);
}

/* Channels [c0, c_end), both multiples of 16. */
AVX2 static inline void dw_avx2_range(const struct mac_layer *L, const uint8_t **taps, int64_t off, int64_t c0,
                                      int64_t c_end, void *out)
{
    const int16_t *w = (const int16_t *)L->packed;
    int64_t cp2 = L->cout_pad * 2, pairs = L->kpad / 2;
    int simple = L->simple_quant && !L->single_rounding && L->lo - (int64_t)L->output_zp >= INT32_MIN &&
                 L->hi - (int64_t)L->output_zp <= INT32_MAX;
    for (int64_t c = c0; c < c_end; c += DW_BLOCK) {
        __m256i lo = _mm256_setzero_si256(), hi = lo;
        const int16_t *wc = w + c * 2;
        for (int64_t p = 0; p < pairs; p++) {
            __m256i x0 = dw_load16(taps[2 * p] + off + c, L->in_signed); /* raw x: zp * sum w is in the bias */
            __m256i x1 = dw_load16(taps[2 * p + 1] + off + c, L->in_signed);
            const int16_t *wp = wc + p * cp2;
            lo = _mm256_add_epi32(lo, _mm256_madd_epi16(_mm256_unpacklo_epi16(x0, x1),
                                                        _mm256_loadu_si256((const __m256i *)wp)));
            hi = _mm256_add_epi32(hi, _mm256_madd_epi16(_mm256_unpackhi_epi16(x0, x1),
                                                        _mm256_loadu_si256((const __m256i *)(wp + 16))));
        }
        __m256i r0 = _mm256_permute2x128_si256(lo, hi, 0x20); /* channels 0-7 */
        __m256i r1 = _mm256_permute2x128_si256(lo, hi, 0x31); /* channels 8-15 */
        if (simple) {
            store8_avx2(requant8_avx2(r0, L, c), L->out_signed, (char *)out + c);
            store8_avx2(requant8_avx2(r1, L, c + 8), L->out_signed, (char *)out + c + 8);
        } else {
            uint32_t tmp[DW_BLOCK];
            _mm256_storeu_si256((__m256i *)tmp, r0);
            _mm256_storeu_si256((__m256i *)(tmp + 8), r1);
            requant_row_generic(L, tmp, c, c + DW_BLOCK, out);
        }
    }
}

/* n pixels of an output row: pixel i's taps are taps[t] + i * step, its output out + i * ostep. */
AVX2 static inline void dw_avx2(const struct mac_layer *L, const uint8_t **taps, int64_t c_end, char *out, int64_t n,
                                int64_t step, int64_t ostep)
{
    for (int64_t i = 0; i < n; i++)
        dw_avx2_range(L, taps, i * step, 0, c_end, out + i * ostep);
}

DEFINE_DRIVERS(avx2, AVX2, gemm_6x16_avx2, requant_avx2, dw_avx2, 1)

/* --- AVX-512 VNNI ---------------------------------------------------------------------------------- */
#define VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))
#define MRV 8       /* VNNI GEMM tile: 8 pixels x 32 channels (two panels), 16 zmm accumulators */
#define DW_VNNI 64  /* VNNI depthwise: channels per block (one zmm of input bytes per tap) */

/* These kernels multiply u8 x s8 with vpdpbusd: four products per int32 lane, each at most
 * 255 * 128 in magnitude, summed without saturation and added modulo 2**32 - the C model exactly.
 * Input bytes become u = x ^ flip (flip = 0x80 for int8: u = x + 128, else 0), so
 * x - x_zp = u - z with z = x_zp + 128 * signed, a byte when x_zp is a value of the input dtype.
 * Window positions outside the input hold z, contributing (z - z) * w = 0; then
 * sum (u - z) w = sum u w - z * sum w, and z * sum w is folded into bias8 by the plan. Weights
 * w - w_zp must be int8 (the plan checks the values; -128 included). */

/* The requantization's layer constants, in locals: the output stores go through char pointers,
 * which may alias anything, so fields read through L would be reloaded after every store. The
 * plan's rq rows (_requant_rows in __init__.py) hold per channel the left shift, the multiplier
 * m (its odd channels again in the low halves of 64-bit lanes) and the 64-bit constants C, T, S
 * of the one floor division below, per block of 16 channels the 8 even channels then the 8 odd. */
struct rq_vnni {
    __m512i qlo, qhi, zp, two31;
    const int32_t *left, *e1, *mult, *mult_odd;
    const int64_t *add, *thr, *shift;
    int simple, mode;
};

#define RQ_SHL 1       /* some channel shifts left */
#define RQ_ZP_FOLDED 2 /* C holds the output zero point */
static inline int32_t rq_flags(const struct mac_layer *L)
{
    return L->rq_n ? L->rq[10 * L->rq_n] : 0;
}

/* The requantization's mode: a constant in each copy of the kernels (as run-time flags they cost
 * a test and a register per store). */
#define RQM_SHL 1    /* shift left first */
#define RQM_ADD_ZP 2 /* the zero point is not in C: clamp in 32 bits, then add it */
#define RQM_SSAT 4   /* folded, int8 output over its whole range: vpmovsdb's saturation clamps */
#define RQM_USAT 8   /* folded, uint8 output up to 255: max with lo, vpmovusdb's saturation above */

VNNI static inline struct rq_vnni rq_vnni_init(const struct mac_layer *L)
{
    int64_t n = L->rq_n;
    int32_t flags = rq_flags(L);
    int zp_folded = !!(flags & RQ_ZP_FOLDED);
    int32_t zp = zp_folded ? 0 : L->output_zp;
    struct rq_vnni q = {
        .qlo = _mm512_set1_epi32(L->lo - zp),
        .qhi = _mm512_set1_epi32(L->hi - zp),
        .zp = _mm512_set1_epi32(zp),
        .two31 = _mm512_set1_epi64((int64_t)1 << 31),
        .left = L->rq,
        .e1 = L->rq + n,
        .mult = L->rq + 2 * n,
        .mult_odd = L->rq + 3 * n,
        .add = (const int64_t *)(L->rq + 4 * n),
        .thr = (const int64_t *)(L->rq + 6 * n),
        .shift = (const int64_t *)(L->rq + 8 * n),
        .simple = L->simple_quant && L->lo - (int64_t)L->output_zp >= INT32_MIN &&
                  L->hi - (int64_t)L->output_zp <= INT32_MAX,
        .mode = (flags & RQ_SHL ? RQM_SHL : 0) | (zp_folded ? 0 : RQM_ADD_ZP) |
                (zp_folded && L->out_signed && L->lo == -128 && L->hi == 127 ? RQM_SSAT : 0) |
                (zp_folded && !L->out_signed && L->hi == 255 ? RQM_USAT : 0),
    };
    return q;
}

/* The per-channel constants of 16 channels from c (a multiple of 16) as values: a GEMM tile
 * requantizes its eight rows with one load of them, where loads through q's pointers would be
 * repeated after every output store (a store through a char pointer may alias them). Only what
 * the mode uses is loaded. */
struct rq16 {
    __m512i left, mult, mult_odd, thr_even, thr_odd, add_even, add_odd, shift_even, shift_odd, e1;
};

VNNI static inline __attribute__((always_inline)) struct rq16 rq16_load(const struct rq_vnni *q, int64_t c,
                                                                         int mode)
{
    int high = !(mode & RQM_ADD_ZP); /* see requant16_k_vnni */
    __m512i zero = _mm512_setzero_si512();
    struct rq16 k = {
        .left = mode & RQM_SHL ? _mm512_loadu_si512(q->left + c) : zero,
        .mult = _mm512_loadu_si512(q->mult + c),
        .mult_odd = _mm512_loadu_si512(q->mult_odd + c),
        .thr_even = _mm512_loadu_si512(q->thr + c),
        .thr_odd = _mm512_loadu_si512(q->thr + c + 8),
        .add_even = _mm512_loadu_si512(q->add + c),
        .add_odd = _mm512_loadu_si512(q->add + c + 8),
        .shift_even = high ? zero : _mm512_loadu_si512(q->shift + c),
        .shift_odd = high ? zero : _mm512_loadu_si512(q->shift + c + 8),
        .e1 = high ? _mm512_loadu_si512(q->e1 + c) : zero,
    };
    return k;
}

/* Half of requant16_k_vnni: the 8 channels whose x and m are in the low halves of 64-bit lanes;
 * the dividend, or with divide its quotient. */
VNNI static inline __attribute__((always_inline)) __m512i requant8_vnni(const struct rq_vnni *q, __m512i x,
                                                                       __m512i m, __m512i thr, __m512i add,
                                                                       __m512i shift, int divide)
{
    __m512i p = _mm512_mul_epi32(x, m); /* exact: |p| < 2**62 */
    __mmask8 neg = _mm512_cmplt_epi64_mask(p, thr);
    __m512i v = _mm512_add_epi64(p, add);
    v = _mm512_mask_sub_epi64(v, neg, v, q->two31);
    return divide ? _mm512_srav_epi64(v, shift) : v;
}

/* 16 channels: requant_one lane by lane on accumulators that already hold the bias (only when
 * q->simple: no multiplier is INT32_MIN and lo - zp, hi - zp fit in int32), with the channels'
 * constants k. SRDHM's floor((p + 2**30) / 2**31) and RoundingDivideByPOT's
 * floor((h + 2**(e-1) - [h < 0]) / 2**e) nest into floor((p + C - [p < T] * 2**31) / 2**(31 + e))
 * (floor(floor(a / b) / c) = floor(a / (b c)), and h < 0 exactly when p + 2**30 < 0). */
VNNI static inline __attribute__((always_inline)) __m512i requant16_k_vnni(const struct rq_vnni *q,
                                                                            const struct rq16 *k, __m512i acc,
                                                                            int mode)
{
    int add_zp = mode & RQM_ADD_ZP;
    __m512i x = mode & RQM_SHL ? _mm512_sllv_epi32(acc, k->left) : acc;
    /* zero point folded (every e in 1..21): the high halves of the dividends are their quotients by
     * 2**32, then divided by 2**(e - 1) in 32-bit lanes, one shift for 16 channels */
    int high = !add_zp;
    __m512i even = requant8_vnni(q, x, k->mult, k->thr_even, k->add_even, k->shift_even, !high);
    __m512i odd = requant8_vnni(q, _mm512_srli_epi64(x, 32), k->mult_odd, k->thr_odd, k->add_odd, k->shift_odd,
                                !high);
    __m512i r;
    if (high) /* even channels' high halves into the even int32 lanes */
        r = _mm512_srav_epi32(_mm512_mask_shuffle_epi32(odd, 0x5555, even, _MM_PERM_DDBB), k->e1);
    else /* each quotient is the low half of its 64-bit lane: odd channels into the odd int32 lanes */
        r = _mm512_mask_shuffle_epi32(even, 0xAAAA, odd, _MM_PERM_CCAA);
    if (mode & RQM_SSAT) /* store16_mode_vnni's saturation clamps */
        return r;
    if (mode & RQM_USAT)
        return _mm512_max_epi32(r, q->qlo);
    /* clamp before adding the zero point: r + zp could leave int32 (folded: it cannot) */
    r = _mm512_min_epi32(_mm512_max_epi32(r, q->qlo), q->qhi);
    return add_zp ? _mm512_add_epi32(r, q->zp) : r;
}

/* requant16_k_vnni with the constants of channels c .. c + 15 loaded for this one call. */
VNNI static inline __attribute__((always_inline)) __m512i requant16_mode_vnni(const struct rq_vnni *q, __m512i acc,
                                                                               int64_t c, int mode)
{
    struct rq16 k = rq16_load(q, c, mode);
    return requant16_k_vnni(q, &k, acc, mode);
}

/* The first bytes of requant16_mode_vnni's values (keep), narrowed as the mode needs. */
VNNI static inline __attribute__((always_inline)) void store16_mode_vnni(char *dst, __mmask16 keep, __m512i v,
                                                                         int mode)
{
    if (mode & RQM_SSAT)
        _mm512_mask_cvtsepi32_storeu_epi8(dst, keep, v);
    else if (mode & RQM_USAT)
        _mm512_mask_cvtusepi32_storeu_epi8(dst, keep, v);
    else /* vpmovdb truncates: the value is already within the output dtype */
        _mm512_mask_cvtepi32_storeu_epi8(dst, keep, v);
}

/* requant16_mode_vnni with the layer's flags read at run time and a 32-bit clamp (the kernels have
 * a copy per mode) */
VNNI static inline __m512i requant16_vnni(const struct rq_vnni *q, __m512i acc, int64_t c)
{
    return requant16_mode_vnni(q, acc, c, q->mode & (RQM_SHL | RQM_ADD_ZP));
}

/* Requantize 16 accumulators (bias included) of channels c.. and store the first n (<= 16) bytes. */
VNNI static inline void store16_vnni(const struct mac_layer *L, const struct rq_vnni *q, __m512i acc, int64_t c,
                                     int64_t n, char *dst)
{
    if (q->simple) {
        __mmask16 keep = n >= 16 ? 0xFFFF : (__mmask16)((1u << n) - 1);
        _mm512_mask_cvtepi32_storeu_epi8(dst, keep, requant16_vnni(q, acc, c));
        return;
    }
    uint32_t tmp[16];
    _mm512_storeu_si512(tmp, acc);
    for (int64_t i = 0; i < n && i < 16; i++) {
        int32_t v = requant_channel(L, tmp[i], c + i);
        if (L->out_signed)
            ((int8_t *)dst)[i] = (int8_t)v;
        else
            ((uint8_t *)dst)[i] = (uint8_t)v;
    }
}

/* One tile: rows [0, MRV) of A (u8, row stride lda) x NP panels (1 or 2) of packed8 from b0 (channel
 * c0's panel), accumulators started at bias8 from bias (channel c0's); requantized in registers and
 * stored as bytes to MRV rows of out (row stride cout), channels c0.. (masked at cout). A block's
 * last rows % MRV rows take gemm_tail_vnni. The accumulators are named variables, not an array:
 * GCC kept an array's 16 zmm moving between registers and the stack. */
#define VNNI_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
VNNI static inline __attribute__((always_inline)) void gemm_tile_vnni(const struct mac_layer *L,
                                                                      const struct rq_vnni *qp, const uint8_t *a,
                                                                      int64_t lda, int64_t c0, int np, int64_t cout,
                                                                      char *out, int mode, const int8_t *b0,
                                                                      const int32_t *bias)
{
    struct rq_vnni q = *qp; /* a local the output stores cannot alias */
    int64_t kq = L->k4 / 4;
    const int8_t *b1 = b0 + NR * L->k4;
    __m512i bias0 = _mm512_loadu_si512(bias);
    __m512i bias1 = np == 2 ? _mm512_loadu_si512(bias + NR) : bias0;
#define DECL(R) \
    __m512i c##R##0 = bias0, c##R##1 = bias1; \
    const uint8_t *a##R = a + R * lda;
    VNNI_ROWS(DECL)
#undef DECL
    for (int64_t k = 0; k < kq; k++) {
        __m512i w0 = _mm512_loadu_si512(b0 + k * 64);
        __m512i w1 = np == 2 ? _mm512_loadu_si512(b1 + k * 64) : w0;
#define STEP(R) \
    { \
        int32_t v; \
        memcpy(&v, a##R + 4 * k, 4); \
        __m512i x = _mm512_set1_epi32(v); \
        c##R##0 = _mm512_dpbusd_epi32(c##R##0, x, w0); \
        if (np == 2) \
            c##R##1 = _mm512_dpbusd_epi32(c##R##1, x, w1); \
    }
        VNNI_ROWS(STEP)
#undef STEP
    }
    if (!q.simple) { /* rare: INT32_MIN multipliers */
#define ARR(R) {c##R##0, c##R##1},
        __m512i acc[MRV][2] = {VNNI_ROWS(ARR)};
#undef ARR
        for (int j = 0; j < np && c0 + j * NR < cout; j++)
            for (int r = 0; r < MRV; r++)
                store16_vnni(L, &q, acc[r][j], c0 + j * NR, cout - c0 - j * NR, out + r * cout + c0 + j * NR);
        return;
    }
    /* one pointer stepped down the rows: eight row addresses would not fit the free registers */
    char *o = out + c0;
    __mmask16 keep0 = cout - c0 >= 16 ? 0xFFFF : (__mmask16)((1u << (cout - c0)) - 1);
    struct rq16 k0 = rq16_load(&q, c0, mode);
#define OUT0(R) \
    store16_mode_vnni(o, keep0, requant16_k_vnni(&q, &k0, c##R##0, mode), mode); \
    o += cout;
    VNNI_ROWS(OUT0)
#undef OUT0
    int64_t c1 = c0 + NR;
    o = out + c1;
    if (np == 2 && c1 < cout) {
        __mmask16 keep1 = cout - c1 >= 16 ? 0xFFFF : (__mmask16)((1u << (cout - c1)) - 1);
        struct rq16 k1 = rq16_load(&q, c1, mode);
#define OUT1(R) \
    store16_mode_vnni(o, keep1, requant16_k_vnni(&q, &k1, c##R##1, mode), mode); \
    o += cout;
        VNNI_ROWS(OUT1)
#undef OUT1
    }
}

/* The block's last rows % MRV rows (1..7) against np (1, 2 or 4) panels: without the 8-row
 * tile's wasted rows, and with four panels when the rows are few, so that a single row (the
 * FULLY_CONNECTED classifier) still has four independent accumulator chains to hide vpdpbusd's
 * latency. mr and np are constants in each copy (gemm_tail_vnni); the stores take the layer's
 * requantization flags at run time (one store per K steps: not worth a copy per mode). */
#define TAIL_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6)
VNNI static inline __attribute__((always_inline)) void gemm_tail_body_vnni(const struct mac_layer *L,
                                                                           const struct rq_vnni *qp,
                                                                           const uint8_t *a, int64_t lda,
                                                                           int64_t c0, int np, int mr,
                                                                           int64_t cout, char *out,
                                                                           const int8_t *b, const int32_t *bias)
{
    struct rq_vnni q = *qp;
    int64_t kq = L->k4 / 4, ps = NR * L->k4; /* bytes per panel */
    __m512i bias0 = _mm512_loadu_si512(bias);
    __m512i bias1 = np >= 2 ? _mm512_loadu_si512(bias + NR) : bias0;
    __m512i bias2 = np == 4 ? _mm512_loadu_si512(bias + 2 * NR) : bias0;
    __m512i bias3 = np == 4 ? _mm512_loadu_si512(bias + 3 * NR) : bias0;
#define DECL(R) \
    __m512i c##R##0 = bias0, c##R##1 = bias1, c##R##2 = bias2, c##R##3 = bias3; \
    const uint8_t *a##R = a + (R < mr ? R : 0) * lda;
    TAIL_ROWS(DECL)
#undef DECL
    for (int64_t k = 0; k < kq; k++) {
        const int8_t *bk = b + k * 64;
        __m512i w0 = _mm512_loadu_si512(bk);
        __m512i w1 = np >= 2 ? _mm512_loadu_si512(bk + ps) : w0;
        __m512i w2 = np == 4 ? _mm512_loadu_si512(bk + 2 * ps) : w0;
        __m512i w3 = np == 4 ? _mm512_loadu_si512(bk + 3 * ps) : w0;
#define STEP(R) \
    if (R < mr) { \
        int32_t v; \
        memcpy(&v, a##R + 4 * k, 4); \
        __m512i x = _mm512_set1_epi32(v); \
        c##R##0 = _mm512_dpbusd_epi32(c##R##0, x, w0); \
        if (np >= 2) \
            c##R##1 = _mm512_dpbusd_epi32(c##R##1, x, w1); \
        if (np == 4) { \
            c##R##2 = _mm512_dpbusd_epi32(c##R##2, x, w2); \
            c##R##3 = _mm512_dpbusd_epi32(c##R##3, x, w3); \
        } \
    }
        TAIL_ROWS(STEP)
#undef STEP
    }
#define OUT(R, J) \
    if (R < mr && J < np && c0 + J * NR < cout) \
        store16_vnni(L, &q, c##R##J, c0 + J * NR, cout - c0 - J * NR, out + R * cout + c0 + J * NR);
#define OUTROW(R) OUT(R, 0) OUT(R, 1) OUT(R, 2) OUT(R, 3)
    TAIL_ROWS(OUTROW)
#undef OUTROW
#undef OUT
}

VNNI static void gemm_tail_vnni(const struct mac_layer *L, const struct rq_vnni *q, const uint8_t *a, int64_t lda,
                                int64_t c0, int np, int mr, int64_t cout, char *out, const int8_t *b,
                                const int32_t *bias)
{
    switch (mr) {
#define CASE(R) \
    case R + 1: \
        if (np == 4) \
            gemm_tail_body_vnni(L, q, a, lda, c0, 4, R + 1, cout, out, b, bias); \
        else if (np == 2) \
            gemm_tail_body_vnni(L, q, a, lda, c0, 2, R + 1, cout, out, b, bias); \
        else \
            gemm_tail_body_vnni(L, q, a, lda, c0, 1, R + 1, cout, out, b, bias); \
        break;
        TAIL_ROWS(CASE)
#undef CASE
    }
}

/* dst[0, n) = src[0, n) ^ flip (or the byte fill when src is NULL), 64 bytes at a time: the rows of
 * a 3-channel stem are 9-byte runs, where a byte loop costs more than the GEMM. */
VNNI static inline void copy_flip(uint8_t *dst, const uint8_t *src, int64_t n, __m512i flip)
{
    for (; n >= 64; n -= 64, dst += 64, src = src ? src + 64 : src)
        _mm512_storeu_si512(dst, src ? _mm512_xor_si512(_mm512_loadu_si512(src), flip) : flip);
    if (n > 0) {
        __mmask64 k = ((__mmask64)1 << n) - 1;
        _mm512_mask_storeu_epi8(dst, k, src ? _mm512_xor_si512(_mm512_maskz_loadu_epi8(k, src), flip) : flip);
    }
}

/* One output pixel's GEMM row as bytes u = x ^ flip; z where the window leaves the input. Taps
 * next to each other in a row of the input (no horizontal dilation) are one run of bytes. */
VNNI static inline void im2col_row_u8(const struct mac_layer *L, const uint8_t *in, int64_t b, int64_t oh,
                                      int64_t ow, __m512i zv, __m512i flip, uint8_t *row)
{
    int64_t cin = L->cin, k = L->kh * L->kw * cin, span = L->kw * cin;
    int64_t ix0 = ow * L->stride_w - L->pad_left;
    uint8_t *dst = row;
    for (int64_t ky = 0; ky < L->kh; ky++, dst += span) {
        int64_t iy = oh * L->stride_h - L->pad_top + ky * L->dil_h;
        if (iy < 0 || iy >= L->h) {
            copy_flip(dst, NULL, span, zv);
            continue;
        }
        const uint8_t *src = in + (b * L->h + iy) * L->w * cin;
        if (L->dil_w == 1) {
            int64_t lo = ix0 < 0 ? -ix0 : 0, hi = L->w - ix0; /* taps [lo, hi) are inside */
            if (hi > L->kw)
                hi = L->kw;
            if (hi <= lo) {
                copy_flip(dst, NULL, span, zv);
                continue;
            }
            copy_flip(dst, NULL, lo * cin, zv);
            copy_flip(dst + lo * cin, src + (ix0 + lo) * cin, (hi - lo) * cin, flip);
            copy_flip(dst + hi * cin, NULL, (L->kw - hi) * cin, zv);
            continue;
        }
        for (int64_t kx = 0; kx < L->kw; kx++) {
            int64_t ix = ix0 + kx * L->dil_w;
            if (ix < 0 || ix >= L->w)
                copy_flip(dst + kx * cin, NULL, cin, zv);
            else
                copy_flip(dst + kx * cin, src + ix * cin, cin, flip);
        }
    }
    memset(row + k, 0, (size_t)(L->k4 - k)); /* their weights are zero */
}

/* im2col_row_u8 for short kernel rows (kw * cin <= 64, no horizontal dilation: the stem's 3 runs
 * of 9 bytes, a 3x3 layer of up to 21 channels): per kernel row one load, masked to the bytes
 * inside the input and filled with the zero point's raw byte elsewhere, flipped, and one 64-byte
 * store. The bytes a store writes past its run are overwritten by the next runs or rows (rows are
 * written in order, the buffer has 64 bytes to spare after the last); those after the last run are
 * the row's padding to k4, whose weights are zero, and get a zero store of their own. Fewer steps
 * than a copy of each run and of the padding's bytes on either side, which cost more than the GEMM
 * of a 16-channel layer. */
VNNI static inline void im2col_row_short(const struct mac_layer *L, const uint8_t *in, int64_t b, int64_t oh,
                                         int64_t ow, __m512i zraw, __m512i flip, uint8_t *row)
{
    int64_t cin = L->cin, span = L->kw * cin;
    int64_t ix0 = ow * L->stride_w - L->pad_left;
    int64_t lo = ix0 < 0 ? -ix0 : 0, hi = L->w - ix0; /* taps [lo, hi) are inside */
    if (hi > L->kw)
        hi = L->kw;
    if (hi < lo)
        hi = lo;
    __mmask64 below_hi = hi * cin >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << (hi * cin)) - 1);
    __mmask64 below_lo = lo * cin >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << (lo * cin)) - 1);
    __mmask64 k = below_hi & ~below_lo;
    __m512i z = _mm512_xor_si512(zraw, flip);
    for (int64_t ky = 0; ky < L->kh; ky++) {
        int64_t iy = oh * L->stride_h - L->pad_top + ky * L->dil_h;
        __m512i v = z;
        if (iy >= 0 && iy < L->h) {
            uintptr_t at = (uintptr_t)in + (uintptr_t)(((b * L->h + iy) * L->w + ix0) * cin);
            v = _mm512_xor_si512(_mm512_mask_loadu_epi8(zraw, k, (const void *)at), flip);
        }
        _mm512_storeu_si512(row + ky * span, v);
    }
    uint32_t zero = 0;
    memcpy(row + L->kh * span, &zero, 4); /* k4 - k < 4 bytes; past k4 the next row follows */
}

/* r[i]'s element j to r[j]'s element i: two rounds of in-lane unpacks, two of lane shuffles. */
VNNI static inline __attribute__((always_inline)) void transpose16_epi32(__m512i *r)
{
    __m512i t[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) { /* r[i + j]'s lane l: rows i .. i + 3 of column 4 l + j */
        r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
        r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
        r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
        r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    for (int j = 0; j < 4; j++) {
        t[j] = _mm512_shuffle_i32x4(r[j], r[j + 4], 0x88);
        t[j + 4] = _mm512_shuffle_i32x4(r[j], r[j + 4], 0xDD);
        t[j + 8] = _mm512_shuffle_i32x4(r[j + 8], r[j + 12], 0x88);
        t[j + 12] = _mm512_shuffle_i32x4(r[j + 8], r[j + 12], 0xDD);
    }
    for (int j = 0; j < 8; j++) {
        r[j] = _mm512_shuffle_i32x4(t[j], t[j + 8], 0x88);
        r[j + 8] = _mm512_shuffle_i32x4(t[j], t[j + 8], 0xDD);
    }
}

/* Bytes k .. k + 63 of filter rows c0 .. c0 + 15 ([cout][K] at mem, rows past cout and bytes past K
 * read as 0; less zp, modulo 256, with sub) transposed as 16 x 16 groups of 4 bytes: r[q] is then
 * quad k / 4 + q of the 16 channels, the 64 bytes packed8 holds for it. The weights are read once a
 * job: fetched non-temporal, they evict less of what the caches hold for the rest of the job and
 * the Python after it. */
VNNI static inline __attribute__((always_inline)) void load_quads_vnni(const struct mac_layer *L, const uint8_t *mem,
                                                                       __m512i z, int64_t c0, int64_t k, __m512i *r,
                                                                       int sub)
{
    int64_t K = L->kh * L->kw * L->cin, rows = L->cout - c0 < 0 ? 0 : L->cout - c0 < NR ? L->cout - c0 : NR;
    int64_t left = K - k;
    __mmask64 m = left >= 64 ? ~(__mmask64)0 : left <= 0 ? 0 : (((__mmask64)1 << left) - 1);
    for (int64_t n = 0; n < NR; n++) {
        if (n < rows && k + 64 < K)
            _mm_prefetch((const char *)(mem + (c0 + n) * K + k + 64), _MM_HINT_NTA);
        __m512i w = n < rows ? _mm512_maskz_loadu_epi8(m, mem + (c0 + n) * K + k) : _mm512_setzero_si512();
        r[n] = sub && n < rows ? _mm512_maskz_sub_epi8(m, w, z) : w;
    }
    transpose16_epi32(r);
}

/* Panels [c0 / NR, c0 / NR + np) of packed8 and bias8 made from the filter at mem (MAC_CHECK_REPACK),
 * as _pack_vnni in __init__.py makes the plan's: the filter less zp transposed into [panel][k4 / 4]
 * [NR][4] (zeros past K and cout), and bias - z * sum(w - zp) modulo 2**32 per channel (zeros past
 * cout), the sums taken from the packed bytes by vpdpbusd against ones. */
VNNI static inline __attribute__((always_inline)) void pack_panels_body_vnni(const struct mac_layer *L,
                                                                             const uint8_t *mem, int32_t zp,
                                                                             int64_t c0, int np, int8_t *packed,
                                                                             int32_t *bias8, int sub, int sum)
{
    int64_t k4 = L->k4;
    __m512i z = _mm512_set1_epi8((char)zp), ones = _mm512_set1_epi8(1);
    __m512i zin = _mm512_set1_epi32(L->input_zp + (L->in_signed ? 128 : 0));
    for (int p = 0; p < np; p++, c0 += NR) {
        int64_t rows = L->cout - c0 < 0 ? 0 : L->cout - c0 < NR ? L->cout - c0 : NR;
        int8_t *panel = packed + p * NR * k4;
        __m512i sums = _mm512_setzero_si512();
        for (int64_t k = 0; k < k4; k += 64) {
            int64_t quads = (k4 - k) / 4 < 16 ? (k4 - k) / 4 : 16;
            __m512i r[16];
            load_quads_vnni(L, mem, z, c0, k, r, sub);
            for (int64_t q = 0; q < quads; q++) {
                _mm512_storeu_si512(panel + (k / 4 + q) * NR * 4, r[q]);
                if (sum)
                    sums = _mm512_dpbusd_epi32(sums, ones, r[q]);
            }
        }
        __m512i bias = _mm512_maskz_loadu_epi32((__mmask16)((1u << rows) - 1), L->bias + c0);
        _mm512_storeu_si512(bias8 + p * NR, sum ? _mm512_sub_epi32(bias, _mm512_mullo_epi32(zin, sums)) : bias);
    }
}

/* pack_panels_body_vnni without the subtraction when the zero point is 0 (int8 filters) and without
 * the sums when z is 0 (an int8 input whose zero point is -128, as after a ReLU): each a sixth of
 * the packing's instructions. */
VNNI static void pack_panels_vnni(const struct mac_layer *L, const uint8_t *mem, int32_t zp, int64_t c0, int np,
                                  int8_t *packed, int32_t *bias8)
{
    int sum = L->input_zp + (L->in_signed ? 128 : 0) != 0;
    if (zp == 0 && !sum)
        pack_panels_body_vnni(L, mem, zp, c0, np, packed, bias8, 0, 0);
    else if (zp == 0)
        pack_panels_body_vnni(L, mem, zp, c0, np, packed, bias8, 0, 1);
    else
        pack_panels_body_vnni(L, mem, zp, c0, np, packed, bias8, 1, 1);
}

/* CONV2D / FULLY_CONNECTED with the plan's packed8 (u8 im2col rows x int8 panels).
 *
 * A 1x1 layer with stride 1 and no padding (FULLY_CONNECTED too: 1x1 on [rows, 1, 1, K]) has the
 * input rows themselves as its GEMM rows, lda = cin: uint8 input is read in place, int8 input is
 * flipped in one run per block. A row's last quad may run into the next row's bytes when cin is
 * not a multiple of 4: their weights are zero. Only tiles whose reads would pass the input's end
 * are copied (with zeros after the last row). */
VNNI static inline __attribute__((always_inline)) int conv_u8_mode_vnni(const struct mac_layer *L, const void *in,
                                                                        void *out, int mode, const uint8_t *fmem,
                                                                        int32_t fzp)
{
    int64_t M = L->n * L->out_h * L->out_w, panels = L->cout_pad / NR, cin = L->cin;
    int direct = L->kh == 1 && L->kw == 1 && L->stride_h == 1 && L->stride_w == 1 && L->pad_top == 0 &&
                 L->pad_left == 0 && L->out_h == L->h && L->out_w == L->w && cin > 0;
    int64_t lda = direct ? cin : L->k4;
    int64_t mb = (256 * 1024) / (lda ? lda : 1); /* A block in L2; every panel pair is read once per block */
    mb = mb / MRV * MRV;
    if (mb < MRV)
        mb = MRV;
    if (mb > (M + MRV - 1) / MRV * MRV)
        mb = (M + MRV - 1) / MRV * MRV;
    /* the rows, then k4 bytes for the last tile's reads and 64 for im2col_row_short's last store */
    uint8_t *a = aligned_alloc(64, ((size_t)(mb * lda + L->k4 + 64) + 63) / 64 * 64);
    /* fmem (MAC_CHECK_REPACK): each panel pair packed from the filter's memory into pair, in cache */
    int8_t *pair = fmem ? aligned_alloc(64, (size_t)(2 * NR * L->k4 + 2 * NR * 4)) : NULL;
    int32_t *pair_bias = pair ? (int32_t *)(pair + 2 * NR * L->k4) : NULL;
    if (!a || (fmem && !pair)) {
        free(a);
        free(pair);
        return -1;
    }
    __m512i flip = _mm512_set1_epi8(L->in_signed ? (char)0x80 : 0);
    __m512i zv = _mm512_set1_epi8((char)(uint8_t)(L->input_zp + (L->in_signed ? 0x80 : 0)));
    int short_rows = !direct && L->dil_w == 1 && L->kw * cin <= 64;
    __m512i zraw = _mm512_set1_epi8((char)L->input_zp);
    struct rq_vnni q = rq_vnni_init(L);
    int64_t cout = L->cout;
    for (int64_t m0 = 0; m0 < M; m0 += mb) {
        int64_t rows = M - m0 < mb ? M - m0 : mb;
        int64_t tiles = (rows + MRV - 1) / MRV;
        const uint8_t *ablk = a; /* tiles [0, copied_from) read ablk, the others a */
        int64_t copied_from = 0;
        if (direct) {
            const uint8_t *src = (const uint8_t *)in + m0 * cin;
            if (!L->in_signed) {
                ablk = src;
                /* the first tile whose last row's k4 bytes pass the input's end */
                for (copied_from = tiles; copied_from > 0; copied_from--)
                    if ((m0 + copied_from * MRV - 1) * cin + L->k4 <= M * cin)
                        break;
                src += copied_from * MRV * cin;
            }
            int64_t n = (rows - copied_from * MRV) * cin;
            copy_flip(a, src, n, flip);
            memset(a + n, 0, (size_t)((tiles - copied_from) * MRV * cin + L->k4 - n));
        } else {
            int64_t ow = m0 % L->out_w, oh = m0 / L->out_w % L->out_h, b = m0 / L->out_w / L->out_h;
            for (int64_t r = 0; r < tiles * MRV; r++) {
                uint8_t *row = a + r * lda;
                if (r >= rows) {
                    memset(row, 0, (size_t)lda);
                    continue;
                }
                if (short_rows)
                    im2col_row_short(L, in, b, oh, ow, zraw, flip, row);
                else
                    im2col_row_u8(L, in, b, oh, ow, zv, flip, row);
                if (++ow == L->out_w) {
                    ow = 0;
                    if (++oh == L->out_h) {
                        oh = 0;
                        b++;
                    }
                }
            }
        }
        int64_t whole = rows / MRV, rest = rows % MRV;
        char *rest_out = (char *)out + (m0 + whole * MRV) * cout;
        const uint8_t *rest_a = whole < copied_from ? ablk + whole * MRV * lda : a + (whole - copied_from) * MRV * lda;
        for (int64_t p = 0; p < panels; p += 2) {
            int np = p + 1 < panels ? 2 : 1;
            const int8_t *b = L->packed8 + p * NR * L->k4;
            const int32_t *bias = L->bias8 + p * NR;
            if (fmem) {
                pack_panels_vnni(L, fmem, fzp, p * NR, np, pair, pair_bias);
                b = pair;
                bias = pair_bias;
            }
            for (int64_t t = 0; t < whole; t++) {
                char *o = (char *)out + (m0 + t * MRV) * cout;
                const uint8_t *at = t < copied_from ? ablk + t * MRV * lda : a + (t - copied_from) * MRV * lda;
                if (np == 2)
                    gemm_tile_vnni(L, &q, at, lda, p * NR, 2, cout, o, mode, b, bias);
                else
                    gemm_tile_vnni(L, &q, at, lda, p * NR, 1, cout, o, mode, b, bias);
            }
            if (rest && fmem) /* the pair is at hand only now */
                gemm_tail_vnni(L, &q, rest_a, lda, p * NR, np, (int)rest, cout, rest_out, b, bias);
        }
        for (int64_t p = 0; rest && !fmem && p < panels;) {
            int np = panels - p >= 4 ? 4 : panels - p >= 2 ? 2 : 1;
            gemm_tail_vnni(L, &q, rest_a, lda, p * NR, np, (int)rest, cout, rest_out, L->packed8 + p * NR * L->k4,
                           L->bias8 + p * NR);
            p += np;
        }
    }
    free(a);
    free(pair);
    return 0;
}

/* Eight channels' dot products with the u8 row x (K bytes, zeros to the next 64) straight from their
 * filter rows in memory (less zp, modulo 256, with sub), and (with sum) each row's sum, as
 * pack_panels_body_vnni takes it: one vpdpbusd of each filter vector against x, one against ones. */
VNNI static inline __attribute__((always_inline)) void gemv8_vnni(const uint8_t *x, const uint8_t *fmem, int64_t K,
                                                                  int rows, __m512i z, int sub, int sum,
                                                                  int32_t *dots, int32_t *sums)
{
    __m512i ones = _mm512_set1_epi8(1), zero = _mm512_setzero_si512();
    __m512i d0 = zero, d1 = zero, d2 = zero, d3 = zero, d4 = zero, d5 = zero, d6 = zero, d7 = zero;
    __m512i s0 = zero, s1 = zero, s2 = zero, s3 = zero, s4 = zero, s5 = zero, s6 = zero, s7 = zero;
    for (int64_t k = 0; k < K; k += 64) {
        __mmask64 m = K - k >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << (K - k)) - 1);
        __m512i xv = _mm512_loadu_si512(x + k);
#define ROW(R) \
    if (R < rows) { \
        __m512i w = _mm512_maskz_loadu_epi8(m, fmem + R * K + k); \
        if (sub) \
            w = _mm512_maskz_sub_epi8(m, w, z); \
        d##R = _mm512_dpbusd_epi32(d##R, xv, w); \
        if (sum) \
            s##R = _mm512_dpbusd_epi32(s##R, ones, w); \
    }
        ROW(0) ROW(1) ROW(2) ROW(3) ROW(4) ROW(5) ROW(6) ROW(7)
#undef ROW
    }
#define OUT(R) \
    dots[R] = _mm512_reduce_add_epi32(d##R); \
    sums[R] = _mm512_reduce_add_epi32(s##R);
    OUT(0) OUT(1) OUT(2) OUT(3) OUT(4) OUT(5) OUT(6) OUT(7)
#undef OUT
}

/* A GEMM of one row (a classifier's FULLY_CONNECTED) with the filter in memory (MAC_CHECK_REPACK):
 * each channel's dot product from its filter row as it lies, [cout][K], less zp; packing panels
 * would transpose every weight for one row. The same sums modulo 2**32 as the packed GEMM (bias
 * - z * sum(w - zp) + the dot product), requantized 16 channels at a time. */
VNNI static int gemv_vnni(const struct mac_layer *L, const uint8_t *in, char *out, const uint8_t *fmem, int32_t fzp)
{
    int64_t K = L->kh * L->kw * L->cin, cout = L->cout;
    uint8_t *x = aligned_alloc(64, (size_t)((K + 63) / 64 * 64));
    if (!x)
        return -1;
    __m512i flip = _mm512_set1_epi8(L->in_signed ? (char)0x80 : 0);
    copy_flip(x, in, K, flip);
    memset(x + K, 0, (size_t)((K + 63) / 64 * 64 - K));
    int32_t zin = L->input_zp + (L->in_signed ? 128 : 0);
    __m512i z = _mm512_set1_epi8((char)fzp);
    struct rq_vnni q = rq_vnni_init(L);
    for (int64_t c0 = 0; c0 < cout; c0 += NR) {
        int64_t rows = cout - c0 < NR ? cout - c0 : NR;
        int32_t dots[NR] = {0}, sums[NR] = {0};
        for (int64_t j = 0; j < rows; j += 8) {
            int r = rows - j < 8 ? (int)(rows - j) : 8;
            const uint8_t *f = fmem + (c0 + j) * K;
            if (fzp == 0 && zin == 0)
                gemv8_vnni(x, f, K, r, z, 0, 0, dots + j, sums + j);
            else if (fzp == 0)
                gemv8_vnni(x, f, K, r, z, 0, 1, dots + j, sums + j);
            else
                gemv8_vnni(x, f, K, r, z, 1, 1, dots + j, sums + j);
        }
        __mmask16 keep = (__mmask16)((1u << rows) - 1);
        __m512i acc = _mm512_maskz_loadu_epi32(keep, L->bias + c0);
        acc = _mm512_sub_epi32(acc, _mm512_mullo_epi32(_mm512_set1_epi32(zin), _mm512_loadu_si512(sums)));
        acc = _mm512_add_epi32(acc, _mm512_loadu_si512(dots));
        store16_vnni(L, &q, acc, c0, rows, out + c0);
    }
    free(x);
    return 0;
}

/* The GEMM once per requantization mode: its flags become constants in the unrolled stores. With
 * fmem, the filter is packed from there as the GEMM goes (MAC_CHECK_REPACK), else the plan's. */
VNNI static int conv_u8_from_vnni(const struct mac_layer *L, const void *in, void *out, const uint8_t *fmem,
                                  int32_t fzp)
{
    if (fmem && L->n * L->out_h * L->out_w == 1 && L->h == 1 && L->w == 1 && L->kh == 1 && L->kw == 1 &&
        L->pad_top == 0 && L->pad_left == 0 && L->cin > 0)
        return gemv_vnni(L, (const uint8_t *)in, (char *)out, fmem, fzp);
    switch (rq_vnni_init(L).mode) {
    case RQM_SSAT:
        return conv_u8_mode_vnni(L, in, out, RQM_SSAT, fmem, fzp);
    case RQM_USAT:
        return conv_u8_mode_vnni(L, in, out, RQM_USAT, fmem, fzp);
    case 0:
        return conv_u8_mode_vnni(L, in, out, 0, fmem, fzp);
    case RQM_ADD_ZP:
        return conv_u8_mode_vnni(L, in, out, RQM_ADD_ZP, fmem, fzp);
    default: /* RQM_SHL | RQM_ADD_ZP: a left shift means some e = 0, never folded */
        return conv_u8_mode_vnni(L, in, out, RQM_SHL | RQM_ADD_ZP, fmem, fzp);
    }
}

VNNI static int conv_u8_vnni(const struct mac_layer *L, const void *in, void *out)
{
    return conv_u8_from_vnni(L, in, out, NULL, 0);
}

/* Depthwise, one output pixel, channels [0, c_end) (a multiple of 16): whole blocks of 64, then
 * 32 channels in 256-bit vectors and 16 in 128-bit vectors if that many are left (a partly filled
 * block costs a whole one). Four taps' bytes are interleaved by the in-lane unpacks (epi8, then epi16) into
 * per-channel quads, so accumulator j's lane l holds channels 16 l + 4 j .. + 3 (the plan packs
 * the weights in that order); a 4 x 4 transpose of 128-bit lanes restores channel order for the
 * requantization. Taps past the last read the zero-point row against zero weights. L is the
 * driver's copy whose bias has zp * sum w folded in for the AVX2 kernel's raw inputs; this
 * kernel uses bias8. */
/* 16 whole channels of a depthwise pixel: store16_vnni with the mode's flags as constants. */
VNNI static inline __attribute__((always_inline)) void dw_store16_vnni(const struct mac_layer *L,
                                                                       const struct rq_vnni *q, __m512i acc,
                                                                       int64_t c, char *dst, int mode)
{
    if (q->simple)
        store16_mode_vnni(dst, 0xFFFF, requant16_mode_vnni(q, acc, c, mode), mode);
    else
        store16_vnni(L, q, acc, c, 16, dst);
}

/* A quarter block of a depthwise pixel in 128-bit vectors, channels c .. c + 15 of which keep says
 * which exist: accumulator j holds channels 4 j .. + 3, its weights the 16 bytes of lane l (this
 * quarter of its block) of the block's 64 for j. The input bytes are masked loads (a channel past
 * the last is not read: its lane reads 0, against a zero weight) and the stores masked alike. */
VNNI static inline __attribute__((always_inline)) void dw_quarter_vnni(const struct mac_layer *L,
                                                                       const struct rq_vnni *q, const uint8_t **taps,
                                                                       int64_t off, int64_t c, __mmask16 keep,
                                                                       char *out, int mode)
{
    int64_t quads = L->k4 / 4, cp = L->rq_n, cb = c / DW_VNNI * DW_VNNI;
    __m128i flip128 = _mm_set1_epi8(L->in_signed ? (char)0x80 : 0);
    __m128i a0 = _mm_setzero_si128(), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t p = 0; p < quads; p++) {
        const uint8_t *const *t = taps + 4 * p;
        __m128i x0 = _mm_xor_si128(_mm_maskz_loadu_epi8(keep, t[0] + off + c), flip128);
        __m128i x1 = _mm_xor_si128(_mm_maskz_loadu_epi8(keep, t[1] + off + c), flip128);
        __m128i x2 = _mm_xor_si128(_mm_maskz_loadu_epi8(keep, t[2] + off + c), flip128);
        __m128i x3 = _mm_xor_si128(_mm_maskz_loadu_epi8(keep, t[3] + off + c), flip128);
        __m128i lo01 = _mm_unpacklo_epi8(x0, x1), hi01 = _mm_unpackhi_epi8(x0, x1);
        __m128i lo23 = _mm_unpacklo_epi8(x2, x3), hi23 = _mm_unpackhi_epi8(x2, x3);
        const int8_t *w = L->packed8 + (p * cp + cb) * 4 + (c - cb);
        a0 = _mm_dpbusd_epi32(a0, _mm_unpacklo_epi16(lo01, lo23), _mm_loadu_si128((const __m128i *)w));
        a1 = _mm_dpbusd_epi32(a1, _mm_unpackhi_epi16(lo01, lo23), _mm_loadu_si128((const __m128i *)(w + 64)));
        a2 = _mm_dpbusd_epi32(a2, _mm_unpacklo_epi16(hi01, hi23), _mm_loadu_si128((const __m128i *)(w + 128)));
        a3 = _mm_dpbusd_epi32(a3, _mm_unpackhi_epi16(hi01, hi23), _mm_loadu_si128((const __m128i *)(w + 192)));
    }
    __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_inserti128_si256(_mm256_castsi128_si256(a0), a1, 1)),
                                   _mm256_inserti128_si256(_mm256_castsi128_si256(a2), a3, 1), 1);
    v = _mm512_add_epi32(v, _mm512_loadu_si512(L->bias8 + c));
    if (keep == 0xFFFF)
        dw_store16_vnni(L, q, v, c, out + c, mode);
    else if (q->simple)
        store16_mode_vnni(out + c, keep, requant16_mode_vnni(q, v, c, mode), mode);
    else
        store16_vnni(L, q, v, c, __builtin_popcount(keep), out + c);
}

VNNI static inline __attribute__((always_inline)) void dw_pixel_vnni(const struct mac_layer *L,
                                                                     const struct rq_vnni *qp, const uint8_t **taps,
                                                                     int64_t off, int64_t c_end, char *out, int mode)
{
    struct rq_vnni q = *qp;
    int64_t quads = L->k4 / 4, cp = L->rq_n; /* packed8 holds rq_n (a multiple of 64) channels per tap */
    int64_t full = c_end / DW_VNNI * DW_VNNI;
    __m512i flip = _mm512_set1_epi8(L->in_signed ? (char)0x80 : 0);
    for (int64_t c = 0; c < full; c += DW_VNNI) {
        __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
        for (int64_t p = 0; p < quads; p++) {
            const uint8_t *const *t = taps + 4 * p;
            __m512i x0 = _mm512_xor_si512(_mm512_loadu_si512(t[0] + off + c), flip);
            __m512i x1 = _mm512_xor_si512(_mm512_loadu_si512(t[1] + off + c), flip);
            __m512i x2 = _mm512_xor_si512(_mm512_loadu_si512(t[2] + off + c), flip);
            __m512i x3 = _mm512_xor_si512(_mm512_loadu_si512(t[3] + off + c), flip);
            __m512i lo01 = _mm512_unpacklo_epi8(x0, x1), hi01 = _mm512_unpackhi_epi8(x0, x1);
            __m512i lo23 = _mm512_unpacklo_epi8(x2, x3), hi23 = _mm512_unpackhi_epi8(x2, x3);
            const int8_t *w = L->packed8 + (p * cp + c) * 4;
            a0 = _mm512_dpbusd_epi32(a0, _mm512_unpacklo_epi16(lo01, lo23), _mm512_loadu_si512(w));
            a1 = _mm512_dpbusd_epi32(a1, _mm512_unpackhi_epi16(lo01, lo23), _mm512_loadu_si512(w + 64));
            a2 = _mm512_dpbusd_epi32(a2, _mm512_unpacklo_epi16(hi01, hi23), _mm512_loadu_si512(w + 128));
            a3 = _mm512_dpbusd_epi32(a3, _mm512_unpackhi_epi16(hi01, hi23), _mm512_loadu_si512(w + 192));
        }
        __m512i t0 = _mm512_shuffle_i32x4(a0, a1, 0x44), t1 = _mm512_shuffle_i32x4(a2, a3, 0x44);
        __m512i t2 = _mm512_shuffle_i32x4(a0, a1, 0xEE), t3 = _mm512_shuffle_i32x4(a2, a3, 0xEE);
        __m512i v0 = _mm512_shuffle_i32x4(t0, t1, 0x88), v1 = _mm512_shuffle_i32x4(t0, t1, 0xDD);
        __m512i v2 = _mm512_shuffle_i32x4(t2, t3, 0x88), v3 = _mm512_shuffle_i32x4(t2, t3, 0xDD);
#define DWOUT(J) dw_store16_vnni(L, &q, _mm512_add_epi32(v##J, _mm512_loadu_si512(L->bias8 + c + 16 * J)), \
                                 c + 16 * J, out + c + 16 * J, mode);
        DWOUT(0) DWOUT(1) DWOUT(2) DWOUT(3)
#undef DWOUT
    }
    if (c_end - full >= 32) {
        /* half a block in 256-bit vectors: the same unpacks per 128-bit lane, so accumulator j's
         * lane l holds channels 16 l + 4 j .. + 3 and its weights are the first 32 bytes of the
         * block's 64 for j */
        int64_t c = full;
        __m256i flip256 = _mm512_castsi512_si256(flip);
        __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
        for (int64_t p = 0; p < quads; p++) {
            const uint8_t *const *t = taps + 4 * p;
            __m256i x0 = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(t[0] + off + c)), flip256);
            __m256i x1 = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(t[1] + off + c)), flip256);
            __m256i x2 = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(t[2] + off + c)), flip256);
            __m256i x3 = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(t[3] + off + c)), flip256);
            __m256i lo01 = _mm256_unpacklo_epi8(x0, x1), hi01 = _mm256_unpackhi_epi8(x0, x1);
            __m256i lo23 = _mm256_unpacklo_epi8(x2, x3), hi23 = _mm256_unpackhi_epi8(x2, x3);
            const int8_t *w = L->packed8 + (p * cp + c) * 4;
            a0 = _mm256_dpbusd_epi32(a0, _mm256_unpacklo_epi16(lo01, lo23), _mm256_loadu_si256((const __m256i *)w));
            a1 = _mm256_dpbusd_epi32(a1, _mm256_unpackhi_epi16(lo01, lo23),
                                     _mm256_loadu_si256((const __m256i *)(w + 64)));
            a2 = _mm256_dpbusd_epi32(a2, _mm256_unpacklo_epi16(hi01, hi23),
                                     _mm256_loadu_si256((const __m256i *)(w + 128)));
            a3 = _mm256_dpbusd_epi32(a3, _mm256_unpackhi_epi16(hi01, hi23),
                                     _mm256_loadu_si256((const __m256i *)(w + 192)));
        }
        __m512i t01 = _mm512_inserti64x4(_mm512_castsi256_si512(a0), a1, 1); /* a0.l0 a0.l1 a1.l0 a1.l1 */
        __m512i t23 = _mm512_inserti64x4(_mm512_castsi256_si512(a2), a3, 1);
        __m512i v0 = _mm512_shuffle_i32x4(t01, t23, 0x88), v1 = _mm512_shuffle_i32x4(t01, t23, 0xDD);
        dw_store16_vnni(L, &q, _mm512_add_epi32(v0, _mm512_loadu_si512(L->bias8 + c)), c, out + c, mode);
        dw_store16_vnni(L, &q, _mm512_add_epi32(v1, _mm512_loadu_si512(L->bias8 + c + 16)), c + 16,
                        out + c + 16, mode);
        full += 32;
    }
    if (c_end - full >= 16) {
        dw_quarter_vnni(L, &q, taps, off, full, 0xFFFF, out, mode);
        full += 16;
    }
    if (c_end > full) /* the last 1..15 channels: their bytes alone are read and written */
        dw_quarter_vnni(L, &q, taps, off, full, (__mmask16)((1u << (c_end - full)) - 1), out, mode);
}

/* n pixels of an output row: pixel i's taps are taps[t] + i * step, its output out + i * ostep
 * (the requantization's constants set up once per row). */
VNNI static inline __attribute__((always_inline)) void dw_mode_vnni(const struct mac_layer *L, const uint8_t **taps,
                                                                    int64_t c_end, char *out, int64_t n,
                                                                    int64_t step, int64_t ostep, int mode)
{
    struct rq_vnni q = rq_vnni_init(L);
    for (int64_t i = 0; i < n; i++)
        dw_pixel_vnni(L, &q, taps, i * step, c_end, out + i * ostep, mode);
}

VNNI static inline void dw_vnni(const struct mac_layer *L, const uint8_t **taps, int64_t c_end, char *out, int64_t n,
                                int64_t step, int64_t ostep)
{
    switch (rq_vnni_init(L).mode) {
    case RQM_SSAT:
        dw_mode_vnni(L, taps, c_end, out, n, step, ostep, RQM_SSAT);
        break;
    case RQM_USAT:
        dw_mode_vnni(L, taps, c_end, out, n, step, ostep, RQM_USAT);
        break;
    case 0:
        dw_mode_vnni(L, taps, c_end, out, n, step, ostep, 0);
        break;
    case RQM_ADD_ZP:
        dw_mode_vnni(L, taps, c_end, out, n, step, ostep, RQM_ADD_ZP);
        break;
    default:
        dw_mode_vnni(L, taps, c_end, out, n, step, ostep, RQM_SHL | RQM_ADD_ZP);
    }
}

DEFINE_DRIVERS(vnni, VNNI, gemm_6x16_avx2, requant_avx2, dw_vnni, 2)

/* 1 when mem holds the GEMM filter packed8 was made from: [cout][K] bytes that less zp (modulo
 * 256, a bijection) are packed8's [panel][k4 / 4][NR][4]. 16 rows of 64 bytes at a time, transposed
 * as 16 x 16 groups of 4 bytes into packed8's order; bytes past K and rows past cout read as the
 * packing's zeros. */
VNNI static int filter_equals_packed8_vnni(const struct mac_layer *L, const uint8_t *mem, int32_t zp)
{
    int64_t k4 = L->k4;
    __m512i z = _mm512_set1_epi8((char)zp);
    for (int64_t c0 = 0; c0 < L->cout; c0 += NR) {
        const int8_t *panel = L->packed8 + c0 * k4;
        for (int64_t k = 0; k < k4; k += 64) {
            int64_t quads = (k4 - k) / 4 < 16 ? (k4 - k) / 4 : 16;
            __m512i r[16];
            load_quads_vnni(L, mem, z, c0, k, r, zp != 0);
            __mmask16 diff = 0;
            for (int64_t q = 0; q < quads; q++)
                diff |= _mm512_cmpneq_epi32_mask(r[q], _mm512_loadu_si512(panel + (k / 4 + q) * NR * 4));
            if (diff)
                return 0;
        }
    }
    return 1;
}

#endif

/* --- entry points ----------------------------------------------------------------------------------- */
int mac_cpu_isa(void)
{
#if MAC_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni"))
        return MAC_ISA_AVX512VNNI;
    if (__builtin_cpu_supports("avx2"))
        return MAC_ISA_AVX2;
#endif
    return MAC_ISA_GENERIC;
}

/* Runs one layer: ``in`` is the dense NHWC input, ``out`` the dense NHWC output of the output dtype.
 * ``isa`` is MAC_ISA_GENERIC or one the CPU supports (mac_cpu_isa()). 0, or -1 when out of memory. */
int mac_run(const struct mac_layer *L, const void *in, void *out, int isa)
{
#if MAC_X86
    if (isa == MAC_ISA_AVX512VNNI) {
        /* without the byte operands (a weight outside int8, an input zero point outside the
         * input dtype): the int16 kernels (conv_vnni is the AVX2 GEMM built for this target) */
        if (!L->packed8)
            return L->kind == KIND_DEPTHWISE ? depthwise_avx2(L, in, out) : conv_vnni(L, in, out);
        if (L->kind == KIND_DEPTHWISE)
            return depthwise_vnni(L, in, out);
        return conv_u8_vnni(L, in, out);
    }
    if (isa == MAC_ISA_AVX2)
        return L->kind == KIND_DEPTHWISE ? depthwise_avx2(L, in, out) : conv_avx2(L, in, out);
#endif
    (void)isa;
    return L->kind == KIND_DEPTHWISE ? depthwise_generic(L, in, out) : conv_generic(L, in, out);
}

/* 1 when mem holds the GEMM layer's filter (see struct mac_check); 0 when it differs, or when the
 * layer has no packed8 (a CPU without VNNI) or is depthwise: a check that cannot pass. */
int mac_filter_equals_packed(const struct mac_layer *L, const void *mem, int32_t zp)
{
#if MAC_X86
    if (L->packed8 && L->kind != KIND_DEPTHWISE)
        return filter_equals_packed8_vnni(L, (const uint8_t *)mem, zp);
#endif
    (void)L;
    (void)mem;
    (void)zp;
    return 0;
}

/* mac_run() when every check's memory still equals its copy: 0 when it ran, 1 when a parameter
 * changed (nothing written: the caller rebuilds the plan), -1 when out of memory. One call per
 * layer and job: the comparisons cost a memcmp each, not a round of Python per array. */
int mac_run_checked(const struct mac_layer *L, const void *in, void *out, int isa, const struct mac_check *checks,
                    int nchecks)
{
    const struct mac_check *filter = NULL;
    for (int i = 0; i < nchecks; i++) {
        if (checks[i].packed)
            filter = &checks[i];
        else if (checks[i].n && memcmp(checks[i].mem, checks[i].copy, checks[i].n) != 0)
            return 1;
    }
    if (filter) {
#if MAC_X86
        if (filter->packed == MAC_CHECK_REPACK && isa == MAC_ISA_AVX512VNNI && L->packed8 &&
            L->kind != KIND_DEPTHWISE)
            return conv_u8_from_vnni(L, in, out, (const uint8_t *)filter->mem, filter->zp);
#endif
        if (!mac_filter_equals_packed(L, filter->mem, filter->zp))
            return 1;
    }
    return mac_run(L, in, out, isa);
}

/* The dynamic filter less its zero point in the layer's GEMM packing, [panel][K pair][NR][2] of
 * int16 (int32 when wide) with zeros past K and cout: the order plan_layer packs a constant
 * filter in (__init__.py), so the same kernels run it. */
static void pack_dynamic(const struct mac_dynamic *D, const struct mac_layer *L, void *packed)
{
    int64_t K = D->shape[3], kpad = L->kpad, c = 0;
    const int64_t *st = D->strides;
    int wide = L->wide;
    memset(packed, 0, (size_t)(L->cout_pad * kpad) * (wide ? 4 : 2));
    for (int64_t i0 = 0; i0 < D->shape[0]; i0++)
        for (int64_t i1 = 0; i1 < D->shape[1]; i1++)
            for (int64_t i2 = 0; i2 < D->shape[2]; i2++, c++) {
                const uint8_t *row = (const uint8_t *)D->filter + i0 * st[0] + i1 * st[1] + i2 * st[2];
                int64_t at = (c / NR) * kpad * NR + (c % NR) * 2; /* element (c, k): at + k / 2 * 2 NR + k % 2 */
                for (int64_t k = 0; k < K; k++) {
                    uint8_t byte = row[k * st[3]];
                    int32_t v = (D->filter_signed ? (int32_t)(int8_t)byte : (int32_t)byte) - D->zp;
                    int64_t i = at + (k >> 1) * 2 * NR + (k & 1);
                    if (wide)
                        ((int32_t *)packed)[i] = v;
                    else
                        ((int16_t *)packed)[i] = (int16_t)v;
                }
            }
}

/* A FULLY_CONNECTED whose filter is an activation: every check (bias, per-channel quantization)
 * compared as mac_run_checked does, the filter packed from memory as it is now, then the layer run
 * on that packing with the int16 (or int32) kernels of isa (an activation less its zero point need
 * not be an int8, which the VNNI byte kernels need). Nothing is kept between runs: no copy of
 * the filter, no comparison of it. 0 when it ran, 1 when a check's parameter changed, -1 when out
 * of memory. */
int mac_run_dynamic(const struct mac_dynamic *D, const void *in, void *out, int isa, const struct mac_check *checks,
                    int nchecks)
{
    const struct mac_layer *L = D->layer;
    for (int i = 0; i < nchecks; i++)
        if (checks[i].n && memcmp(checks[i].mem, checks[i].copy, checks[i].n) != 0)
            return 1;
    size_t bytes = (size_t)(L->cout_pad * L->kpad) * (L->wide ? 4 : 2);
    void *packed = aligned_alloc(64, (bytes + 64) / 64 * 64);
    if (!packed)
        return -1;
    pack_dynamic(D, L, packed);
    struct mac_layer LD = *L;
    LD.packed = packed;
    LD.packed8 = NULL;
    int rc = mac_run(&LD, in, out, isa);
    free(packed);
    return rc;
}

/* The elementwise unit's table lookups (ADD, SUB and MUL of bytes through their 65536-entry
 * tables, LUT, LUT2): out[i] = table[a[i] ^ fa], or with b, table[((a[i] ^ fa) << 8) | (b[i] ^ fb)],
 * elements of esize bytes (1, 2 or 4). out may be a itself (esize 1): element i is read before it
 * is written. */
#define LOOKUP_LOOP(T) \
    do { \
        const T *tab = (const T *)table; \
        T *dst = (T *)out; \
        if (b) \
            for (size_t i = 0; i < n; i++) \
                dst[i] = tab[((unsigned)(a[i] ^ xa) << 8) | (uint8_t)(b[i] ^ xb)]; \
        else \
            for (size_t i = 0; i < n; i++) \
                dst[i] = tab[(uint8_t)(a[i] ^ xa)]; \
    } while (0)

#if MAC_X86
/* A 256-entry byte table in four zmm registers: vpermi2b looks 64 indices up in each half (its 7 low
 * bits), the index's top bit picks the half. n bytes, the last partial vector masked (not read or
 * written past n); out may be a (each vector is loaded before it is stored). */
__attribute__((target("avx512f,avx512bw,avx512vbmi"))) static void lookup256_vbmi(const uint8_t *a,
                                                                                  const uint8_t *table,
                                                                                  uint8_t *out, size_t n,
                                                                                  uint8_t xa)
{
    __m512i t0 = _mm512_loadu_si512(table), t1 = _mm512_loadu_si512(table + 64);
    __m512i t2 = _mm512_loadu_si512(table + 128), t3 = _mm512_loadu_si512(table + 192);
    __m512i flip = _mm512_set1_epi8((char)xa);
    for (size_t i = 0; i < n; i += 64) {
        __mmask64 keep = n - i >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << (n - i)) - 1);
        __m512i idx = _mm512_xor_si512(_mm512_maskz_loadu_epi8(keep, a + i), flip);
        __m512i lo = _mm512_permutex2var_epi8(t0, idx, t1);
        __m512i hi = _mm512_permutex2var_epi8(t2, idx, t3);
        _mm512_mask_storeu_epi8(out + i, keep, _mm512_mask_blend_epi8(_mm512_movepi8_mask(idx), lo, hi));
    }
}

/* A two-byte table lookup (65536 one-byte entries) of 16 elements per step: each index's aligned
 * dword gathered (never past the table) and shifted to its byte. a's bytes are contiguous; b's
 * are contiguous too (b_step 1) or one byte for the whole row (b_step 0). n elements, the tail
 * masked. */
__attribute__((target("avx512f,avx512bw,avx512vl"))) static void lookup2_row_avx512(const uint8_t *a, const uint8_t *b,
                                                                          int b_step, const uint8_t *table,
                                                                          uint8_t *out, size_t n, uint8_t xa,
                                                                          uint8_t xb)
{
    __m512i fa = _mm512_set1_epi32(xa), fb = _mm512_set1_epi32(xb), low2 = _mm512_set1_epi32(3);
    __m512i bb = _mm512_set1_epi32(b[0]);
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 keep = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        __m512i va = _mm512_xor_si512(_mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(keep, a + i)), fa);
        __m512i vb = b_step ? _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(keep, b + i)) : bb;
        __m512i idx = _mm512_or_si512(_mm512_slli_epi32(va, 8), _mm512_xor_si512(vb, fb));
        __m512i word = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), keep, _mm512_srli_epi32(idx, 2), table, 4);
        __m512i v = _mm512_srlv_epi32(word, _mm512_slli_epi32(_mm512_and_si512(idx, low2), 3));
        _mm512_mask_cvtepi32_storeu_epi8(out + i, keep, v);
    }
}

/* What the lookups can use of this CPU (asked once): AVX-512 BW and VL, and VBMI with them. */
#define CPU_AVX512BW_VL 1
#define CPU_AVX512VBMI 2
static int lookup_cpu(void)
{
    static int known = -1;
    if (known < 0) {
        __builtin_cpu_init();
        int bw = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                 __builtin_cpu_supports("avx512vl");
        known = (bw ? CPU_AVX512BW_VL : 0) | (bw && __builtin_cpu_supports("avx512vbmi") ? CPU_AVX512VBMI : 0);
    }
    return known;
}
#endif

void mac_lookup(const uint8_t *a, const uint8_t *b, const void *table, void *out, size_t n, int esize, int fa,
                int fb)
{
    uint8_t xa = (uint8_t)fa, xb = (uint8_t)fb;
#if MAC_X86
    if (esize == 1 && !b && (lookup_cpu() & CPU_AVX512VBMI)) { /* a byte LUT: 64 bytes per four instructions */
        lookup256_vbmi(a, (const uint8_t *)table, (uint8_t *)out, n, xa);
        return;
    }
    if (esize == 1 && b && (lookup_cpu() & CPU_AVX512BW_VL)) { /* LUT2 of bytes: gathers of 16 */
        lookup2_row_avx512(a, b, 1, (const uint8_t *)table, (uint8_t *)out, n, xa, xb);
        return;
    }
#endif
    if (esize == 1)
        LOOKUP_LOOP(uint8_t);
    else if (esize == 2)
        LOOKUP_LOOP(uint16_t);
    else
        LOOKUP_LOOP(uint32_t);
}

/* mac_lookup over a [4]-dimensional shape whose inputs have byte strides sa and sb (0 where an
 * input is broadcast, or a transposed order) and whose output is dense in C order. out must not
 * overlap a strided input. */
#define LOOKUP_STRIDED_LOOP(T) \
    do { \
        const T *tab = (const T *)table; \
        T *dst = (T *)out; \
        for (int64_t i0 = 0; i0 < shape[0]; i0++) \
            for (int64_t i1 = 0; i1 < shape[1]; i1++) \
                for (int64_t i2 = 0; i2 < shape[2]; i2++) { \
                    const uint8_t *pa = a + i0 * sa[0] + i1 * sa[1] + i2 * sa[2]; \
                    if (b) { \
                        const uint8_t *pb = b + i0 * sb[0] + i1 * sb[1] + i2 * sb[2]; \
                        for (int64_t i3 = 0; i3 < shape[3]; i3++) \
                            *dst++ = tab[((unsigned)(pa[i3 * sa[3]] ^ xa) << 8) | (uint8_t)(pb[i3 * sb[3]] ^ xb)]; \
                    } else { \
                        for (int64_t i3 = 0; i3 < shape[3]; i3++) \
                            *dst++ = tab[(uint8_t)(pa[i3 * sa[3]] ^ xa)]; \
                    } \
                } \
    } while (0)

void mac_lookup_strided(const uint8_t *a, const int64_t *sa, const uint8_t *b, const int64_t *sb,
                        const void *table, void *out, const int64_t *shape, int esize, int fa, int fb)
{
    uint8_t xa = (uint8_t)fa, xb = (uint8_t)fb;
#if MAC_X86
    /* LUT2 of bytes whose rows are contiguous in a, and contiguous or one byte in b: by rows */
    if (esize == 1 && b && sa[3] == 1 && (sb[3] == 1 || sb[3] == 0) && (lookup_cpu() & CPU_AVX512BW_VL)) {
        uint8_t *dst = (uint8_t *)out;
        for (int64_t i0 = 0; i0 < shape[0]; i0++)
            for (int64_t i1 = 0; i1 < shape[1]; i1++)
                for (int64_t i2 = 0; i2 < shape[2]; i2++, dst += shape[3])
                    lookup2_row_avx512(a + i0 * sa[0] + i1 * sa[1] + i2 * sa[2],
                                       b + i0 * sb[0] + i1 * sb[1] + i2 * sb[2], (int)sb[3],
                                       (const uint8_t *)table, dst, (size_t)shape[3], xa, xb);
        return;
    }
#endif
    if (esize == 1)
        LOOKUP_STRIDED_LOOP(uint8_t);
    else if (esize == 2)
        LOOKUP_STRIDED_LOOP(uint16_t);
    else
        LOOKUP_STRIDED_LOOP(uint32_t);
}

/* COPY between two 4-d views of esize-byte elements at byte strides ss and ds (a concatenation's
 * slice of channels, say): only the elements are written, never the gaps between them. The views
 * must not overlap. */
void mac_copy_strided(const uint8_t *src, const int64_t *ss, uint8_t *dst, const int64_t *ds, const int64_t *shape,
                      int esize)
{
    int rows = ss[3] == esize && ds[3] == esize; /* each innermost row is one block */
    for (int64_t i0 = 0; i0 < shape[0]; i0++)
        for (int64_t i1 = 0; i1 < shape[1]; i1++)
            for (int64_t i2 = 0; i2 < shape[2]; i2++) {
                const uint8_t *s = src + i0 * ss[0] + i1 * ss[1] + i2 * ss[2];
                uint8_t *d = dst + i0 * ds[0] + i1 * ds[1] + i2 * ds[2];
                if (rows)
                    memcpy(d, s, (size_t)(shape[3] * esize));
                else
                    for (int64_t i3 = 0; i3 < shape[3]; i3++)
                        memcpy(d + i3 * ds[3], s + i3 * ss[3], (size_t)esize);
            }
}

/* RESIZE_BILINEAR: TFLite's ResizeBilinearInteger. dims is n, h, w, c, out_h, out_w; the input is
 * dense NHWC bytes, the output dense [n, out_h, out_w, c]. y0, y1, dy (x0, x1, dx) are each output
 * row's (column's) lower and upper input row and the upper's weight in 1/1024 units (numerics'
 * resize_axis). The corners' weighted sum in 1/2**20 units is divided by 2**20 rounding half away
 * from zero (half up with single_rounding) and stored as C casts it (wrapping: the weights can be
 * negative with half-pixel centers).
 *
 * The sums fit int32: a weight is in [-512, 1024) and its complement in (0, 1536], so a row's sum
 * is at most 255 * 2048 in magnitude and the total 255 * 2048 * 2048 < 2**31 (with the rounding
 * term). So each output pixel's channels (next to each other in NHWC) are one loop of 32-bit lanes:
 * vectorized by the compiler (16 channels at a time and more; generic and AVX2 builds), or 16
 * lanes with masked tails (AVX-512). */
#define RESIZE_BODY(T) \
    for (int64_t b = 0; b < n; b++) \
        for (int64_t oy = 0; oy < oh; oy++) { \
            const T *r0 = (const T *)in + (b * h + y0[oy]) * w * c, *r1 = (const T *)in + (b * h + y1[oy]) * w * c; \
            int32_t wy = (int32_t)dy[oy], wy0 = 1024 - wy; \
            for (int64_t ox = 0; ox < ow; ox++, dst += c) { \
                const T *__restrict p00 = r0 + x0[ox] * c, *__restrict p01 = r0 + x1[ox] * c; \
                const T *__restrict p10 = r1 + x0[ox] * c, *__restrict p11 = r1 + x1[ox] * c; \
                int32_t wx = (int32_t)dx[ox], wx0 = 1024 - wx; \
                for (int64_t ch = 0; ch < c; ch++) { \
                    int32_t top = p00[ch] * wx0 + p01[ch] * wx, bottom = p10[ch] * wx0 + p11[ch] * wx; \
                    int32_t total = top * wy0 + bottom * wy; \
                    int32_t up = (total + (1 << 19)) >> 20, away = -((-total + (1 << 19)) >> 20); \
                    dst[ch] = (uint8_t)(single_rounding || total > 0 ? up : away); \
                } \
            } \
        }

#define RESIZE_VARIANT(NAME, ATTR) \
    ATTR static void NAME(const void *in, uint8_t *__restrict dst, int64_t n, int64_t h, int64_t w, int64_t c, int64_t oh, \
                          int64_t ow, const int64_t *y0, const int64_t *y1, const int64_t *dy, const int64_t *x0, \
                          const int64_t *x1, const int64_t *dx, int in_signed, int single_rounding) \
    { \
        if (in_signed) { \
            RESIZE_BODY(int8_t) \
        } else { \
            RESIZE_BODY(uint8_t) \
        } \
    }

RESIZE_VARIANT(resize_bilinear_generic, )
#if MAC_X86
RESIZE_VARIANT(resize_bilinear_avx2, AVX2)

/* RESIZE_BODY in 16 lanes: any number of channels, the last 1-15 by masked loads and stores. */
#define AVX512BW __attribute__((target("avx512f,avx512bw,avx512vl")))
AVX512BW static inline __attribute__((always_inline)) __m512i resize_load16(const uint8_t *p, __mmask16 k,
                                                                             int in_signed)
{
    __m128i v = _mm_maskz_loadu_epi8(k, p);
    return in_signed ? _mm512_cvtepi8_epi32(v) : _mm512_cvtepu8_epi32(v);
}

AVX512BW static inline __attribute__((always_inline)) void resize_row_avx512(
    const uint8_t *r0, const uint8_t *r1, uint8_t *dst, int64_t c, int64_t ow, const int64_t *x0, const int64_t *x1,
    const int64_t *dx, int32_t wy, int in_signed, int single_rounding)
{
    __m512i half = _mm512_set1_epi32(1 << 19), zero = _mm512_setzero_si512();
    __m512i vwy = _mm512_set1_epi32(wy), vwy0 = _mm512_set1_epi32(1024 - wy);
    for (int64_t ox = 0; ox < ow; ox++, dst += c) {
        const uint8_t *p00 = r0 + x0[ox] * c, *p01 = r0 + x1[ox] * c, *p10 = r1 + x0[ox] * c, *p11 = r1 + x1[ox] * c;
        __m512i vwx = _mm512_set1_epi32((int32_t)dx[ox]), vwx0 = _mm512_set1_epi32(1024 - (int32_t)dx[ox]);
        for (int64_t ch = 0; ch < c; ch += 16) {
            __mmask16 k = c - ch >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (c - ch)) - 1);
            __m512i top = _mm512_add_epi32(_mm512_mullo_epi32(resize_load16(p00 + ch, k, in_signed), vwx0),
                                           _mm512_mullo_epi32(resize_load16(p01 + ch, k, in_signed), vwx));
            __m512i bottom = _mm512_add_epi32(_mm512_mullo_epi32(resize_load16(p10 + ch, k, in_signed), vwx0),
                                              _mm512_mullo_epi32(resize_load16(p11 + ch, k, in_signed), vwx));
            __m512i total = _mm512_add_epi32(_mm512_mullo_epi32(top, vwy0), _mm512_mullo_epi32(bottom, vwy));
            __m512i v = _mm512_srai_epi32(_mm512_add_epi32(total, half), 20);
            if (!single_rounding) { /* half away from zero: -((-total + half) >> 20) unless total > 0 */
                __m512i away = _mm512_sub_epi32(
                    zero, _mm512_srai_epi32(_mm512_add_epi32(_mm512_sub_epi32(zero, total), half), 20));
                v = _mm512_mask_blend_epi32(_mm512_cmpgt_epi32_mask(total, zero), away, v);
            }
            _mm512_mask_cvtepi32_storeu_epi8(dst + ch, k, v);
        }
    }
}

AVX512BW static void resize_bilinear_avx512(const void *in, uint8_t *dst, int64_t n, int64_t h, int64_t w, int64_t c,
                                            int64_t oh, int64_t ow, const int64_t *y0, const int64_t *y1,
                                            const int64_t *dy, const int64_t *x0, const int64_t *x1, const int64_t *dx,
                                            int in_signed, int single_rounding)
{
    for (int64_t b = 0; b < n; b++)
        for (int64_t oy = 0; oy < oh; oy++, dst += ow * c) {
            const uint8_t *r0 = (const uint8_t *)in + (b * h + y0[oy]) * w * c;
            const uint8_t *r1 = (const uint8_t *)in + (b * h + y1[oy]) * w * c;
            int32_t wy = (int32_t)dy[oy];
            /* the flags as constants in each copy */
            if (in_signed && single_rounding)
                resize_row_avx512(r0, r1, dst, c, ow, x0, x1, dx, wy, 1, 1);
            else if (in_signed)
                resize_row_avx512(r0, r1, dst, c, ow, x0, x1, dx, wy, 1, 0);
            else if (single_rounding)
                resize_row_avx512(r0, r1, dst, c, ow, x0, x1, dx, wy, 0, 1);
            else
                resize_row_avx512(r0, r1, dst, c, ow, x0, x1, dx, wy, 0, 0);
        }
}
#endif

void mac_resize_bilinear(const void *in, void *out, const int64_t *dims, const int64_t *y0, const int64_t *y1,
                         const int64_t *dy, const int64_t *x0, const int64_t *x1, const int64_t *dx, int in_signed,
                         int single_rounding, int isa)
{
    void (*resize)(const void *, uint8_t *, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, const int64_t *,
                   const int64_t *, const int64_t *, const int64_t *, const int64_t *, const int64_t *, int,
                   int) = resize_bilinear_generic;
#if MAC_X86 /* isa caps the variant, as in mac_run */
    if (isa >= MAC_ISA_AVX512VNNI && mac_cpu_isa() >= MAC_ISA_AVX512VNNI && (lookup_cpu() & CPU_AVX512BW_VL))
        resize = resize_bilinear_avx512;
    else if (isa >= MAC_ISA_AVX2 && mac_cpu_isa() >= MAC_ISA_AVX2)
        resize = resize_bilinear_avx2;
#endif
    resize(in, (uint8_t *)out, dims[0], dims[1], dims[2], dims[3], dims[4], dims[5], y0, y1, dy, x0, x1, dx,
           in_signed, single_rounding);
}

/* --- SOFTMAX: TFLite's quantized reference softmax (reference_ops::Softmax) over the last axis ---- */
static inline int32_t fx_srdhm(int32_t a, int32_t b) /* SaturatingRoundingDoublingHighMul */
{
    if (a == INT32_MIN && b == INT32_MIN)
        return INT32_MAX;
    return (int32_t)(((int64_t)a * b + ((int64_t)1 << 30)) >> 31);
}

static inline int32_t fx_rdbp(int32_t x, int e) /* RoundingDivideByPOT, e in 0..31 */
{
    if (!e)
        return x;
    return (int32_t)(((int64_t)x + ((int64_t)1 << (e - 1)) - (x < 0)) >> e);
}

static inline int32_t fx_shl_sat(int32_t x, int e) /* SaturatingRoundingMultiplyByPOT<e>, e > 0 */
{
    int32_t threshold = (int32_t)((1u << (31 - e)) - 1);
    if (x > threshold)
        return INT32_MAX;
    if (x < -threshold)
        return INT32_MIN;
    return (int32_t)((uint32_t)x << e);
}

/* gemmlowp's one_over_one_plus_x_for_x_in_0_1: Newton-Raphson in Q2.29, a and the result Q0.31. */
static int32_t fx_one_over_one_plus_x(int32_t a)
{
    int64_t total = (int64_t)a + INT32_MAX;                          /* RoundingHalfSum(a, One) */
    int32_t half_den = (int32_t)((total + (total >= 0 ? 1 : -1)) / 2); /* C division truncates */
    int32_t x = (int32_t)((uint32_t)1515870810 + (uint32_t)fx_srdhm(half_den, -1010580540));
    for (int i = 0; i < 3; i++) {
        int32_t one_minus = (int32_t)((uint32_t)(1 << 29) - (uint32_t)fx_srdhm(half_den, x));
        x = (int32_t)((uint32_t)x + (uint32_t)fx_shl_sat(fx_srdhm(x, one_minus), 2));
    }
    return fx_shl_sat(x, 1);
}

/* rows x depth 8-bit values -> 8-bit probabilities (scale 1/256, the dtype's minimum as zero point).
 * exps and rescaled are the exponential of every difference from the row's maximum, -255..0 (index
 * difference + 255), in Q0.31 and as Q12.19 (numerics' softmax_tables: the input's beta is in
 * them). The sum wraps as int32, as the reference's. 0, or -1 when a row's sum of exponentials
 * puts the output's exponent outside 0..31 (the reference's range check). */
#define SOFTMAX_VALUE(i) (in_signed ? (int32_t)(int8_t)x[i] : (int32_t)x[i])
int mac_softmax(const void *in, void *out, int64_t rows, int64_t depth, int in_signed, int out_signed,
                const int32_t *exps, const int32_t *rescaled)
{
    int32_t lo = out_signed ? -128 : 0, hi = out_signed ? 127 : 255;
    for (int64_t r = 0; r < rows; r++) {
        const uint8_t *x = (const uint8_t *)in + r * depth;
        int32_t max = INT32_MIN;
        for (int64_t i = 0; i < depth; i++)
            if (SOFTMAX_VALUE(i) > max)
                max = SOFTMAX_VALUE(i);
        uint32_t acc = 0;
        for (int64_t i = 0; i < depth; i++)
            acc += (uint32_t)rescaled[SOFTMAX_VALUE(i) - max + 255];
        int32_t sum = (int32_t)acc;
        int headroom = sum < 0 ? 0 : sum == 0 ? 32 : __builtin_clz((uint32_t)sum); /* CountLeadingZeros */
        int exponent = 12 - headroom + 31 - 8;                                  /* bits over unit + 23 */
        if (exponent < 0 || exponent > 31)
            return -1;
        int32_t shifted = (int32_t)(uint32_t)(((uint64_t)(uint32_t)sum << headroom) - ((uint64_t)1 << 31));
        int32_t scale = fx_one_over_one_plus_x(shifted);
        for (int64_t i = 0; i < depth; i++) {
            int64_t o = (int64_t)fx_rdbp(fx_srdhm(scale, exps[SOFTMAX_VALUE(i) - max + 255]), exponent) + lo;
            o = o < lo ? lo : o > hi ? hi : o;
            if (out_signed)
                ((int8_t *)out)[r * depth + i] = (int8_t)o;
            else
                ((uint8_t *)out)[r * depth + i] = (uint8_t)o;
        }
    }
    return 0;
}
#undef SOFTMAX_VALUE

/* The pooling unit: MAXPOOL and AVGPOOL of int8 / uint8 tensors (the output has the input's dtype),
 * over the valid positions of each window; the average rounds half away from zero (TFLite's
 * AveragePool), the result is clamped to [lo, hi] (hi wins, as numpy.clip) and saturated to the
 * dtype. 0, -1 when out of memory, -2 when a window covers no input position. */

/* The input rows [ya, yb) and columns [xa, xb) of output (oy, ox)'s window; 0 when it holds none. */
static inline int pool_window(const struct mac_pool *P, int64_t oy, int64_t ox, int64_t *ya, int64_t *yb,
                              int64_t *xa, int64_t *xb)
{
    int64_t y0 = oy * P->sh - P->pt, x0 = ox * P->sw - P->pl;
    *ya = y0 < 0 ? 0 : y0;
    *yb = y0 + P->fh < P->h ? y0 + P->fh : P->h;
    *xa = x0 < 0 ? 0 : x0;
    *xb = x0 + P->fw < P->w ? x0 + P->fw : P->w;
    return *yb > *ya && *xb > *xa;
}

#if MAC_X86
/* MAXPOOL with the bytes themselves as lanes, 64 channels at a time (the last by masked loads and
 * stores): the maximum of a dtype's values is one of them, and clamping it to [lo, hi] (lo <= hi)
 * then saturating to the dtype is clamping it to lo and hi saturated first. */
AVX512BW static inline __attribute__((always_inline)) int max_pool_body_avx512(const struct mac_pool *P,
                                                                                const uint8_t *in, uint8_t *out,
                                                                                int in_signed)
{
    int64_t c = P->c;
    int32_t dmin = in_signed ? -128 : 0, dmax = in_signed ? 127 : 255;
    int32_t lo = P->lo < dmin ? dmin : P->lo > dmax ? dmax : P->lo;
    int32_t hi = P->hi < dmin ? dmin : P->hi > dmax ? dmax : P->hi;
    __m512i vlo = _mm512_set1_epi8((char)lo), vhi = _mm512_set1_epi8((char)hi);
    __m512i lowest = _mm512_set1_epi8((char)dmin);
    for (int64_t b = 0; b < P->n; b++)
        for (int64_t oy = 0; oy < P->oh; oy++)
            for (int64_t ox = 0; ox < P->ow; ox++) {
                int64_t ya, yb, xa, xb;
                if (!pool_window(P, oy, ox, &ya, &yb, &xa, &xb))
                    return -2;
                uint8_t *o = out + ((b * P->oh + oy) * P->ow + ox) * c;
                for (int64_t ch = 0; ch < c; ch += 64) {
                    __mmask64 k = c - ch >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << (c - ch)) - 1);
                    __m512i m = lowest;
                    for (int64_t y = ya; y < yb; y++)
                        for (int64_t x = xa; x < xb; x++) {
                            __m512i v = _mm512_maskz_loadu_epi8(k, in + ((b * P->h + y) * P->w + x) * c + ch);
                            m = in_signed ? _mm512_max_epi8(m, v) : _mm512_max_epu8(m, v);
                        }
                    m = in_signed ? _mm512_min_epi8(_mm512_max_epi8(m, vlo), vhi)
                                  : _mm512_min_epu8(_mm512_max_epu8(m, vlo), vhi);
                    _mm512_mask_storeu_epi8(o + ch, k, m);
                }
            }
    return 0;
}

AVX512BW static int max_pool_avx512(const struct mac_pool *P, const uint8_t *in, uint8_t *out)
{
    return P->in_signed ? max_pool_body_avx512(P, in, out, 1) : max_pool_body_avx512(P, in, out, 0);
}
#endif

int mac_pool(const struct mac_pool *P, const void *in, void *out)
{
#if MAC_X86
    if (!P->average && P->isa >= MAC_ISA_AVX512VNNI && mac_cpu_isa() >= MAC_ISA_AVX512VNNI &&
        (lookup_cpu() & CPU_AVX512BW_VL))
        return max_pool_avx512(P, (const uint8_t *)in, (uint8_t *)out);
#endif
    int64_t c = P->c;
    int32_t *acc = malloc((size_t)(c ? c : 1) * 4);
    if (!acc)
        return -1;
    int32_t dmin = P->in_signed ? -128 : 0, dmax = P->in_signed ? 127 : 255;
    const int8_t *s8 = in;
    const uint8_t *u8 = in;
    for (int64_t b = 0; b < P->n; b++)
        for (int64_t oy = 0; oy < P->oh; oy++)
            for (int64_t ox = 0; ox < P->ow; ox++) {
                int64_t ya, yb, xa, xb;
                if (!pool_window(P, oy, ox, &ya, &yb, &xa, &xb)) {
                    free(acc);
                    return -2;
                }
                int32_t count = (int32_t)((yb - ya) * (xb - xa));
                for (int64_t ch = 0; ch < c; ch++)
                    acc[ch] = P->average ? 0 : INT32_MIN;
                for (int64_t y = ya; y < yb; y++)
                    for (int64_t x = xa; x < xb; x++) {
                        int64_t off = ((b * P->h + y) * P->w + x) * c;
                        if (P->average && P->in_signed)
                            for (int64_t ch = 0; ch < c; ch++)
                                acc[ch] += s8[off + ch];
                        else if (P->average)
                            for (int64_t ch = 0; ch < c; ch++)
                                acc[ch] += u8[off + ch];
                        else if (P->in_signed)
                            for (int64_t ch = 0; ch < c; ch++)
                                acc[ch] = s8[off + ch] > acc[ch] ? s8[off + ch] : acc[ch];
                        else
                            for (int64_t ch = 0; ch < c; ch++)
                                acc[ch] = u8[off + ch] > acc[ch] ? u8[off + ch] : acc[ch];
                    }
                int64_t o = ((b * P->oh + oy) * P->ow + ox) * c;
                int32_t half = count / 2;
                for (int64_t ch = 0; ch < c; ch++) {
                    int32_t r = acc[ch];
                    if (P->average)
                        r = r > 0 ? (r + half) / count : -((-r + half) / count);
                    r = r < P->lo ? P->lo : r;
                    r = r > P->hi ? P->hi : r;
                    r = r < dmin ? dmin : (r > dmax ? dmax : r);
                    if (P->in_signed)
                        ((int8_t *)out)[o + ch] = (int8_t)r;
                    else
                        ((uint8_t *)out)[o + ch] = (uint8_t)r;
                }
            }
    free(acc);
    return 0;
}

/* 1 when the n bytes at a and b are equal: a plan checks its layer's weights against its own copy. */
int mac_equal(const void *a, const void *b, size_t n)
{
    return memcmp(a, b, n) == 0;
}

/* The units of a bound stream in order, one call for what would otherwise be a Python call per
 * instruction. Stops at the first unit that does not complete: *status is its return (a layer's 1:
 * a parameter no longer matches its plan; -1 out of memory; -2 a pool window covers no input; -4 a
 * softmax row's sum outside the reference's range),
 * and the count of units completed before it is returned (n when every unit ran, *status 0). */
int64_t mac_run_units(const struct mac_unit *units, int64_t n, int *status)
{
    for (int64_t i = 0; i < n; i++) {
        const struct mac_unit *u = &units[i];
        int rc = 0;
        switch (u->kind) {
        case MAC_UNIT_LAYER:
            rc = mac_run_checked((const struct mac_layer *)u->spec, u->a, u->out, u->isa, u->checks,
                                 (int)u->nchecks);
            break;
        case MAC_UNIT_DYNAMIC:
            rc = mac_run_dynamic((const struct mac_dynamic *)u->spec, u->a, u->out, u->isa, u->checks,
                                 (int)u->nchecks);
            break;
        case MAC_UNIT_LOOKUP:
            if (u->shape)
                mac_lookup_strided(u->a, u->sa, u->b, u->sb, u->table, u->out, u->shape, u->esize, u->fa,
                                   u->fb);
            else
                mac_lookup(u->a, u->b, u->table, u->out, (size_t)u->n, u->esize, u->fa, u->fb);
            break;
        case MAC_UNIT_POOL:
            rc = mac_pool((const struct mac_pool *)u->spec, u->a, u->out);
            break;
        case MAC_UNIT_COPY:
            mac_copy_strided(u->a, u->sa, u->out, u->sb, u->shape, u->esize);
            break;
        case MAC_UNIT_SOFTMAX: {
            const struct mac_softmax_unit *S = u->spec;
            rc = mac_softmax(u->a, u->out, S->rows, S->depth, S->in_signed, S->out_signed, S->exps, S->rescaled)
                     ? -4
                     : 0;
            break;
        }
        default:
            rc = -3;
        }
        if (rc != 0) {
            *status = rc;
            return i;
        }
    }
    *status = 0;
    return n;
}

#pragma GCC diagnostic pop

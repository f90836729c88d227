"""Native int8 kernels for the device model: exact int8 GEMM (AVX-512 VNNI) and depthwise convolution.

numpy has no int8 GEMM, and a quantized layer in numpy is several full passes over its tensors.
This module compiles a small C library with cffi (once per source version, into
``$VNPU_CACHE_DIR`` or ``~/.cache/vnpu``) whose kernels do a whole layer in one pass: the integer
dot products, then TFLite's requantization (MultiplyByQuantizedMultiplier with gemmlowp's rounding,
written exactly as the reference kernels do it, int32 wrap-around included), the output zero
point and the clamp, straight into the int8/uint8 output.

Every kernel is bit-exact by construction (integer arithmetic only, modulo 2**32 where the C
reference wraps). :func:`available` is False when the library cannot be built (no compiler) or
``VNPU_NATIVE=0``; the numerics then use their numpy paths. The GEMM needs AVX-512 VNNI at run
time (checked with ``__builtin_cpu_supports``); without it a portable C loop computes the same
integers.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import logging
import os
import shutil
import sys
import tempfile
import threading
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

MODULE_NAME = "_vnpu_native"

CDEF = """
int vn_has_vnni(void);
void vn_add_requant(const void *in1, const void *in2, int64_t count, int in_signed, int32_t zp1, int32_t zp2,
                    int32_t left_shift, int32_t m1, int32_t s1, int32_t m2, int32_t s2, int32_t mo,
                    int32_t so, int32_t ozp, int32_t lo, int32_t hi, int subtract, void *out, int out_signed);
void vn_pack_filter(const int8_t *w, int64_t n, int64_t k, int64_t kp, int64_t npad, int8_t *packed,
                    int64_t *colsum);
void vn_gemm_requant(const uint8_t *a, int64_t m, int64_t kp, const int8_t *bp, int64_t npad, int64_t n,
                     const int32_t *corr, const int32_t *mult, const int32_t *shift, int32_t zp,
                     int32_t lo, int32_t hi, void *out, int out_signed, int force_portable);
void vn_depthwise_requant(const uint8_t *x, int64_t h, int64_t w, int64_t c, int32_t x_signed, int32_t izp,
                          const int8_t *f, int64_t kh, int64_t kw, int32_t f_signed, int32_t fzp,
                          const int32_t *bias, int64_t sh, int64_t sw, int64_t dh, int64_t dw,
                          int64_t pt, int64_t pl, int64_t oh, int64_t ow,
                          const int32_t *mult, const int32_t *shift, int32_t zp, int32_t lo, int32_t hi,
                          void *out, int out_signed);
"""

C_SOURCE = r"""
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <immintrin.h>

int vn_has_vnni(void) {
    static int known = -1;
    if (known < 0) {
        __builtin_cpu_init();
        known = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")
            && __builtin_cpu_supports("avx512vnni");
    }
    return known;
}

/* w [n][k] -> packed [kp/4][npad][4] (zero padding) and the per-row sums of w. With AVX-512 VNNI
 * one gather moves 4 bytes of 16 rows (one packed 64-byte group) and one dpbusd against ones adds
 * them to the 16 rows' sums. */
__attribute__((target("avx512f,avx512bw,avx512vnni")))
static int64_t pack_rows16_vnni(const int8_t *w, int64_t n, int64_t k, int64_t npad, int8_t *packed,
                                int64_t *colsum) {
    int64_t k4 = k & ~(int64_t)3, j0 = 0;
    if (k * 16 >= ((int64_t)1 << 31)) return 0;
    const __m512i ones = _mm512_set1_epi8(1);
    const __m512i rows = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13,
                                                              14, 15), _mm512_set1_epi32((int32_t)k));
    for (; j0 + 16 <= n; j0 += 16) {
        __m512i sums = _mm512_setzero_si512();
        const int8_t *base = w + j0 * k;
        for (int64_t i = 0; i < k4; i += 4) {
            __m512i g = _mm512_i32gather_epi32(rows, (const void *)(base + i), 1);
            _mm512_storeu_si512(packed + ((i >> 2) * npad + j0) * 4, g);
            sums = _mm512_dpbusd_epi32(sums, ones, g);
        }
        int32_t part[16];
        _mm512_storeu_si512(part, sums);
        for (int j = 0; j < 16; j++) {
            int64_t sum = part[j];
            for (int64_t i = k4; i < k; i++) {
                packed[((k4 >> 2) * npad + j0 + j) * 4 + (i - k4)] = base[j * k + i];
                sum += base[j * k + i];
            }
            colsum[j0 + j] = sum;
        }
    }
    return j0;
}

void vn_pack_filter(const int8_t *w, int64_t n, int64_t k, int64_t kp, int64_t npad, int8_t *packed,
                    int64_t *colsum) {
    if (npad != n || kp != k) memset(packed, 0, kp * npad);
    int64_t done = vn_has_vnni() ? pack_rows16_vnni(w, n, k, npad, packed, colsum) : 0;
    for (int64_t j0 = done; j0 < n; j0 += 16) {  /* 16 rows at a time: 16 read streams, 64-byte writes */
        int64_t j1 = j0 + 16 < n ? j0 + 16 : n;
        int64_t k4 = k & ~(int64_t)3;
        for (int64_t i = 0; i < k4; i += 4) {
            int8_t *dst = packed + ((i >> 2) * npad) * 4;
            for (int64_t j = j0; j < j1; j++) memcpy(dst + j * 4, w + j * k + i, 4);
        }
        if (k4 < k) {
            int8_t *dst = packed + ((k4 >> 2) * npad) * 4;
            for (int64_t j = j0; j < j1; j++) memcpy(dst + j * 4, w + j * k + k4, k - k4);
        }
        for (int64_t j = j0; j < j1; j++) {
            int64_t sum = 0;
            for (int64_t i = 0; i < k; i++) sum += w[j * k + i];
            colsum[j] = sum;
        }
    }
}

/* TFLite's MultiplyByQuantizedMultiplier (double rounding) + zero point + clamp, for one row of
 * c channels of int32 accumulators plus a per-channel int32 correction (bias), modulo 2**32.
 * Branch-free, restrict-qualified, so the compiler vectorizes it. Per channel: left = max(shift, 0),
 * right = max(-shift, 0). SRDHM(x, m) = (x * m + 2**30) >> 31 (floor), except
 * x == m == INT32_MIN -> INT32_MAX (a multiplier of INT32_MIN takes the scalar loop);
 * RDBP(v, e) = (v + 2**(e-1) - [v < 0]) >> e for e >= 1, v for e == 0. */
typedef struct {
    int64_t *m, *left, *right, *half, *negmask;
    int32_t *m32, *left32, *right32, *mask32;  /* for the 16-lane int32 path; mask = 2**right - 1 */
    int any_min, avx512;
} qparams;

int vn_has_vnni(void);

static void qparams_init(qparams *q, int64_t c, const int32_t *mult, const int32_t *shift) {
    q->m = malloc(5 * c * sizeof(int64_t) + 4 * (c + 16) * sizeof(int32_t));
    q->left = q->m + c; q->right = q->m + 2 * c; q->half = q->m + 3 * c; q->negmask = q->m + 4 * c;
    q->m32 = (int32_t *)(q->m + 5 * c);
    q->left32 = q->m32 + (c + 16); q->right32 = q->left32 + (c + 16); q->mask32 = q->right32 + (c + 16);
    q->any_min = 0;
    q->avx512 = vn_has_vnni();
    for (int64_t i = 0; i < c; i++) {
        int32_t s = shift[i];
        q->m[i] = mult[i];
        q->left[i] = s > 0 ? s : 0;
        q->right[i] = s > 0 ? 0 : -s;
        q->half[i] = q->right[i] > 0 ? ((int64_t)1 << (q->right[i] - 1)) : 0;
        q->negmask[i] = q->right[i] > 0 ? -1 : 0;
        q->m32[i] = mult[i];
        q->left32[i] = (int32_t)q->left[i];
        q->right32[i] = (int32_t)q->right[i];
        q->mask32[i] = (int32_t)(((int64_t)1 << q->right[i]) - 1);
        if (mult[i] == INT32_MIN) q->any_min = 1;
    }
}

static void qparams_free(qparams *q) { free(q->m); }

/* requant_row's arithmetic on 16 int32 lanes: the 64-bit products of SRDHM come from two
 * vpmuldq (even and odd lanes), (p + 2**30) >> 31 is taken in 64 bits and the low halves are
 * recombined; RDBP is gemmlowp's overflow-free form (x >> e) + (remainder > threshold); the clamp
 * happens before the zero point is added (bounds shifted by it), so nothing overflows. Same
 * integers as the scalar code. */
__attribute__((target("avx512f,avx512bw")))
static void requant_row_avx512(const int32_t *acc, const int32_t *corr, int64_t c, const qparams *q,
                               int32_t zp, int32_t lo, int32_t hi, void *out) {
    const __m512i nudge = _mm512_set1_epi64((int64_t)1 << 30), one = _mm512_set1_epi32(1);
    const __m512i vzp = _mm512_set1_epi32(zp);
    const __m512i vlo = _mm512_set1_epi32(lo - zp), vhi = _mm512_set1_epi32(hi - zp);  /* |zp| <= 2**15 */
    for (int64_t i = 0; i < c; i += 16) {
        __mmask16 k = c - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (c - i)) - 1);
        __m512i x = _mm512_add_epi32(_mm512_maskz_loadu_epi32(k, acc + i),
                                     _mm512_maskz_loadu_epi32(k, corr + i));
        x = _mm512_sllv_epi32(x, _mm512_maskz_loadu_epi32(k, q->left32 + i));
        __m512i m = _mm512_maskz_loadu_epi32(k, q->m32 + i);
        __m512i pe = _mm512_srai_epi64(_mm512_add_epi64(_mm512_mul_epi32(x, m), nudge), 31);
        __m512i po = _mm512_mul_epi32(_mm512_srli_epi64(x, 32), _mm512_srli_epi64(m, 32));
        po = _mm512_srai_epi64(_mm512_add_epi64(po, nudge), 31);
        __m512i h = _mm512_mask_blend_epi32((__mmask16)0xAAAA, pe, _mm512_slli_epi64(po, 32));
        __m512i mask = _mm512_maskz_loadu_epi32(k, q->mask32 + i);
        __m512i thr = _mm512_sub_epi32(_mm512_srai_epi32(mask, 1), _mm512_srai_epi32(h, 31));
        __m512i v = _mm512_srav_epi32(h, _mm512_maskz_loadu_epi32(k, q->right32 + i));
        v = _mm512_mask_add_epi32(v, _mm512_cmpgt_epi32_mask(_mm512_and_si512(h, mask), thr), v, one);
        v = _mm512_add_epi32(_mm512_min_epi32(_mm512_max_epi32(v, vlo), vhi), vzp);
        _mm512_mask_cvtepi32_storeu_epi8((char *)out + i, k, v);
    }
}

#define VN_REQUANT_BODY(OUT_T)                                                                  \
    for (int64_t i = 0; i < c; i++) {                                                           \
        int64_t x = (int32_t)(((uint32_t)acc[i] + (uint32_t)corr[i]) << left[i]);               \
        int64_t h = (x * m[i] + ((int64_t)1 << 30)) >> 31;                                      \
        int64_t v = ((h + half[i] + ((h >> 63) & negmask[i])) >> right[i]) + zp;                \
        v = v < lo ? lo : v;                                                                    \
        out[i] = (OUT_T)(v > hi ? hi : v);                                                      \
    }

__attribute__((always_inline)) static inline void requant_s8(
    const int32_t *restrict acc, const int32_t *restrict corr, int64_t c, const int64_t *restrict m,
    const int64_t *restrict left, const int64_t *restrict right, const int64_t *restrict half,
    const int64_t *restrict negmask, int32_t zp, int32_t lo, int32_t hi, int8_t *restrict out) {
    VN_REQUANT_BODY(int8_t)
}

__attribute__((always_inline)) static inline void requant_u8(
    const int32_t *restrict acc, const int32_t *restrict corr, int64_t c, const int64_t *restrict m,
    const int64_t *restrict left, const int64_t *restrict right, const int64_t *restrict half,
    const int64_t *restrict negmask, int32_t zp, int32_t lo, int32_t hi, uint8_t *restrict out) {
    VN_REQUANT_BODY(uint8_t)
}

/* The one product SRDHM saturates: scalar, for rows whose multipliers include INT32_MIN. */
static void requant_slow(const int32_t *acc, const int32_t *corr, int64_t c, const qparams *q, int32_t zp,
                         int32_t lo, int32_t hi, void *out, int out_signed) {
    for (int64_t i = 0; i < c; i++) {
        int64_t x = (int32_t)(((uint32_t)acc[i] + (uint32_t)corr[i]) << q->left[i]);
        int64_t h = (x == INT32_MIN && q->m[i] == INT32_MIN) ? INT32_MAX
                                                             : (x * q->m[i] + ((int64_t)1 << 30)) >> 31;
        int64_t v = ((h + q->half[i] + ((h >> 63) & q->negmask[i])) >> q->right[i]) + zp;
        v = v < lo ? lo : (v > hi ? hi : v);
        if (out_signed) ((int8_t *)out)[i] = (int8_t)v; else ((uint8_t *)out)[i] = (uint8_t)v;
    }
}

__attribute__((always_inline)) static inline void requant_row(const int32_t *acc, const int32_t *corr,
                                                              int64_t c, const qparams *q, int32_t zp,
                                                              int32_t lo, int32_t hi, void *out,
                                                              int out_signed) {
    if (q->any_min)
        requant_slow(acc, corr, c, q, zp, lo, hi, out, out_signed);
    else if (q->avx512)
        requant_row_avx512(acc, corr, c, q, zp, lo, hi, out);  /* lo, hi lie in the output's range */
    else if (out_signed)
        requant_s8(acc, corr, c, q->m, q->left, q->right, q->half, q->negmask, zp, lo, hi, (int8_t *)out);
    else
        requant_u8(acc, corr, c, q->m, q->left, q->right, q->half, q->negmask, zp, lo, hi, (uint8_t *)out);
}

/* The hot loops are compiled for AVX-512, AVX2 and baseline x86-64; the loader picks one. */
#define VN_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))

/* MultiplyByQuantizedMultiplier with one multiplier and shift (see requant_row), constants hoisted. */
typedef struct { int64_t m, left, right, half, negmask; int min_min; } mbqm_c;

static mbqm_c mbqm_const(int32_t m, int32_t s) {
    mbqm_c c;
    c.m = m;
    c.left = s > 0 ? s : 0;
    c.right = s > 0 ? 0 : -s;
    c.half = c.right > 0 ? ((int64_t)1 << (c.right - 1)) : 0;
    c.negmask = c.right > 0 ? -1 : 0;
    c.min_min = m == INT32_MIN;
    return c;
}

__attribute__((always_inline)) static inline int32_t mbqm1(int32_t x, const mbqm_c c) {
    int64_t xl = (int32_t)((uint32_t)x << c.left);
    int64_t h = (xl * c.m + ((int64_t)1 << 30)) >> 31;
    if (c.min_min && xl == INT32_MIN) h = INT32_MAX;
    return (int32_t)((h + c.half + ((h >> 63) & c.negmask)) >> c.right);
}

/* TFLite's 8-bit ADD/SUB: both inputs shifted left, rescaled to a common scale, summed with int32
 * wrap-around, rescaled to the output, zero point, clamp. Dense, equal-shape operands. */
#define VN_ADD_LOOP(IN_T, OUT_T)                                                                     \
    for (int64_t i = 0; i < count; i++) {                                                            \
        int32_t x1 = (int32_t)((const IN_T *)in1)[i] - zp1;                                          \
        int32_t x2 = (int32_t)((const IN_T *)in2)[i] - zp2;                                          \
        int32_t a = mbqm1((int32_t)((uint32_t)x1 << left_shift), c1);                                \
        int32_t b = mbqm1((int32_t)((uint32_t)x2 << left_shift), c2);                                \
        int32_t raw = (int32_t)(subtract ? (uint32_t)a - (uint32_t)b : (uint32_t)a + (uint32_t)b);   \
        int64_t v = (int64_t)mbqm1(raw, co) + ozp;                                                   \
        v = v < lo ? lo : (v > hi ? hi : v);                                                         \
        ((OUT_T *)out)[i] = (OUT_T)v;                                                                \
    }

VN_CLONES
void vn_add_requant(const void *in1, const void *in2, int64_t count, int in_signed, int32_t zp1, int32_t zp2,
                    int32_t left_shift, int32_t m1, int32_t s1, int32_t m2, int32_t s2, int32_t mo,
                    int32_t so, int32_t ozp, int32_t lo, int32_t hi, int subtract, void *out,
                    int out_signed) {
    const mbqm_c c1 = mbqm_const(m1, s1), c2 = mbqm_const(m2, s2), co = mbqm_const(mo, so);
    if (in_signed && out_signed) { VN_ADD_LOOP(int8_t, int8_t) }
    else if (in_signed) { VN_ADD_LOOP(int8_t, uint8_t) }
    else if (out_signed) { VN_ADD_LOOP(uint8_t, int8_t) }
    else { VN_ADD_LOOP(uint8_t, uint8_t) }
}

VN_CLONES
static void epilogue(const int32_t *row, int64_t n, const int32_t *corr, const qparams *q, int32_t zp,
                     int32_t lo, int32_t hi, void *out, int out_signed) {
    requant_row(row, corr, n, q, zp, lo, hi, out, out_signed);
}

/* acc[r][n] = sum_k a[r][k] * b[k][n] (u8 x s8, int32 modulo 2**32) for 4 rows and all npad columns.
 * bp is packed [kp/4][npad][4]: for one group of 4 k, 16 columns are 64 contiguous bytes. */
__attribute__((target("avx512f,avx512bw,avx512vnni")))
static void tile4_vnni(const uint8_t *a, int64_t kp, const int8_t *bp, int64_t npad, int32_t *acc) {
    for (int64_t n0 = 0; n0 < npad; n0 += 64) {
        int nv = (int)((npad - n0) / 16 < 4 ? (npad - n0) / 16 : 4);
        __m512i c[4][4];
        for (int r = 0; r < 4; r++)
            for (int v = 0; v < 4; v++) c[r][v] = _mm512_setzero_si512();
        const int8_t *b = bp + n0 * 4;
        if (nv == 4) {
            for (int64_t k = 0; k < kp; k += 4) {
                const int8_t *bk = b + (k / 4) * npad * 4;
                __m512i b0 = _mm512_loadu_si512(bk), b1 = _mm512_loadu_si512(bk + 64);
                __m512i b2 = _mm512_loadu_si512(bk + 128), b3 = _mm512_loadu_si512(bk + 192);
                for (int r = 0; r < 4; r++) {
                    int32_t av;
                    memcpy(&av, a + r * kp + k, 4);
                    __m512i ab = _mm512_set1_epi32(av);
                    c[r][0] = _mm512_dpbusd_epi32(c[r][0], ab, b0);
                    c[r][1] = _mm512_dpbusd_epi32(c[r][1], ab, b1);
                    c[r][2] = _mm512_dpbusd_epi32(c[r][2], ab, b2);
                    c[r][3] = _mm512_dpbusd_epi32(c[r][3], ab, b3);
                }
            }
        } else {
            for (int64_t k = 0; k < kp; k += 4) {
                const int8_t *bk = b + (k / 4) * npad * 4;
                for (int r = 0; r < 4; r++) {
                    int32_t av;
                    memcpy(&av, a + r * kp + k, 4);
                    __m512i ab = _mm512_set1_epi32(av);
                    for (int v = 0; v < nv; v++)
                        c[r][v] = _mm512_dpbusd_epi32(c[r][v], ab, _mm512_loadu_si512(bk + 64 * v));
                }
            }
        }
        for (int r = 0; r < 4; r++)
            for (int v = 0; v < nv; v++) _mm512_storeu_si512(acc + r * npad + n0 + 16 * v, c[r][v]);
    }
}

static void tile4_portable(const uint8_t *a, int64_t kp, const int8_t *bp, int64_t npad, int32_t *acc) {
    memset(acc, 0, 4 * npad * sizeof(int32_t));
    for (int r = 0; r < 4; r++) {
        uint32_t *row = (uint32_t *)(acc + r * npad);
        for (int64_t k = 0; k < kp; k += 4) {
            const int8_t *bk = bp + (k / 4) * npad * 4;
            for (int j = 0; j < 4; j++) {
                uint32_t av = a[r * kp + k + j];
                for (int64_t n = 0; n < npad; n++) row[n] += av * (uint32_t)(int32_t)bk[n * 4 + j];
            }
        }
    }
}

void vn_gemm_requant(const uint8_t *a, int64_t m, int64_t kp, const int8_t *bp, int64_t npad, int64_t n,
                     const int32_t *corr, const int32_t *mult, const int32_t *shift, int32_t zp,
                     int32_t lo, int32_t hi, void *out, int out_signed, int force_portable) {
    int vnni = !force_portable && vn_has_vnni();
    qparams q;
    qparams_init(&q, n, mult, shift);
    int32_t *acc = aligned_alloc(64, ((4 * npad * sizeof(int32_t) + 63) / 64) * 64);
    uint8_t *tail = calloc(4 * kp, 1);
    for (int64_t r0 = 0; r0 < m; r0 += 4) {
        int rows = (int)(m - r0 < 4 ? m - r0 : 4);
        const uint8_t *ablk = a + r0 * kp;
        if (rows < 4) {  /* the last rows: zero-padded copy */
            memcpy(tail, ablk, rows * kp);
            ablk = tail;
        }
        if (vnni) tile4_vnni(ablk, kp, bp, npad, acc); else tile4_portable(ablk, kp, bp, npad, acc);
        for (int r = 0; r < rows; r++)
            epilogue(acc + r * npad, n, corr, &q, zp, lo, hi, (char *)out + (r0 + r) * n, out_signed);
    }
    free(tail);
    free(acc);
    qparams_free(&q);
}

/* NHWC depthwise convolution with depth multiplier 1: acc[c] = bias[c] + sum over the taps inside
 * the input of (x - izp) * (f - fzp), modulo 2**32; |zero points| <= 255 keeps each product in
 * int32. Then requant_row. */
VN_CLONES
void vn_depthwise_requant(const uint8_t *x, int64_t h, int64_t w, int64_t c, int32_t x_signed, int32_t izp,
                          const int8_t *f, int64_t kh, int64_t kw, int32_t f_signed, int32_t fzp,
                          const int32_t *bias, int64_t sh, int64_t sw, int64_t dh, int64_t dw,
                          int64_t pt, int64_t pl, int64_t oh, int64_t ow,
                          const int32_t *mult, const int32_t *shift, int32_t zp, int32_t lo, int32_t hi,
                          void *out, int out_signed) {
    qparams q;
    qparams_init(&q, c, mult, shift);
    int32_t *fv = malloc(kh * kw * c * sizeof(int32_t));
    for (int64_t i = 0; i < kh * kw * c; i++)
        fv[i] = (f_signed ? (int32_t)f[i] : (int32_t)(uint8_t)f[i]) - fzp;
    int32_t *zero = calloc(c, sizeof(int32_t));
    /* Column phases: plane r holds input columns r, r + sw, r + 2 sw, ... (for sw == 1, the input
     * itself). A tap then covers a contiguous run of one plane's row for consecutive output
     * columns: one long multiply-add per tap and output row instead of one short loop per pixel. */
    int64_t row = ow * c, taps = kh * kw;
    const uint8_t **planes = malloc(sw * sizeof(*planes));
    int64_t *pw = malloc(sw * sizeof(int64_t));
    uint8_t *phase = NULL;
    if (sw == 1) {
        planes[0] = x;
        pw[0] = w;
    } else {
        phase = malloc(h * w * c);
        int64_t off = 0;
        for (int64_t r = 0; r < sw; r++) {
            pw[r] = r < w ? (w - r + sw - 1) / sw : 0;
            planes[r] = phase + off;
            for (int64_t y = 0; y < h; y++)
                for (int64_t j = 0; j < pw[r]; j++)
                    memcpy(phase + off + (y * pw[r] + j) * c, x + (y * w + r + j * sw) * c, c);
            off += h * pw[r] * c;
        }
    }
    int32_t *wtile = malloc(taps * row * sizeof(int32_t));  /* each tap's weights, once per pixel */
    uint32_t *brow = malloc(row * sizeof(uint32_t)), *acc = malloc(row * sizeof(uint32_t));
    for (int64_t t = 0; t < taps; t++)
        for (int64_t ox = 0; ox < ow; ox++)
            memcpy(wtile + t * row + ox * c, fv + t * c, c * sizeof(int32_t));
    for (int64_t ox = 0; ox < ow; ox++)
        for (int64_t i = 0; i < c; i++) brow[ox * c + i] = bias ? (uint32_t)bias[i] : 0u;
    for (int64_t oy = 0; oy < oh; oy++) {
        memcpy(acc, brow, row * sizeof(uint32_t));
        for (int64_t ky = 0; ky < kh; ky++) {
            int64_t iy = oy * sh - pt + ky * dh;
            if (iy < 0 || iy >= h) continue;
            for (int64_t kx = 0; kx < kw; kx++) {
                int64_t shift_x = kx * dw - pl;  /* ix = sw * ox + shift_x */
                int64_t r = ((shift_x % sw) + sw) % sw;  /* the tap reads plane r, column ox + q0 */
                int64_t q0 = (shift_x - r) / sw;
                int64_t ox0 = q0 < 0 ? -q0 : 0, ox1 = pw[r] - q0 < ow ? pw[r] - q0 : ow;
                if (ox1 <= ox0) continue;
                const uint8_t *xs = planes[r] + (iy * pw[r] + ox0 + q0) * c;
                const int32_t *ws = wtile + (ky * kw + kx) * row + ox0 * c;
                uint32_t *as = acc + ox0 * c;
                int64_t len = (ox1 - ox0) * c;
                if (x_signed)
                    for (int64_t j = 0; j < len; j++)
                        as[j] += (uint32_t)(((int32_t)(int8_t)xs[j] - izp) * ws[j]);
                else
                    for (int64_t j = 0; j < len; j++)
                        as[j] += (uint32_t)(((int32_t)xs[j] - izp) * ws[j]);
            }
        }
        for (int64_t ox = 0; ox < ow; ox++)
            requant_row((const int32_t *)acc + ox * c, zero, c, &q, zp, lo, hi,
                        (char *)out + (oy * ow + ox) * c, out_signed);
    }
    free(acc);
    free(brow);
    free(wtile);
    free(phase);
    free(planes);
    free(pw);
    free(zero);
    free(fv);
    qparams_free(&q);
}
"""

_lock = threading.Lock()
_module: ModuleType | None = None
_failed = False


def _source_hash() -> str:
    import cffi

    h = hashlib.sha256()
    for part in (CDEF, C_SOURCE, cffi.__version__, sys.version):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:16]


def _build_dir() -> Path:
    base = os.environ.get("VNPU_CACHE_DIR")
    root = Path(base) if base else Path.home() / ".cache" / "vnpu"
    return root / f"native-{_source_hash()}"


def _load(path: Path) -> ModuleType:
    loader = importlib.machinery.ExtensionFileLoader(MODULE_NAME, str(path))
    spec = importlib.util.spec_from_file_location(MODULE_NAME, path, loader=loader)
    assert spec is not None
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


def build(out_dir: Path) -> Path:
    """Compile the kernels into ``out_dir`` (atomically) and return the extension's path."""
    import cffi

    ffi = cffi.FFI()
    ffi.cdef(CDEF)
    ffi.set_source(MODULE_NAME, C_SOURCE, extra_compile_args=["-O3", "-Wall", "-Wno-unused-function"])
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="vnpu-native-build-") as tmp:
        built = Path(ffi.compile(tmpdir=tmp, verbose=False))
        target = out_dir / built.name
        staged = out_dir / f".{built.name}.{os.getpid()}"
        shutil.copy2(built, staged)
        os.replace(staged, target)  # a concurrent loader never sees a half-written library
    return target


def module() -> Any | None:
    """The compiled kernels (built on first use), or None when they are unavailable."""
    global _module, _failed
    if _module is not None or _failed:
        return _module
    with _lock:
        if _module is not None or _failed:
            return _module
        if os.environ.get("VNPU_NATIVE", "1") == "0":
            _failed = True
            return None
        try:
            d = _build_dir()
            found = sorted(d.glob(f"{MODULE_NAME}*.so")) if d.is_dir() else []
            path = found[0] if found else build(d)
            _module = _load(path)
        except Exception as e:  # no compiler, read-only home, ...: the numpy paths still work
            log.warning("device model: native kernels unavailable (%s); using numpy", e)
            _failed = True
    return _module


_background: threading.Thread | None = None
_background_lock = threading.Lock()


def ready() -> Any | None:
    """The kernels if they can be had without waiting for a compiler, else None.

    The device calls this from inside a job: an already built library is loaded at once, but a
    build (a few seconds of gcc) runs in a background thread while the jobs use the numpy paths
    (the same results), so no job waits long enough to hit a driver's job timeout.
    """
    global _background
    if _module is not None or _failed:
        return _module
    if _lock.locked():  # a build is under way
        return None
    try:
        d = _build_dir()
        built = d.is_dir() and any(d.glob(f"{MODULE_NAME}*.so"))
    except Exception:  # noqa: BLE001 - module() reports it
        built = True
    if built:
        return module()
    with _background_lock:
        if _background is None:
            _background = threading.Thread(target=module, name="vnpu-native-build", daemon=True)
            _background.start()
    return None


def available() -> bool:
    return module() is not None


_vnni: bool | None = None


def has_vnni(wait: bool = True) -> bool:
    """True when the kernels are loaded and the CPU has AVX-512 VNNI (asked once).

    ``wait=False``: do not wait for a build (see :func:`ready`); False until it is done.
    """
    global _vnni
    if _vnni is None:
        mod = module() if wait else ready()
        if mod is None:
            if wait or _failed:
                _vnni = False
            return False
        _vnni = bool(mod.lib.vn_has_vnni())
    return _vnni


def _ptr(mod: Any, arr: np.ndarray, ctype: str) -> Any:
    """A C pointer to a C-contiguous array's first element (``void *``: as ``char[]``).

    ``ffi.from_buffer`` is ten times cheaper than ``arr.ctypes`` and keeps ``arr`` alive for as
    long as the pointer is used; it refuses arrays that are not contiguous.
    """
    return mod.ffi.from_buffer(_ARRAY_TYPES[ctype], arr)


_ARRAY_TYPES = {
    "void *": "char[]",
    "int8_t *": "int8_t[]",
    "uint8_t *": "uint8_t[]",
    "int32_t *": "int32_t[]",
    "int64_t *": "int64_t[]",
}


def per_channel(value: np.ndarray | int, n: int, what: str) -> np.ndarray:
    """A scalar or [n] requantization parameter as a contiguous int32 [n] array (the C code reads n)."""
    a = np.asarray(value)
    if a.ndim == 0:
        return np.full(n, int(a), dtype=np.int32)
    if a.size != n:
        raise ValueError(f"{what} has {a.size} values for {n} channels")
    return np.ascontiguousarray(a.reshape(n), dtype=np.int32)


# --- prepared operands ----------------------------------------------------------------------------
def pack_filter(wmat: np.ndarray) -> tuple[np.ndarray, np.ndarray, int, int]:
    """(filter - zero point) [N, K] (values in [-128, 127]) -> (packed [K/4, Npad, 4] int8, column
    sums [N] int64, Kp, Npad) for :func:`gemm_requant`."""
    mod = module()
    assert mod is not None
    n, k = wmat.shape
    kp = -(-k // 4) * 4
    npad = -(-n // 16) * 16
    w = np.ascontiguousarray(wmat, dtype=np.int8)
    packed = np.empty((kp // 4, npad, 4), dtype=np.int8)
    colsum = np.empty(n, dtype=np.int64)
    mod.lib.vn_pack_filter(
        _ptr(mod, w, "int8_t *"),
        n,
        k,
        kp,
        npad,
        _ptr(mod, packed, "int8_t *"),
        _ptr(mod, colsum, "int64_t *"),
    )
    return packed, colsum, kp, npad


def gemm_requant(
    a: np.ndarray,
    packed: np.ndarray,
    colsum: np.ndarray,
    kp: int,
    npad: int,
    n: int,
    a_offset: int,
    bias: np.ndarray | None,
    multiplier: np.ndarray,
    shift: np.ndarray,
    output_zp: int,
    lo: int,
    hi: int,
    out_dtype: np.dtype,
    portable: bool = False,
) -> np.ndarray:
    """out[M, N] = requant(sum_k (a - a_offset) * w + bias) for ``a`` uint8 [M, Kp]."""
    mod = module()
    assert mod is not None
    m = a.shape[0]
    a = np.ascontiguousarray(a, dtype=np.uint8)
    if a.shape[1] != kp:
        raise ValueError(f"GEMM input has depth {a.shape[1]}, the packed filter {kp}")
    corr = -a_offset * colsum
    if bias is not None:
        corr = corr + per_channel(bias, n, "bias").astype(np.int64)
    corr32 = ((corr + 2**31) % 2**32 - 2**31).astype(np.int32)  # the C code's int32 wrap-around
    mult = per_channel(multiplier, n, "multiplier")
    sh = per_channel(shift, n, "shift")
    out = np.empty((m, n), dtype=out_dtype)
    mod.lib.vn_gemm_requant(
        _ptr(mod, a, "uint8_t *"), m, kp, _ptr(mod, packed, "int8_t *"), npad, n,
        _ptr(mod, corr32, "int32_t *"), _ptr(mod, mult, "int32_t *"), _ptr(mod, sh, "int32_t *"),
        output_zp, lo, hi, _ptr(mod, out, "void *"), int(out_dtype == np.int8), int(portable),
    )  # fmt: skip
    return out


def depthwise_requant(
    x: np.ndarray,
    input_zp: int,
    filt: np.ndarray,
    filter_zp: int,
    bias: np.ndarray | None,
    geometry: tuple[int, int, int, int, int, int, int, int],
    multiplier: np.ndarray,
    shift: np.ndarray,
    output_zp: int,
    lo: int,
    hi: int,
    out_dtype: np.dtype,
) -> np.ndarray:
    """One image [H, W, C] of a depth-multiplier-1 depthwise convolution -> [OH, OW, C]."""
    mod = module()
    assert mod is not None
    h, w, c = x.shape
    _, kh, kw, _ = filt.shape
    sh_, sw_, dh, dw, pt, pl, oh, ow = geometry
    x = np.ascontiguousarray(x)
    f = np.ascontiguousarray(filt.reshape(kh, kw, c))
    b = None if bias is None else per_channel(bias, c, "bias")
    mult = per_channel(multiplier, c, "multiplier")
    shv = per_channel(shift, c, "shift")
    out = np.empty((oh, ow, c), dtype=out_dtype)
    mod.lib.vn_depthwise_requant(
        _ptr(mod, x, "uint8_t *"), h, w, c, int(x.dtype == np.int8), input_zp,
        _ptr(mod, f, "int8_t *"), kh, kw, int(f.dtype == np.int8), filter_zp,
        mod.ffi.NULL if b is None else _ptr(mod, b, "int32_t *"),
        sh_, sw_, dh, dw, pt, pl, oh, ow,
        _ptr(mod, mult, "int32_t *"), _ptr(mod, shv, "int32_t *"), output_zp, lo, hi,
        _ptr(mod, out, "void *"), int(out_dtype == np.int8),
    )  # fmt: skip
    return out


def add_requant(
    in1: np.ndarray,
    in2: np.ndarray,
    zps: tuple[int, int],
    left_shift: int,
    scales: tuple[int, int, int, int, int, int],
    output_zp: int,
    lo: int,
    hi: int,
    subtract: bool,
    out_dtype: np.dtype,
) -> np.ndarray:
    """TFLite's 8-bit ADD/SUB on two equal-shape 8-bit arrays; ``scales`` is (m1, s1, m2, s2, mo, so)."""
    mod = module()
    assert mod is not None
    a = np.ascontiguousarray(in1)
    b = np.ascontiguousarray(in2)
    out = np.empty(a.shape, dtype=out_dtype)
    mod.lib.vn_add_requant(
        _ptr(mod, a, "void *"), _ptr(mod, b, "void *"), a.size, int(a.dtype == np.int8), zps[0], zps[1],
        left_shift, *scales, output_zp, lo, hi, int(subtract), _ptr(mod, out, "void *"),
        int(out_dtype == np.int8),
    )  # fmt: skip
    return out

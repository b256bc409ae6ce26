/*
 * Hearth's CPU attention kernel for encoders: softmax(scale * Q K^T) V in F32, every query
 * seeing every key, no mask, as one ggml custom op (hearth.engine.ml.ggml_attention).
 *
 * Why: ggml computes an encoder's attention as two mul_mat nodes and a soft_max node over
 * [n_kv, n_q, heads] scores. For a vision tower's 6432 rows and 80-float heads, Q K^T is a
 * product with an inner size of 80, where llamafile's sgemm sums each output's vector lanes
 * horizontally after only five fused multiply-adds (about 31 GFLOP/s on two Zen 5 cores), and
 * each head's 165 MB of scores is written, read by soft_max, written and read again by P V.
 * This kernel takes a block of queries at a time: its scores (one row per query over every
 * key) stay in the thread's cache, are computed with the keys' index in the vector lanes
 * (no horizontal sums: the key matrix comes transposed), turned into exponentials in place,
 * multiplied by V and divided by their sum at the end.
 *
 * Numbers: F32 throughout (fused multiply-adds; scores times `scale` as ggml's soft_max
 * applies it, minus the row maximum, ggml's vectorized expf, the row sum accumulated in
 * float lanes, and the output divided by it); the summation order differs from ggml's, so
 * results agree with its graph to float rounding (about 1e-7 relative), not bit for bit.
 *
 * Operands (ggml order, F32, dimension 0 contiguous): src[0] Q `[D, n_q, heads]`, src[1] K
 * transposed `[n_kv, D, heads]`, src[2] V `[Dv, n_kv, heads]` with Dv a multiple of 16 (at
 * most 128); dst `[Dv, heads, n_q]`. The scale is the userdata pointer's low 32 bits (the
 * float's bits). Work is split into (head, block of 32 queries) tasks over ggml's threads.
 * AVX-512 (F, DQ) only; hearth_attention_supported() says whether this CPU has it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define HA_TARGET __attribute__((target("avx512f,avx512dq,fma")))
#define HA_INLINE static inline __attribute__((always_inline)) HA_TARGET
#define HA_QB 32   /* queries per task */
#define HA_KC 512  /* keys per chunk (a chunk of K^T or V stays in L2 for the block) */
#define HA_ROWS 4  /* queries per micro-tile of P V */
#define HA_SROWS 8 /* queries per micro-tile of the scores */
#define HA_SUB 128 /* keys per partial sum of P V */

static struct {
    size_t ne, nb, src, data;
} ha;

#define HA_FIELD(t, off, T) (*(T *)((char *)(t) + (off)))

int hearth_attention_abi(void) { return 1; }

int hearth_attention_supported(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("fma");
}

void hearth_attention_init(size_t off_ne, size_t off_nb, size_t off_src, size_t off_data) {
    ha.ne = off_ne;
    ha.nb = off_nb;
    ha.src = off_src;
    ha.data = off_data;
}

/* ggml's AVX-512 expf (ggml-cpu/vec.h, from Arm's optimized routines): max error 1.45 + 0.5
 * ulp; flushes to zero below -103.97. */
HA_INLINE __m512 ha_expf(__m512 x) {
    const __m512 r = _mm512_set1_ps(0x1.8p23f);
    const __m512 z = _mm512_fmadd_ps(x, _mm512_set1_ps(0x1.715476p+0f), r);
    const __m512 n = _mm512_sub_ps(z, r);
    const __m512 b = _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.7f7d1cp-20f),
                                      _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.62e4p-1f), x));
    const __mmask16 d = _mm512_cmp_ps_mask(_mm512_abs_ps(n), _mm512_set1_ps(192), _CMP_GT_OQ);
    const __m512 u = _mm512_mul_ps(b, b);
    const __m512 j = _mm512_fmadd_ps(
        _mm512_fmadd_ps(_mm512_fmadd_ps(_mm512_set1_ps(0x1.0e4020p-7f), b,
                                        _mm512_set1_ps(0x1.573e2ep-5f)),
                        u,
                        _mm512_fmadd_ps(_mm512_set1_ps(0x1.555e66p-3f), b,
                                        _mm512_set1_ps(0x1.fffdb6p-2f))),
        u, _mm512_fmadd_ps(_mm512_set1_ps(0x1.ffffecp-1f), b, _mm512_set1_ps(1.0F)));
    const __m512 res = _mm512_scalef_ps(j, n);
    if (_mm512_kortestz(d, d)) return res;
    const __m512 zero = _mm512_setzero_ps();
    const __m512 alt = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(n, zero, _CMP_LE_OQ),
                                            _mm512_set1_ps(INFINITY), zero);
    return _mm512_mask_blend_ps(d, res, alt);
}

static __mmask16 ha_tail(int64_t left) {
    if (left <= 0) return 0;
    return left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);
}

/* Scores of `rows` (<= HA_SROWS) queries against keys [j0, j1): s[i * ls + j] = scale * q_i . k_j.
 * kt: K^T rows (stride lk floats), q: query rows (stride lq floats). 32 keys at a time. */
HA_INLINE void ha_scores(const float *q, int64_t lq, int rows, const float *kt, int64_t lk,
                         int64_t d, int64_t j0, int64_t j1, float scale, float *s,
                         int64_t ls) {
    const __m512 vs = _mm512_set1_ps(scale);
    for (int64_t j = j0; j < j1; j += 32) {
        const __mmask16 m0 = ha_tail(j1 - j), m1 = ha_tail(j1 - j - 16);
        __m512 acc[HA_SROWS][2];
        for (int i = 0; i < HA_SROWS; i++) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
        for (int64_t c = 0; c < d; c++) {
            const float *kr = kt + c * lk + j;
            const __m512 k0 = _mm512_maskz_loadu_ps(m0, kr);
            const __m512 k1 = _mm512_maskz_loadu_ps(m1, kr + 16);
            for (int i = 0; i < HA_SROWS; i++) {
                if (i < rows) {
                    const __m512 qv = _mm512_set1_ps(q[i * lq + c]);
                    acc[i][0] = _mm512_fmadd_ps(qv, k0, acc[i][0]);
                    acc[i][1] = _mm512_fmadd_ps(qv, k1, acc[i][1]);
                }
            }
        }
        for (int i = 0; i < rows; i++) {
            _mm512_mask_storeu_ps(s + i * ls + j, m0, _mm512_mul_ps(acc[i][0], vs));
            _mm512_mask_storeu_ps(s + i * ls + j + 16, m1, _mm512_mul_ps(acc[i][1], vs));
        }
    }
}

/* o[i] (+)= sum over keys [j0, j1) of p[i * lp + j] * v_j for `rows` (<= 4) queries (= when
 * `first`); NV vectors of 16 floats per value row (stride lv floats). Called for HA_SUB keys
 * at a time: partial sums of that many products are added up, which keeps the rounding
 * error of thousands of keys near that of a pairwise sum. */
#define HA_PV(NV)                                                                            \
    static HA_TARGET void ha_pv_##NV(const float *p, int64_t lp, int rows, const float *v,    \
                                     int64_t lv, int64_t j0, int64_t j1, float *o,             \
                                     int64_t lo, int first) {                                  \
        __m512 acc[HA_ROWS][NV];                                                              \
        for (int i = 0; i < HA_ROWS; i++)                                                     \
            for (int c = 0; c < NV; c++) acc[i][c] = _mm512_setzero_ps();                     \
        if (rows == HA_ROWS) {                                                                \
            for (int64_t j = j0; j < j1; j++) {                                               \
                const float *vr = v + j * lv;                                                 \
                __m512 vv[NV];                                                                \
                for (int c = 0; c < NV; c++) vv[c] = _mm512_loadu_ps(vr + 16 * c);           \
                for (int i = 0; i < HA_ROWS; i++) {                                           \
                    const __m512 pv = _mm512_set1_ps(p[i * lp + j]);                          \
                    for (int c = 0; c < NV; c++) acc[i][c] = _mm512_fmadd_ps(pv, vv[c], acc[i][c]); \
                }                                                                             \
            }                                                                                 \
        } else {                                                                              \
            for (int64_t j = j0; j < j1; j++) {                                               \
                const float *vr = v + j * lv;                                                 \
                for (int i = 0; i < rows; i++) {                                              \
                    const __m512 pv = _mm512_set1_ps(p[i * lp + j]);                          \
                    for (int c = 0; c < NV; c++)                                              \
                        acc[i][c] = _mm512_fmadd_ps(pv, _mm512_loadu_ps(vr + 16 * c), acc[i][c]); \
                }                                                                             \
            }                                                                                 \
        }                                                                                     \
        for (int i = 0; i < rows; i++)                                                        \
            for (int c = 0; c < NV; c++) {                                                    \
                float *oc = o + i * lo + 16 * c;                                              \
                _mm512_storeu_ps(oc, first ? acc[i][c]                                        \
                                           : _mm512_add_ps(_mm512_loadu_ps(oc), acc[i][c]));  \
            }                                                                                 \
    }
HA_PV(1)
HA_PV(2)
HA_PV(3)
HA_PV(4)
HA_PV(5)
HA_PV(6)
HA_PV(7)
HA_PV(8)

typedef void (*ha_pv_fn)(const float *, int64_t, int, const float *, int64_t, int64_t, int64_t,
                         float *, int64_t, int);
static const ha_pv_fn ha_pv[9] = {NULL,   ha_pv_1, ha_pv_2, ha_pv_3, ha_pv_4,
                                  ha_pv_5, ha_pv_6, ha_pv_7, ha_pv_8};

/* Exponentials of row s[0..n) minus its maximum, in place; returns their sum (accumulated
 * in double lanes, as ggml's soft_max sums in double). */
static HA_TARGET float ha_softmax_row(float *s, int64_t n) {
    __m512 mx = _mm512_set1_ps(-INFINITY);
    for (int64_t j = 0; j < n; j += 16)
        mx = _mm512_max_ps(mx, _mm512_mask_loadu_ps(mx, ha_tail(n - j), s + j));
    const __m512 vmax = _mm512_set1_ps(_mm512_reduce_max_ps(mx));
    __m512d lo = _mm512_setzero_pd(), hi = _mm512_setzero_pd();
    for (int64_t j = 0; j < n; j += 16) {
        const __mmask16 m = ha_tail(n - j);
        const __m512 e = _mm512_maskz_mov_ps(
            m, ha_expf(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, s + j), vmax)));
        _mm512_mask_storeu_ps(s + j, m, e);
        lo = _mm512_add_pd(lo, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
        hi = _mm512_add_pd(hi, _mm512_cvtps_pd(_mm512_extractf32x8_ps(e, 1)));
    }
    return (float)_mm512_reduce_add_pd(_mm512_add_pd(lo, hi));
}

static __thread float *ha_buf;
static __thread size_t ha_cap;

static HA_TARGET void ha_task(const char *qd, const int64_t *qnb, const char *ktd,
                              const int64_t *ktnb, const char *vd, const int64_t *vnb, char *od,
                              const int64_t *onb, int64_t d, int64_t dv, int64_t n_kv,
                              int64_t h, int64_t i0, int64_t i1, float scale, float *s) {
    const float *q = (const float *)(qd + h * qnb[2] + i0 * qnb[1]);
    const float *kt = (const float *)(ktd + h * ktnb[2]);
    const float *v = (const float *)(vd + h * vnb[2]);
    const int64_t lq = qnb[1] / 4, lk = ktnb[1] / 4, lv = vnb[1] / 4, lo = onb[2] / 4;
    float *o = (float *)(od + h * onb[1] + i0 * onb[2]);
    const int64_t nq = i1 - i0, ls = n_kv;
    for (int64_t j0 = 0; j0 < n_kv; j0 += HA_KC) {
        const int64_t j1 = j0 + HA_KC < n_kv ? j0 + HA_KC : n_kv;
        for (int64_t r = 0; r < nq; r += HA_SROWS) {
            const int rows = (int)(nq - r < HA_SROWS ? nq - r : HA_SROWS);
            ha_scores(q + r * lq, lq, rows, kt, lk, d, j0, j1, scale, s + r * ls, ls);
        }
    }
    float sums[HA_QB];
    for (int64_t r = 0; r < nq; r++) sums[r] = ha_softmax_row(s + r * ls, n_kv);
    const ha_pv_fn pv = ha_pv[dv / 16];
    for (int64_t j0 = 0; j0 < n_kv; j0 += HA_KC) {
        const int64_t j1 = j0 + HA_KC < n_kv ? j0 + HA_KC : n_kv;
        for (int64_t r = 0; r < nq; r += HA_ROWS) {
            const int rows = (int)(nq - r < HA_ROWS ? nq - r : HA_ROWS);
            for (int64_t js = j0; js < j1; js += HA_SUB)
                pv(s + r * ls, ls, rows, v, lv, js, js + HA_SUB < j1 ? js + HA_SUB : j1,
                   o + r * lo, lo, js == 0);
        }
    }
    for (int64_t r = 0; r < nq; r++) {
        const __m512 inv = _mm512_set1_ps(1.0f / sums[r]);
        float *orow = o + r * lo;
        for (int64_t c = 0; c < dv; c += 16)
            _mm512_storeu_ps(orow + c, _mm512_mul_ps(_mm512_loadu_ps(orow + c), inv));
    }
}

/* ggml custom-op entry point (ggml_custom_op_t). */
void hearth_attention(void *dst, int ith, int nth, void *userdata) {
    void **src = &HA_FIELD(dst, ha.src, void *);
    const int64_t *qne = &HA_FIELD(src[0], ha.ne, int64_t);
    const int64_t *vne = &HA_FIELD(src[2], ha.ne, int64_t);
    const int64_t d = qne[0], n_q = qne[1], heads = qne[2], dv = vne[0], n_kv = vne[1];
    uint32_t bits = (uint32_t)(uintptr_t)userdata;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    const size_t need = (size_t)HA_QB * (size_t)n_kv;
    if (ha_cap < need) {
        free(ha_buf);
        ha_buf = NULL;
        ha_cap = 0;
        if (posix_memalign((void **)&ha_buf, 64, need * sizeof(float)) != 0) abort();
        ha_cap = need;
    }
    const int64_t blocks = (n_q + HA_QB - 1) / HA_QB, tasks = blocks * heads;
    for (int64_t t = ith; t < tasks; t += nth) {
        const int64_t h = t / blocks, i0 = (t % blocks) * HA_QB;
        const int64_t i1 = i0 + HA_QB < n_q ? i0 + HA_QB : n_q;
        ha_task(HA_FIELD(src[0], ha.data, char *), &HA_FIELD(src[0], ha.nb, int64_t),
                HA_FIELD(src[1], ha.data, char *), &HA_FIELD(src[1], ha.nb, int64_t),
                HA_FIELD(src[2], ha.data, char *), &HA_FIELD(src[2], ha.nb, int64_t),
                HA_FIELD(dst, ha.data, char *), &HA_FIELD(dst, ha.nb, int64_t), d, dv, n_kv, h,
                i0, i1, scale, ha_buf);
    }
}

static struct PyModuleDef ha_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_attention",
    .m_doc = "Hearth's CPU attention kernel (used through ctypes).",
    .m_size = -1,
};

PyMODINIT_FUNC PyInit__attention(void) { return PyModule_Create(&ha_module); }

/*
 * Hearth's own CPU kernel: quantized weights times several activation rows.
 *
 * Few rows (2..8: sequences decoding together). ggml handles them with llamafile's tiled
 * sgemm (Q8_0/Q5_0/Q4_0), which re-decodes each weight block for every tile of columns, or
 * with its one-row dot product once per row (K types); on a two-core machine a 4-row product
 * costs about 2.5x one row. The few-rows code decodes a weight block once, uses it for up to
 * four rows, and prefetches the weight stream: the 4-row product of Gemma 3's output matrix
 * costs about 1.3x one row.
 *
 * Many rows (prompt evaluation). For K-quants ggml has nothing but its one-row dot product
 * (llama.cpp's repacked Q4_K gemm rounds 4-row groups differently from leftover rows, so
 * Hearth cannot use it), and its sgemm for the 32-weight block types spends more on decoding
 * and float work than on products. The many-rows code ("Many rows" below) puts 16 activation
 * rows in the lanes of an AVX-512 vector (8 on AVX2), broadcasts weights decoded once per
 * thread, and computes ggml's lane sums with VNNI. Measured on 2 cores of an AMD EPYC (Zen 5),
 * 512 rows, ggml ne = [k, m] (bench/kernel_rows.py):
 *     Q4_K 1024x640   ggml 3.7 ms, ggml repacked 1.35 ms, this 0.90 ms (AVX2 path 1.9 ms)
 *     Q4_K 2048x640   ggml 6.9 ms, ggml repacked 2.7 ms,  this 1.8 ms  (AVX2 path 3.8 ms)
 *     Q6_K 2048x640   ggml 7.2 ms (no repacked form),     this 1.9 ms  (AVX2 path 3.6 ms)
 *     Q5_0 640x2048   ggml's sgemm 6.0 ms,                this 2.3 ms
 * Against an AVX2-only build of ggml, the AVX2 path takes 0.75x its repacked Q4_K's time and
 * half its Q5_0 sgemm's. Gemma 3 270M evaluates a 512-token prompt at about 1.65x
 * llama.cpp's speed (0.8x with ggml's kernels).
 *
 * Contract: every output element is computed exactly as ggml's CPU vec_dot computes it
 * (and so as llama.cpp does), so results are bit-identical whatever the number of rows, the
 * code path and the split between threads:
 *   - the activation row is quantized to Q8_0 by ggml's own CPU quantizer (its function
 *     pointer is handed over at init), blocks of 32;
 *   - per block, the 32 int8 products are summed in 8 int32 lanes of 4 consecutive products
 *     (lanes 0-3: elements 0-15, lanes 4-7: elements 16-31), converted to float;
 *   - the lanes are accumulated with fused multiply-add by (weight scale * row scale),
 *     the two fp16 scales converted to float and multiplied in float, block by block in order;
 *   - the 8 lanes are summed as ((hi4 + lo4), then the upper pair onto the lower, then
 *     lane 1 onto lane 0).
 * Weight types: Q8_0, Q5_0, Q4_0 (blocks of 32, activations in Q8_0, as above) and Q4_K,
 * Q6_K (blocks of 256, activations in ggml's Q8_K: quantized by our vectorized copy of
 * ggml's x86 quantizer, checked byte for byte against it at init). For the K types the
 * contract is ggml's AVX2 vec_dot form for them: per block, the products of each group of 32
 * weights are summed in 8 int32 lanes of 4 (lanes 0-3 the group's first 16, 4-7 its last 16),
 * times the group's integer scale(s), over the 8 groups, exactly in integers (Q6_K then
 * subtracts 32 * sum(scale * activation sums of 16) per lane pair, for its offset of 32);
 * converted to float and accumulated by fused multiply-add with (row scale * fp16 weight
 * scale). Q4_K adds its minimums separately: sub-block mins times activation sums of 32, in
 * 4 lanes of 2, accumulated with (-row scale * fp16 dmin), summed as (lo2 + hi2, then lane 1
 * onto lane 0) and added to the main sum at the end.
 * Only the float part is pinned down: each lane's integer may be computed any exact way
 * (the many-rows code uses other instructions and another order), the float operations
 * (conversion, the scale product, fused multiply-add per block in order, the sums) are
 * ggml's, lane for lane.
 *
 * Cases and code paths: the few-rows code (AVX2) for 2..8 rows of every type and up to 11
 * rows of K-quants on the AVX2 path; the many-rows code above that for K-quants (AVX-512
 * F/BW/VL/VNNI, or AVX2), and for the 32-weight block types from 12 rows (Q8_0 on AVX-512
 * only: on AVX2, maddubs's pairs could saturate with its weights).
 * The code path is chosen at run time (Python passes it per node, as the custom op's
 * userdata); the Python side (ggml_kernels.py) checks every path the CPU has against ggml
 * on random data before it uses the kernel, and falls back to ggml's mul_mat when a check
 * fails or the CPU lacks AVX2.
 *
 * The entry points (hearth_mul_mat_few; for routed experts, hearth_quantize_rows and
 * hearth_mul_mat_id, "Routed experts" below) have ggml's custom-op signature and run on
 * ggml's own worker threads; the work is split between them. Tensor fields are read
 * through byte offsets given at init (from the ctypes description of struct ggml_tensor),
 * so no ggml header is needed here.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HK_QK 32
#define HK_MAX_COLS 8
#define HK_FEW_MAX_K_AVX2 11 /* K types on the AVX2 path: few-rows code up to 11 rows */
#define HK_CHUNK_ROWS 32 /* even */
#define HK_PREFETCH_ROWS 4 /* how far ahead the weight rows are fetched */

enum { HK_Q4_0 = 2, HK_Q5_0 = 6, HK_Q8_0 = 8, HK_Q4_K = 12, HK_Q6_K = 14 }; /* ggml ids */
#define HK_QK_K 256

typedef struct { uint16_t d; int8_t qs[HK_QK]; } hk_block_q8_0;
typedef struct { uint16_t d; uint8_t qh[4]; uint8_t qs[HK_QK / 2]; } hk_block_q5_0;
typedef struct { uint16_t d; uint8_t qs[HK_QK / 2]; } hk_block_q4_0;
typedef struct { float d; int8_t qs[HK_QK_K]; int16_t bsums[HK_QK_K / 16]; } hk_block_q8_K;
typedef struct { uint16_t d, dmin; uint8_t scales[12]; uint8_t qs[HK_QK_K / 2]; } hk_block_q4_K;
typedef struct {
    uint8_t ql[HK_QK_K / 2], qh[HK_QK_K / 4];
    int8_t scales[HK_QK_K / 16];
    uint16_t d;
} hk_block_q6_K;

typedef void (*hk_quantize_fn)(const float *x, void *y, int64_t k);

/* Byte offsets of the struct ggml_tensor fields used, and ggml's activation quantizers. */
static struct {
    size_t type, ne, nb, src, data;
    hk_quantize_fn quantize_q8_0, quantize_q8_K;
} hk;

#define HK_FIELD(t, off, T) (*(T *)((char *)(t) + (off)))

static int hk_own_q8_K; /* Q8_K activations by our vectorized quantizer (it agrees with ggml's) */
static int hk_check_q8_K(void);

int hearth_kernels_init(void *quantize_q8_0, void *quantize_q8_K, size_t off_type,
                        size_t off_ne, size_t off_nb, size_t off_src, size_t off_data) {
    hk.quantize_q8_0 = (hk_quantize_fn)quantize_q8_0;
    hk.quantize_q8_K = (hk_quantize_fn)quantize_q8_K;
    hk.type = off_type;
    hk.ne = off_ne;
    hk.nb = off_nb;
    hk.src = off_src;
    hk.data = off_data;
    if (quantize_q8_0 == NULL || quantize_q8_K == NULL) return 0;
    hk_own_q8_K = 0;
    hk_own_q8_K = hk_check_q8_K();
    return 1;
}

/* The cases and userdata the entry point takes (Python's ggml_kernels._ABI must match: a
 * stale build would otherwise abort on a case it does not know). */
int hearth_kernels_abi(void) { return 3; }

/* Whether K-quant activations are quantized by Hearth's vectorized copy of ggml's quantizer
 * (1), or by ggml's own function (0: it differed from ggml's, or no x86). */
int hearth_kernels_own_quantizer(void) { return hk_own_q8_K; }

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#define HK_X86 1
#include <immintrin.h>

#define HK_TARGET __attribute__((target("avx2,fma,f16c")))
#define HK_INLINE static inline __attribute__((always_inline)) HK_TARGET

int hearth_kernels_supported(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __builtin_cpu_supports("f16c");
}

HK_INLINE float hk_half(uint16_t h) { return _cvtsh_ss(h); }

/* The 32 4-bit values of a block, one per byte: low nibbles are weights 0-15, high 16-31. */
HK_INLINE __m256i hk_nibbles(const uint8_t *qs) {
    const __m128i x = _mm_loadu_si128((const __m128i *)qs);
    const __m128i lo = _mm_and_si128(x, _mm_set1_epi8(0x0F));
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(x, 4), _mm_set1_epi8(0x0F));
    return _mm256_set_m128i(hi, lo);
}

/* The 32 signed weights of block l of a row, one per byte, and the block's scale. */
HK_INLINE __m256i hk_decode(int type, const void *row, int64_t l, float *scale) {
    if (type == HK_Q8_0) {
        const hk_block_q8_0 *b = (const hk_block_q8_0 *)row + l;
        *scale = hk_half(b->d);
        return _mm256_loadu_si256((const __m256i *)b->qs);
    }
    if (type == HK_Q5_0) {
        const hk_block_q5_0 *b = (const hk_block_q5_0 *)row + l;
        *scale = hk_half(b->d);
        uint32_t bits;
        memcpy(&bits, b->qh, sizeof bits);
        /* Byte i gets qh byte i/8, keeps bit i%8: set when the fifth bit of weight i is 1. */
        const __m256i spread = _mm256_shuffle_epi8(
            _mm256_set1_epi32((int)bits),
            _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0));
        const __m256i bit = _mm256_set1_epi64x((int64_t)0x8040201008040201);
        const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
        /* (nibble | fifth bit << 4) - 16 */
        const __m256i v = _mm256_or_si256(hk_nibbles(b->qs),
                                          _mm256_and_si256(set, _mm256_set1_epi8(0x10)));
        return _mm256_sub_epi8(v, _mm256_set1_epi8(16));
    }
    const hk_block_q4_0 *b = (const hk_block_q4_0 *)row + l;
    *scale = hk_half(b->d);
    return _mm256_sub_epi8(hk_nibbles(b->qs), _mm256_set1_epi8(8));
}

static inline size_t hk_block_size(int type) {
    switch (type) {
    case HK_Q8_0: return sizeof(hk_block_q8_0);
    case HK_Q5_0: return sizeof(hk_block_q5_0);
    case HK_Q4_0: return sizeof(hk_block_q4_0);
    case HK_Q4_K: return sizeof(hk_block_q4_K);
    default: return sizeof(hk_block_q6_K);
    }
}

/* int8 x int8 products of one block, summed in 8 lanes of 4, as float. */
HK_INLINE __m256 hk_block_dot(__m256i w_abs, __m256i w, __m256i x) {
    const __m256i pairs = _mm256_maddubs_epi16(w_abs, _mm256_sign_epi8(x, w));
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_set1_epi16(1), pairs));
}

/* Four lanes summed as ggml does: (0 + 2) + (1 + 3). */
HK_INLINE float hk_hsum4(__m128 s) {
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* Eight lanes: the upper four onto the lower, then as hk_hsum4. */
HK_INLINE float hk_hsum(__m256 v) {
    return hk_hsum4(_mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v)));
}

/* Rows [r0, r1) of the weights times NC quantized columns xq[0..NC) (their scales in xd,
 * NC per block, interleaved). Two rows at a time share each column load. */
HK_INLINE void hk_rows(int type, const char *w, size_t w_stride, int64_t r0, int64_t r1,
                       int64_t nblocks, const void *const *cols, const float *xd,
                       const int nc, float *out, size_t out_stride) {
    const hk_block_q8_0 *const *xq = (const hk_block_q8_0 *const *)cols;
    for (int64_t r = r0; r < r1; r += 2) {
        /* A last odd row is paired with itself and only its first result is kept. */
        const int pair = r + 1 < r1;
        __m256 acc[2][4];
        for (int j = 0; j < 4; j++) acc[0][j] = acc[1][j] = _mm256_setzero_ps();
        const void *row0 = w + r * w_stride, *row1 = w + (r + pair) * w_stride;
        const char *ahead0 = (const char *)row0 + HK_PREFETCH_ROWS * w_stride;
        const size_t bsize = hk_block_size(type);
        for (int64_t l = 0; l < nblocks; l++) {
            /* The weights stream from memory once: fetch the rows a few ahead meanwhile. */
            _mm_prefetch(ahead0 + l * bsize, _MM_HINT_T0);
            _mm_prefetch(ahead0 + w_stride + l * bsize, _MM_HINT_T0);
            float d0, d1;
            const __m256i w0 = hk_decode(type, row0, l, &d0);
            const __m256i w1 = hk_decode(type, row1, l, &d1);
            const __m256i a0 = _mm256_sign_epi8(w0, w0), a1 = _mm256_sign_epi8(w1, w1);
            const __m128 xs = _mm_loadu_ps(xd + l * 4);
            const __m128 s0 = _mm_mul_ps(_mm_set1_ps(d0), xs), s1 = _mm_mul_ps(_mm_set1_ps(d1), xs);
            const __m256 s0x = _mm256_set_m128(s0, s0), s1x = _mm256_set_m128(s1, s1);
            for (int j = 0; j < nc; j++) {
                const __m256i x = _mm256_loadu_si256((const __m256i *)xq[j][l].qs);
                const __m256 sj0 = _mm256_permutevar_ps(s0x, _mm256_set1_epi32(j));
                const __m256 sj1 = _mm256_permutevar_ps(s1x, _mm256_set1_epi32(j));
                acc[0][j] = _mm256_fmadd_ps(sj0, hk_block_dot(a0, w0, x), acc[0][j]);
                acc[1][j] = _mm256_fmadd_ps(sj1, hk_block_dot(a1, w1, x), acc[1][j]);
            }
        }
        for (int j = 0; j < nc; j++) {
            out[j * out_stride + r] = hk_hsum(acc[0][j]);
            if (pair) out[j * out_stride + r + 1] = hk_hsum(acc[1][j]);
        }
    }
}

/* One block of 256 K-quant weights of a row, decoded once for all the columns. */
typedef struct {
    __m256i q[8];     /* the 8 groups of 32 weights, unsigned (Q4_K 0..15, Q6_K 0..63) */
    __m256i scale[8]; /* per group, int16: its first 16 weights' scale (low lane), last 16's */
    __m256i scales16; /* Q6_K: the 16 scales as int16 (for the offset of 32) */
    __m128i mins;     /* Q4_K: the 8 sub-block minimums as int16 */
    float d, dmin;
} hk_kblock;

HK_INLINE void hk_decode_q4_K(const hk_block_q4_K *b, hk_kblock *kb) {
    uint8_t sc[8], mn[8];
    for (int s = 0; s < 4; s++) { /* 6-bit scales and minimums, packed in 12 bytes */
        sc[s] = b->scales[s] & 63;
        mn[s] = b->scales[s + 4] & 63;
        sc[s + 4] = (b->scales[s + 8] & 0x0F) | ((b->scales[s] >> 6) << 4);
        mn[s + 4] = (b->scales[s + 8] >> 4) | ((b->scales[s + 4] >> 6) << 4);
    }
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    for (int j = 0; j < 4; j++) { /* 32 bytes: group 2j in the low nibbles, 2j+1 high */
        const __m256i bits = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * j));
        kb->q[2 * j] = _mm256_and_si256(bits, low4);
        kb->q[2 * j + 1] = _mm256_and_si256(_mm256_srli_epi16(bits, 4), low4);
    }
    for (int s = 0; s < 8; s++) kb->scale[s] = _mm256_set1_epi16(sc[s]);
    kb->mins = _mm_set_epi16(mn[7], mn[6], mn[5], mn[4], mn[3], mn[2], mn[1], mn[0]);
    kb->d = hk_half(b->d);
    kb->dmin = hk_half(b->dmin);
}

HK_INLINE void hk_decode_q6_K(const hk_block_q6_K *b, hk_kblock *kb) {
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    for (int j = 0; j < 2; j++) { /* each half: 64 bytes of low 4 bits, 32 of high 2 bits */
        const __m256i lo0 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * j));
        const __m256i lo1 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * j + 32));
        const __m256i hi = _mm256_loadu_si256((const __m256i *)(b->qh + 32 * j));
        const __m256i h0 = _mm256_slli_epi16(_mm256_and_si256(hi, _mm256_set1_epi8(0x03)), 4);
        const __m256i h1 = _mm256_slli_epi16(_mm256_and_si256(hi, _mm256_set1_epi8(0x0C)), 2);
        const __m256i h2 = _mm256_and_si256(hi, _mm256_set1_epi8(0x30));
        const __m256i h3 = _mm256_srli_epi16(_mm256_and_si256(hi, _mm256_set1_epi8((char)0xC0)), 2);
        kb->q[4 * j] = _mm256_or_si256(_mm256_and_si256(lo0, low4), h0);
        kb->q[4 * j + 1] = _mm256_or_si256(_mm256_and_si256(lo1, low4), h1);
        kb->q[4 * j + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(lo0, 4), low4), h2);
        kb->q[4 * j + 3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(lo1, 4), low4), h3);
    }
    for (int g = 0; g < 8; g++)
        kb->scale[g] = _mm256_set_m128i(_mm_set1_epi16(b->scales[2 * g + 1]),
                                        _mm_set1_epi16(b->scales[2 * g]));
    kb->scales16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b->scales));
    kb->d = hk_half(b->d);
}

/* Rows [r0, r1) of K-quant weights times NC columns of Q8_K activations (as hk_rows). */
HK_INLINE void hk_rows_k(int type, const char *w, size_t w_stride, int64_t r0, int64_t r1,
                         int64_t nblocks, const void *const *cols, const float *unused,
                         const int nc, float *out, size_t out_stride) {
    (void)unused; /* Q8_K blocks carry their float scale; hk_rows takes Q8_0's interleaved */
    const hk_block_q8_K *const *xq = (const hk_block_q8_K *const *)cols;
    const size_t bsize = hk_block_size(type);
    for (int64_t r = r0; r < r1; r++) {
        const char *row = w + r * w_stride, *ahead = row + HK_PREFETCH_ROWS * w_stride;
        __m256 acc[4];
        __m128 acc_min[4];
        for (int j = 0; j < 4; j++) {
            acc[j] = _mm256_setzero_ps();
            acc_min[j] = _mm_setzero_ps();
        }
        for (int64_t l = 0; l < nblocks; l++) {
            for (size_t off = 0; off < bsize; off += 64)
                _mm_prefetch(ahead + l * bsize + off, _MM_HINT_T0);
            hk_kblock kb;
            if (type == HK_Q4_K)
                hk_decode_q4_K((const hk_block_q4_K *)row + l, &kb);
            else
                hk_decode_q6_K((const hk_block_q6_K *)row + l, &kb);
            for (int j = 0; j < nc; j++) {
                const hk_block_q8_K *x = &xq[j][l];
                __m256i sum = _mm256_setzero_si256();
                for (int g = 0; g < 8; g++) {
                    const __m256i xg = _mm256_loadu_si256((const __m256i *)(x->qs + 32 * g));
                    sum = _mm256_add_epi32(
                        sum, _mm256_madd_epi16(kb.scale[g], _mm256_maddubs_epi16(kb.q[g], xg)));
                }
                const __m256i bsums = _mm256_loadu_si256((const __m256i *)x->bsums);
                if (type == HK_Q6_K) /* the weights are stored + 32 */
                    sum = _mm256_sub_epi32(
                        sum, _mm256_slli_epi32(_mm256_madd_epi16(bsums, kb.scales16), 5));
                acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(x->d * kb.d), _mm256_cvtepi32_ps(sum),
                                         acc[j]);
                if (type == HK_Q4_K) {
                    const __m128i sums32 = _mm_hadd_epi16(_mm256_castsi256_si128(bsums),
                                                          _mm256_extracti128_si256(bsums, 1));
                    acc_min[j] = _mm_fmadd_ps(_mm_set1_ps(-x->d * kb.dmin),
                                              _mm_cvtepi32_ps(_mm_madd_epi16(kb.mins, sums32)),
                                              acc_min[j]);
                }
            }
        }
        for (int j = 0; j < nc; j++) {
            const float v = hk_hsum(acc[j]);
            out[j * out_stride + r] = type == HK_Q4_K ? v + hk_hsum4(acc_min[j]) : v;
        }
    }
}

/* One instance per (weight type, column count) so the inner loops are fully specialised. */
typedef void (*hk_rows_fn)(const char *, size_t, int64_t, int64_t, int64_t, const void *const *,
                           const float *, float *, size_t);
#define HK_VARIANT(T, NC, IMPL)                                                                \
    static HK_TARGET __attribute__((noinline)) void hk_rows_##T##_##NC(                        \
        const char *w, size_t ws, int64_t r0, int64_t r1, int64_t nb, const void *const *cols, \
        const float *xd, float *out, size_t os) {                                              \
        IMPL(HK_##T, w, ws, r0, r1, nb, cols, xd, NC, out, os);                                \
    }
#define HK_VARIANTS(T, IMPL) \
    HK_VARIANT(T, 1, IMPL) HK_VARIANT(T, 2, IMPL) HK_VARIANT(T, 3, IMPL) HK_VARIANT(T, 4, IMPL)
HK_VARIANTS(Q8_0, hk_rows)
HK_VARIANTS(Q5_0, hk_rows)
HK_VARIANTS(Q4_0, hk_rows)
HK_VARIANTS(Q4_K, hk_rows_k)
HK_VARIANTS(Q6_K, hk_rows_k)

/* What the entry point needs to know of a weight type. */
typedef struct {
    int64_t block;      /* weights per block: 32, or 256 for the K types */
    size_t x_block;     /* bytes of one block of quantized activations (Q8_0 or Q8_K) */
    hk_rows_fn rows[4]; /* by column count */
} hk_format;

#define HK_FORMAT(T, B, X) {B, sizeof(X), {hk_rows_##T##_1, hk_rows_##T##_2, hk_rows_##T##_3, hk_rows_##T##_4}}

static const hk_format *hk_format_of(int type) {
    static const hk_format q8_0 = HK_FORMAT(Q8_0, HK_QK, hk_block_q8_0);
    static const hk_format q5_0 = HK_FORMAT(Q5_0, HK_QK, hk_block_q8_0);
    static const hk_format q4_0 = HK_FORMAT(Q4_0, HK_QK, hk_block_q8_0);
    static const hk_format q4_K = HK_FORMAT(Q4_K, HK_QK_K, hk_block_q8_K);
    static const hk_format q6_K = HK_FORMAT(Q6_K, HK_QK_K, hk_block_q8_K);
    switch (type) {
    case HK_Q8_0: return &q8_0;
    case HK_Q5_0: return &q5_0;
    case HK_Q4_0: return &q4_0;
    case HK_Q4_K: return &q4_K;
    case HK_Q6_K: return &q6_K;
    default: return NULL;
    }
}

/* ---- Q8_K activations ------------------------------------------------------------------
 *
 * ggml's CPU backend quantizes activations to Q8_K with its scalar reference code on x86
 * (quantize_row_q8_K_ref: about 1 ns a value, a fifth of a 512-row product's time). This is
 * the same computation vectorized: per block of 256, the value of largest magnitude (the
 * first one, with its sign), iscale = -127 / it, q = min(127, round-half-even(iscale * x))
 * (ggml adds 1.5 * 2^23 to the float product, which rounds the same way), d = 1 / iscale and
 * the sums of 16. A row with a non-finite value or an overflowing scale goes to ggml's own
 * function. An all-zero block gets zero sums (ggml leaves them unset: they are multiplied by
 * d = 0 either way). `hearth_kernels_init` checks it against ggml's function on random data
 * and exact ties, and uses ggml's if they differ anywhere.
 */
HK_INLINE int32_t hk_hsum_i32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    return _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32(s, 1)));
}

/* One row of k values (k % 256 == 0); 0 where the row must go to ggml's quantizer. */
static HK_TARGET int hk_quantize_q8_K_fast(const float *x, hk_block_q8_K *y, int64_t k) {
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    const __m256 big = _mm256_set1_ps(3.402823466e+38f);
    for (int64_t b = 0; b < k / HK_QK_K; b++, x += HK_QK_K) {
        __m256 vmax = _mm256_setzero_ps(), finite = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
        for (int j = 0; j < HK_QK_K; j += 8) {
            const __m256 a = _mm256_and_ps(_mm256_loadu_ps(x + j), abs_mask);
            vmax = _mm256_max_ps(vmax, a);
            finite = _mm256_and_ps(finite, _mm256_cmp_ps(a, big, _CMP_LE_OQ));
        }
        if (_mm256_movemask_ps(finite) != 0xFF) return 0; /* NaN or infinity */
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(vmax), _mm256_extractf128_ps(vmax, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        const float amax = _mm_cvtss_f32(m4);
        if (amax == 0.0f) {
            memset(&y[b], 0, sizeof y[b]);
            continue;
        }
        int first = 0; /* the first value of that magnitude decides the sign */
        for (int j = 0; j < HK_QK_K; j += 8) {
            const __m256 a = _mm256_and_ps(_mm256_loadu_ps(x + j), abs_mask);
            const int eq = _mm256_movemask_ps(_mm256_cmp_ps(a, _mm256_set1_ps(amax), _CMP_EQ_OQ));
            if (eq) {
                first = j + __builtin_ctz((unsigned)eq);
                break;
            }
        }
        const float iscale = -127.f / x[first];
        if (!(_mm_cvtss_f32(_mm_and_ps(_mm_set_ss(iscale), _mm256_castps256_ps128(abs_mask))) <=
              3.402823466e+38f))
            return 0; /* the scale overflows (a block of subnormal values) */
        const __m256 vs = _mm256_set1_ps(iscale);
        const __m256i top = _mm256_set1_epi32(127);
        for (int j = 0; j < HK_QK_K; j += 32) {
            __m256i q[4];
            for (int t = 0; t < 4; t++) {
                const __m256 p = _mm256_mul_ps(vs, _mm256_loadu_ps(x + j + 8 * t));
                const __m256 rounded =
                    _mm256_round_ps(p, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
                q[t] = _mm256_min_epi32(_mm256_cvttps_epi32(rounded), top);
            }
            y[b].bsums[j / 16] = (int16_t)hk_hsum_i32(_mm256_add_epi32(q[0], q[1]));
            y[b].bsums[j / 16 + 1] = (int16_t)hk_hsum_i32(_mm256_add_epi32(q[2], q[3]));
            const __m256i p16 = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]),
                                                   _mm256_packs_epi32(q[2], q[3]));
            const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
            _mm256_storeu_si256((__m256i *)(y[b].qs + j), _mm256_permutevar8x32_epi32(p16, order));
        }
        y[b].d = 1 / iscale;
    }
    return 1;
}


static HK_TARGET void hk_quantize_q8_K(const float *x, void *y, int64_t k) {
    if (!hk_own_q8_K || !hk_quantize_q8_K_fast(x, y, k)) hk.quantize_q8_K(x, y, k);
}

/* Whether hk_quantize_q8_K_fast gives ggml's bytes: random rows, rows of exact ties, a
 * negative and a repeated largest value, zeros. */
static int hk_check_q8_K(void) {
    enum { K = 8 * HK_QK_K };
    static float x[K];
    static hk_block_q8_K ours[K / HK_QK_K], theirs[K / HK_QK_K];
    uint32_t state = 12345u;
    for (int i = 0; i < K; i++) { /* uniform in [-4, 4) */
        state = state * 1664525u + 1013904223u;
        x[i] = (float)((int32_t)(state >> 8) - (1 << 23)) / (float)(1 << 21);
    }
    float *t = x + HK_QK_K; /* block 1: iscale = -1, so products are exact halves: ties */
    for (int i = 0; i < HK_QK_K; i++) t[i] = (float)(i % 128) * 0.5f - 31.75f;
    t[7] = 127.0f;
    t = x + 2 * HK_QK_K; /* block 2: largest magnitude negative, then positive */
    t[3] = -9.0f;
    t[200] = 9.0f;
    t = x + 3 * HK_QK_K; /* block 3: ties again, with iscale = 127 / 254 = 0.5 */
    for (int i = 0; i < HK_QK_K; i++) t[i] = (float)(i % 64) - 31.0f;
    t[100] = -254.0f;
    t = x + 4 * HK_QK_K; /* block 4: zeros but one small value */
    memset(t, 0, sizeof(float) * HK_QK_K);
    t[17] = -3e-30f;
    memset(ours, 0, sizeof ours);
    memset(theirs, 0, sizeof theirs);
    if (!hk_quantize_q8_K_fast(x, ours, K)) return 0;
    hk.quantize_q8_K(x, theirs, K);
    return memcmp(ours, theirs, sizeof ours) == 0;
}

/* ---- Many rows, K types ---------------------------------------------------------------
 *
 * For more than a few activation rows the integer part dominates, so it is laid out for
 * throughput: a vector holds one lane of the per-block lane sums for L = 16 (or 8) activation
 * rows, the weights are broadcast. With the rows in the vector lanes, lane i of ggml's sum
 * for block b of (weight row r, activation row c) is
 *     sum over groups g of scale(g, i) * sum over t < 4 of w[32g + 4i + t] * x[32g + 4i + t],
 * eight accumulators i per row r; the products of 4 go by maddubs (pairs) and vpdpwssd (pairs
 * of pairs, times the scale) or madd + add (AVX2), all exact in integers, so each lane holds
 * the same integer as ggml's. The float part is then element-wise (the same fused
 * multiply-add per lane with the same scale product), and the horizontal sum in ggml's
 * order becomes vertical adds of the eight accumulators.
 */

/* One weight block of 256, decoded once per thread (384 bytes). */
typedef struct {
    uint8_t q[HK_QK_K]; /* the weights, unsigned, in order (Q4_K 0..15, Q6_K 0..63) */
    int32_t s[16];      /* per half-group h (16 weights): its scale as an int16 pair (s, s) */
    int32_t aux[8];     /* Q4_K: minimum pairs (mn[2j], mn[2j+1]), j < 4;
                           Q6_K: (-32 sc[2i], -32 sc[2i+1]) for the offset of 32 */
    float d, neg_dmin;  /* fp16 scales as float (Q4_K's minimum scale negated) */
    uint8_t pad[24];
} hk_wblock;

static inline int32_t hk_pair16(int a, int b) {
    return (int32_t)(((uint32_t)(uint16_t)(int16_t)b << 16) | (uint16_t)(int16_t)a);
}

HK_INLINE void hk_wdecode_q4_K(const hk_block_q4_K *b, hk_wblock *o) {
    uint8_t sc[8], mn[8];
    for (int s = 0; s < 4; s++) { /* as hk_decode_q4_K */
        sc[s] = b->scales[s] & 63;
        mn[s] = b->scales[s + 4] & 63;
        sc[s + 4] = (b->scales[s + 8] & 0x0F) | ((b->scales[s] >> 6) << 4);
        mn[s + 4] = (b->scales[s + 8] >> 4) | ((b->scales[s + 4] >> 6) << 4);
    }
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    for (int j = 0; j < 4; j++) {
        const __m256i bits = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * j));
        _mm256_store_si256((__m256i *)(o->q + 64 * j), _mm256_and_si256(bits, low4));
        _mm256_store_si256((__m256i *)(o->q + 64 * j + 32),
                           _mm256_and_si256(_mm256_srli_epi16(bits, 4), low4));
    }
    for (int g = 0; g < 8; g++) o->s[2 * g] = o->s[2 * g + 1] = hk_pair16(sc[g], sc[g]);
    for (int j = 0; j < 4; j++) {
        o->aux[j] = hk_pair16(mn[2 * j], mn[2 * j + 1]);
        o->aux[j + 4] = 0;
    }
    o->d = hk_half(b->d);
    o->neg_dmin = -hk_half(b->dmin);
}

HK_INLINE void hk_wdecode_q6_K(const hk_block_q6_K *b, hk_wblock *o) {
    hk_kblock kb;
    hk_decode_q6_K(b, &kb);
    for (int g = 0; g < 8; g++) _mm256_store_si256((__m256i *)(o->q + 32 * g), kb.q[g]);
    for (int h = 0; h < 16; h++) o->s[h] = hk_pair16(b->scales[h], b->scales[h]);
    for (int i = 0; i < 8; i++)
        o->aux[i] = hk_pair16(-32 * b->scales[2 * i], -32 * b->scales[2 * i + 1]);
    o->d = kb.d;
    o->neg_dmin = 0.0f;
}

/* Activation rows, quantized to Q8_K, packed L to a vector: per block, in int32 units,
 * x[64][L] (4 consecutive int8 per lane: group g = u / 8, lane i = u % 8), yd[L] (row scale),
 * bs[8][L] (int16 pairs: Q4_K (q8s[2j], q8s[2j+1]) with q8s[g] the sum of group g, j < 4;
 * Q6_K (bsums[2i], bsums[2i+1])), then padding to HK_XB_UNITS. */
#define HK_XB_UNITS 74
#define HK_XB_YD 64
#define HK_XB_BS 65

/* 8x8 transpose of 32-bit elements. */
HK_INLINE void hk_transpose8(__m256i r[8]) {
    __m256i t[8], u[8];
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_epi32(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
        u[i] = _mm256_unpacklo_epi64(t[i], t[i + 2]);
        u[i + 1] = _mm256_unpackhi_epi64(t[i], t[i + 2]);
        u[i + 2] = _mm256_unpacklo_epi64(t[i + 1], t[i + 3]);
        u[i + 3] = _mm256_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    for (int i = 0; i < 4; i++) {
        r[i] = _mm256_permute2x128_si256(u[i], u[i + 4], 0x20);
        r[i + 4] = _mm256_permute2x128_si256(u[i], u[i + 4], 0x31);
    }
}

static HK_TARGET void hk_pack_rows(int type, const void *const *rows_, int nrows, int L,
                                   int64_t nblocks, int32_t *out) {
    const hk_block_q8_K *const *rows = (const hk_block_q8_K *const *)rows_;
    for (int64_t b = 0; b < nblocks; b++) {
        int32_t *xb = out + b * HK_XB_UNITS * L;
        for (int h = 0; h < L; h += 8) { /* the quants: 8 rows x 8 units at a time */
            for (int u0 = 0; u0 < 64; u0 += 8) {
                __m256i r[8];
                for (int c = 0; c < 8; c++)
                    r[c] = h + c < nrows ? _mm256_loadu_si256(
                                               (const __m256i *)(rows[h + c][b].qs + 4 * u0))
                                         : _mm256_setzero_si256();
                hk_transpose8(r);
                for (int t = 0; t < 8; t++)
                    _mm256_storeu_si256((__m256i *)(xb + (u0 + t) * L + h), r[t]);
            }
        }
        memset(xb + HK_XB_YD * L, 0, sizeof(int32_t) * (HK_XB_UNITS - HK_XB_YD) * L);
        for (int c = 0; c < nrows; c++) {
            const hk_block_q8_K *y = rows[c] + b;
            memcpy(&xb[HK_XB_YD * L + c], &y->d, 4);
            for (int i = 0; i < 8; i++) {
                int32_t v;
                if (type == HK_Q4_K) {
                    v = i < 4 ? hk_pair16((int16_t)(y->bsums[4 * i] + y->bsums[4 * i + 1]),
                                          (int16_t)(y->bsums[4 * i + 2] + y->bsums[4 * i + 3]))
                              : 0;
                } else {
                    v = hk_pair16(y->bsums[2 * i], y->bsums[2 * i + 1]);
                }
                xb[(HK_XB_BS + i) * L + c] = v;
            }
        }
    }
}

/* The microkernel: weight rows [r0, r1) (decoded, wt[(r - r0) * nblocks + b]) times one
 * packed vector of activation rows; outs[c][r] for the first nc lanes c (each lane's output
 * row has a pointer of its own: a dense product's are evenly spaced, experts' scattered).
 * Written once with the vector operations as macros, instantiated per instruction set and
 * width. */
#define HK_MANY_BODY(TYPE, L, UNROLL_G, VI, VF, ZI, ZF, LDI, LDF, B32, BF, DOT, MADD, CVT, FMA,  \
                     MUL, ADD, STF)                                                             \
    for (int64_t r = r0; r < r1; r++) {                                                        \
        const hk_wblock *wr = (const hk_wblock *)wt_ + (r - r0) * nblocks;                     \
        VF facc[8], macc[4];                                                                   \
        for (int i = 0; i < 8; i++) facc[i] = ZF();                                            \
        for (int j = 0; j < 4; j++) macc[j] = ZF();                                            \
        for (int64_t b = 0; b < nblocks; b++) {                                                \
            const hk_wblock *w = wr + b;                                                       \
            const int32_t *xb = xv + b * HK_XB_UNITS * L;                                      \
            const int32_t *wq = (const int32_t *)w->q;                                         \
            VI acc[8];                                                                         \
            for (int i = 0; i < 8; i++)                                                        \
                acc[i] = TYPE == HK_Q6_K ? MADD(LDI(xb + (HK_XB_BS + i) * L), B32(w->aux[i]))  \
                                         : ZI();                                               \
            _Pragma(UNROLL_G) for (int g = 0; g < 8; g++) {                                   \
                const VI s0 = B32(w->s[2 * g]), s1 = B32(w->s[2 * g + 1]);                     \
                _Pragma("GCC unroll 8") for (int i = 0; i < 8; i++) acc[i] =                   \
                    DOT(acc[i], B32(wq[8 * g + i]), LDI(xb + (8 * g + i) * L), i < 4 ? s0 : s1); \
            }                                                                                  \
            const VF yd = LDF((const float *)xb + HK_XB_YD * L);                               \
            const VF d = MUL(yd, BF(w->d));                                                    \
            for (int i = 0; i < 8; i++) facc[i] = FMA(d, CVT(acc[i]), facc[i]);                \
            if (TYPE == HK_Q4_K) {                                                             \
                const VF dm = MUL(yd, BF(w->neg_dmin));                                        \
                for (int j = 0; j < 4; j++)                                                    \
                    macc[j] = FMA(dm, CVT(MADD(LDI(xb + (HK_XB_BS + j) * L), B32(w->aux[j]))), \
                                  macc[j]);                                                    \
            }                                                                                  \
        }                                                                                      \
        VF sum = ADD(ADD(ADD(facc[4], facc[0]), ADD(facc[6], facc[2])),                        \
                     ADD(ADD(facc[5], facc[1]), ADD(facc[7], facc[3])));                       \
        if (TYPE == HK_Q4_K) sum = ADD(sum, ADD(ADD(macc[0], macc[2]), ADD(macc[1], macc[3]))); \
        float lanes[L] __attribute__((aligned(64)));                                           \
        STF(lanes, sum);                                                                       \
        for (int c = 0; c < nc; c++) outs[c][r] = lanes[c];                                    \
    }

typedef void (*hk_many_fn)(const void *, int64_t, int64_t, int64_t, const int32_t *, int,
                           float *const *);

#define HK_MANY_FN(NAME, TARGET, TYPE, L, UNROLL_G, ...)                                       \
    static TARGET __attribute__((noinline)) void NAME(const void *wt_, int64_t r0,             \
                                                      int64_t r1, int64_t nblocks,             \
                                                      const int32_t *xv, int nc,               \
                                                      float *const *outs) {                    \
        HK_MANY_BODY(TYPE, L, UNROLL_G, __VA_ARGS__)                                           \
    }

/* AVX2: 8 rows a vector; products by maddubs, madd (times the scale) and add. The group
 * loop stays rolled: with 16 registers, GCC unrolls it into a tree of adds and spills. */
#define HK_AVX2_DOT(acc, q, x, s) \
    _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(q, x), s))
#define HK_AVX2_OPS                                                                            \
    __m256i, __m256, _mm256_setzero_si256, _mm256_setzero_ps, HK_LD256, _mm256_load_ps,        \
        _mm256_set1_epi32, _mm256_set1_ps, HK_AVX2_DOT, _mm256_madd_epi16, _mm256_cvtepi32_ps, \
        _mm256_fmadd_ps, _mm256_mul_ps, _mm256_add_ps, _mm256_store_ps
#define HK_LD256(p) _mm256_load_si256((const __m256i *)(p))
HK_MANY_FN(hk_many_q4_K_avx2, HK_TARGET, HK_Q4_K, 8, "GCC unroll 1", HK_AVX2_OPS)
HK_MANY_FN(hk_many_q6_K_avx2, HK_TARGET, HK_Q6_K, 8, "GCC unroll 1", HK_AVX2_OPS)

/* AVX-512 (F, BW, VL, VNNI): 16 rows a vector (8 for a short last group); vpdpwssd does the
 * scale's multiply-add. */
#define HK_TARGET512 __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))
#define HK_LD512(p) _mm512_load_si512((const void *)(p))
#define HK_512_DOT(acc, q, x, s) _mm512_dpwssd_epi32(acc, _mm512_maddubs_epi16(q, x), s)
#define HK_VNNI256_DOT(acc, q, x, s) _mm256_dpwssd_epi32(acc, _mm256_maddubs_epi16(q, x), s)
#define HK_512_OPS                                                                             \
    __m512i, __m512, _mm512_setzero_si512, _mm512_setzero_ps, HK_LD512, _mm512_load_ps,        \
        _mm512_set1_epi32, _mm512_set1_ps, HK_512_DOT, _mm512_madd_epi16, _mm512_cvtepi32_ps,  \
        _mm512_fmadd_ps, _mm512_mul_ps, _mm512_add_ps, _mm512_store_ps
#define HK_VNNI256_OPS                                                                         \
    __m256i, __m256, _mm256_setzero_si256, _mm256_setzero_ps, HK_LD256, _mm256_load_ps,        \
        _mm256_set1_epi32, _mm256_set1_ps, HK_VNNI256_DOT, _mm256_madd_epi16,                  \
        _mm256_cvtepi32_ps, _mm256_fmadd_ps, _mm256_mul_ps, _mm256_add_ps, _mm256_store_ps
HK_MANY_FN(hk_many_q4_K_512, HK_TARGET512, HK_Q4_K, 16, "GCC unroll 8", HK_512_OPS)
HK_MANY_FN(hk_many_q6_K_512, HK_TARGET512, HK_Q6_K, 16, "GCC unroll 8", HK_512_OPS)
HK_MANY_FN(hk_many_q4_K_512h, HK_TARGET512, HK_Q4_K, 8, "GCC unroll 8", HK_VNNI256_OPS)
HK_MANY_FN(hk_many_q6_K_512h, HK_TARGET512, HK_Q6_K, 8, "GCC unroll 8", HK_VNNI256_OPS)

/* ---- Many rows, 32-weight blocks (Q8_0, Q5_0, Q4_0) ----------------------------------------
 *
 * ggml's lane sums are plain here: lane i of a block is w[4i..4i+3] . x[4i..4i+3], which is
 * exactly one vpdpbusd lane. vpdpbusd takes one operand unsigned, so the activations are
 * stored + 128 (x + 128 in 0..255) and each lane starts from -128 * (w[4i] + .. + w[4i+3]),
 * which leaves the same integer. AVX2 emulates vpdpbusd by maddubs + madd: exact for Q5_0
 * and Q4_0, whose pairs of products stay within int16, not for Q8_0 (2 * 255 * 128), which
 * keeps ggml's mul_mat there above 8 rows.
 */
typedef struct {
    int8_t q[HK_QK];   /* the signed weights */
    int32_t corr[8];   /* -128 * sum of each lane's four weights */
    float d;
    int32_t pad[3];
} hk_wblock32;

HK_INLINE void hk_wdecode32(int type, const char *row, int64_t b, hk_wblock32 *o) {
    float d;
    const __m256i q = hk_decode(type, row, b, &d);
    const __m256i sum4 = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), q),
                                           _mm256_set1_epi16(1));
    _mm256_storeu_si256((__m256i *)o->q, q);
    _mm256_storeu_si256((__m256i *)o->corr,
                        _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(sum4, 7)));
    o->d = d;
}

/* Activations quantized to Q8_0 (ggml's quantizer), packed L to a vector: per block, in
 * int32 units, u[8][L] (4 consecutive int8 + 128 per lane), xd[L] (row scale), padding. */
#define HK_XB32_UNITS 10
#define HK_XB32_YD 8

static HK_TARGET void hk_pack_rows32(int type, const void *const *rows_, int nrows, int L,
                                     int64_t nblocks, int32_t *out) {
    (void)type;
    const hk_block_q8_0 *const *rows = (const hk_block_q8_0 *const *)rows_;
    const __m256i flip = _mm256_set1_epi8((char)0x80);
    for (int64_t b = 0; b < nblocks; b++) {
        int32_t *xb = out + b * HK_XB32_UNITS * L;
        for (int h = 0; h < L; h += 8) {
            __m256i r[8];
            for (int c = 0; c < 8; c++)
                r[c] = _mm256_xor_si256(
                    h + c < nrows ? _mm256_loadu_si256((const __m256i *)rows[h + c][b].qs)
                                  : _mm256_setzero_si256(),
                    flip);
            hk_transpose8(r);
            for (int t = 0; t < 8; t++) _mm256_storeu_si256((__m256i *)(xb + t * L + h), r[t]);
        }
        memset(xb + HK_XB32_YD * L, 0, sizeof(int32_t) * (HK_XB32_UNITS - HK_XB32_YD) * L);
        for (int c = 0; c < nrows; c++) {
            const float d = hk_half(rows[c][b].d);
            memcpy(&xb[HK_XB32_YD * L + c], &d, 4);
        }
    }
}

#define HK_MANY32_BODY(L, VI, VF, ZF, LDI, LDF, B32, BF, DPBUSD, CVT, FMA, MUL, ADD, STF)        \
    for (int64_t r = r0; r < r1; r++) {                                                        \
        const hk_wblock32 *wr = (const hk_wblock32 *)wt_ + (r - r0) * nblocks;                 \
        VF facc[8];                                                                            \
        for (int i = 0; i < 8; i++) facc[i] = ZF();                                            \
        for (int64_t b = 0; b < nblocks; b++) {                                                \
            const hk_wblock32 *w = wr + b;                                                     \
            const int32_t *xb = xv + b * HK_XB32_UNITS * L;                                    \
            const int32_t *wq = (const int32_t *)w->q;                                         \
            const VF d = MUL(LDF((const float *)xb + HK_XB32_YD * L), BF(w->d));               \
            _Pragma("GCC unroll 8") for (int i = 0; i < 8; i++) facc[i] =                      \
                FMA(d, CVT(DPBUSD(B32(w->corr[i]), LDI(xb + i * L), B32(wq[i]))), facc[i]);    \
        }                                                                                      \
        const VF sum = ADD(ADD(ADD(facc[4], facc[0]), ADD(facc[6], facc[2])),                  \
                           ADD(ADD(facc[5], facc[1]), ADD(facc[7], facc[3])));                 \
        float lanes[L] __attribute__((aligned(64)));                                           \
        STF(lanes, sum);                                                                       \
        for (int c = 0; c < nc; c++) outs[c][r] = lanes[c];                                    \
    }

#define HK_MANY32_FN(NAME, TARGET, L, ...)                                                     \
    static TARGET __attribute__((noinline)) void NAME(                                         \
        const void *wt_, int64_t r0, int64_t r1, int64_t nblocks, const int32_t *xv, int nc,   \
        float *const *outs) {                                                                  \
        HK_MANY32_BODY(L, __VA_ARGS__)                                                         \
    }
#define HK_512_DPBUSD(acc, u, s) _mm512_dpbusd_epi32(acc, u, s)
#define HK_VNNI256_DPBUSD(acc, u, s) _mm256_dpbusd_epi32(acc, u, s)
HK_MANY32_FN(hk_many32_512, HK_TARGET512, 16, __m512i, __m512, _mm512_setzero_ps, HK_LD512,
             _mm512_load_ps, _mm512_set1_epi32, _mm512_set1_ps, HK_512_DPBUSD,
             _mm512_cvtepi32_ps, _mm512_fmadd_ps, _mm512_mul_ps, _mm512_add_ps, _mm512_store_ps)
HK_MANY32_FN(hk_many32_512h, HK_TARGET512, 8, __m256i, __m256, _mm256_setzero_ps, HK_LD256,
             _mm256_load_ps, _mm256_set1_epi32, _mm256_set1_ps, HK_VNNI256_DPBUSD,
             _mm256_cvtepi32_ps, _mm256_fmadd_ps, _mm256_mul_ps, _mm256_add_ps, _mm256_store_ps)

/* AVX2, Q5_0 and Q4_0 only (see above). */
#define HK_AVX2_DPBUSD(acc, u, s) \
    _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)))
HK_MANY32_FN(hk_many32_avx2, HK_TARGET, 8, __m256i, __m256, _mm256_setzero_ps, HK_LD256,
             _mm256_load_ps, _mm256_set1_epi32, _mm256_set1_ps, HK_AVX2_DPBUSD,
             _mm256_cvtepi32_ps, _mm256_fmadd_ps, _mm256_mul_ps, _mm256_add_ps, _mm256_store_ps)

enum { HK_ISA_NONE = 0, HK_ISA_AVX2 = 1, HK_ISA_AVX512 = 2 };

/* The best code path this CPU has (asked once; every thread computes the same value). */
int hearth_kernels_isa(void) {
    static int best = -1;
    if (best < 0) {
        int isa = HK_ISA_NONE;
        if (hearth_kernels_supported()) {
            isa = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") &&
                          __builtin_cpu_supports("avx512vnni")
                      ? HK_ISA_AVX512
                      : HK_ISA_AVX2;
        }
        best = isa;
    }
    return best;
}

/* 64-byte aligned memory (the original pointer is kept just before the block). */
static void *hk_aligned_alloc(size_t size) {
    char *raw = malloc(size + 64);
    if (!raw) return NULL;
    char *p = (char *)(((uintptr_t)raw + 64) & ~(uintptr_t)63);
    memcpy(p - sizeof raw, &raw, sizeof raw);
    return p;
}

static void hk_aligned_free(void *p) {
    if (!p) return;
    char *raw;
    memcpy(&raw, (char *)p - sizeof raw, sizeof raw);
    free(raw);
}

#ifndef _WIN32
#include <pthread.h>

/* A per-thread scratch buffer kept between calls (ggml's workers persist; a prompt's
 * products would otherwise fault fresh pages in on every call), freed when the thread ends. */
static pthread_key_t hk_scratch_key;
static pthread_once_t hk_scratch_once = PTHREAD_ONCE_INIT;
typedef struct { void *p; size_t size; } hk_scratch;

static void hk_scratch_free(void *v) {
    hk_scratch *s = v;
    hk_aligned_free(s->p);
    free(s);
}
static void hk_scratch_init(void) { pthread_key_create(&hk_scratch_key, hk_scratch_free); }

static void *hk_scratch_get(size_t size) {
    pthread_once(&hk_scratch_once, hk_scratch_init);
    hk_scratch *s = pthread_getspecific(hk_scratch_key);
    if (!s) {
        s = calloc(1, sizeof *s);
        if (!s || pthread_setspecific(hk_scratch_key, s)) {
            free(s);
            return NULL;
        }
    }
    if (s->size < size) {
        hk_aligned_free(s->p);
        s->size = 0;
        s->p = hk_aligned_alloc(size);
        if (!s->p) return NULL;
        s->size = size;
    }
    return s->p;
}

static void hk_scratch_done(void *p) { (void)p; }
#else /* MinGW: a buffer per call */
static void *hk_scratch_get(size_t size) { return hk_aligned_alloc(size); }
static void hk_scratch_done(void *p) { hk_aligned_free(p); }
#endif

#define HK_TILE_BYTES (96 * 1024) /* decoded weights per tile, reused by every row group */

/* What the many-rows driver needs to know of a weight family. */
typedef struct {
    size_t wblock;           /* bytes of one decoded weight block */
    int xunits;              /* int32 units per lane of one packed activation block */
    size_t qblock;           /* bytes of one quantized activation block (Q8_K or Q8_0) */
    void (*decode)(int type, const char *row, int64_t b, void *out);
    void (*pack)(int type, const void *const *rows, int nrows, int L, int64_t nblocks,
                 int32_t *out);
    hk_many_fn full[2], half[2]; /* by type: [Q4_K or 32-blocks, Q6_K] */
} hk_many_kind;

static HK_TARGET void hk_wdecode_k(int type, const char *row, int64_t b, void *out) {
    if (type == HK_Q4_K)
        hk_wdecode_q4_K((const hk_block_q4_K *)row + b, out);
    else
        hk_wdecode_q6_K((const hk_block_q6_K *)row + b, out);
}

static HK_TARGET void hk_wdecode_32(int type, const char *row, int64_t b, void *out) {
    hk_wdecode32(type, row, b, out);
}

static const hk_many_kind hk_many_k512 = {
    sizeof(hk_wblock), HK_XB_UNITS, sizeof(hk_block_q8_K), hk_wdecode_k, hk_pack_rows,
    {hk_many_q4_K_512, hk_many_q6_K_512}, {hk_many_q4_K_512h, hk_many_q6_K_512h}};
static const hk_many_kind hk_many_k256 = {
    sizeof(hk_wblock), HK_XB_UNITS, sizeof(hk_block_q8_K), hk_wdecode_k, hk_pack_rows,
    {hk_many_q4_K_avx2, hk_many_q6_K_avx2}, {hk_many_q4_K_avx2, hk_many_q6_K_avx2}};
static const hk_many_kind hk_many_32 = {
    sizeof(hk_wblock32), HK_XB32_UNITS, sizeof(hk_block_q8_0), hk_wdecode_32, hk_pack_rows32,
    {hk_many32_512, hk_many32_512}, {hk_many32_512h, hk_many32_512h}};
static const hk_many_kind hk_many_32avx2 = {
    sizeof(hk_wblock32), HK_XB32_UNITS, sizeof(hk_block_q8_0), hk_wdecode_32, hk_pack_rows32,
    {hk_many32_avx2, hk_many32_avx2}, {hk_many32_avx2, hk_many32_avx2}};

static const hk_many_kind *hk_kind_of(int isa, int type) {
    const int k_family = type == HK_Q4_K || type == HK_Q6_K;
    if (isa >= HK_ISA_AVX512) return k_family ? &hk_many_k512 : &hk_many_32;
    return k_family ? &hk_many_k256 : &hk_many_32avx2;
}

/* The activation format's quantizer (Q8_K for the K types, else Q8_0) and its block. */
static hk_quantize_fn hk_quantizer_of(int type, int64_t *block_k) {
    const int k_family = type == HK_Q4_K || type == HK_Q6_K;
    *block_k = k_family ? HK_QK_K : HK_QK;
    return k_family ? hk_quantize_q8_K : hk.quantize_q8_0;
}

/* Lanes of the vector that takes the next of `left` activation rows: 16 on the wide path
 * (8 for a short last group), else 8. */
static inline int hk_lanes(int wide, int64_t left) { return wide && left > 8 ? 16 : 8; }

/* int32 units of `na` activation rows packed in vectors. */
static int64_t hk_packed_units(const hk_many_kind *kind, int wide, int64_t na, int64_t nblocks) {
    int64_t units = 0;
    for (int64_t c = 0; c < na;) {
        const int L = hk_lanes(wide, na - c);
        units += (int64_t)L * kind->xunits * nblocks;
        c += L;
    }
    return units;
}

/* Weight rows [r0, r1) times `na` packed activation rows, a tile of `tile` decoded weight
 * rows (in `wt`) at a time; row c's outputs go to outs[c][r]. */
static HK_TARGET void hk_tiles(const hk_many_kind *kind, int type, int wide, const char *w,
                               size_t w_stride, int64_t r0, int64_t r1, int64_t nblocks,
                               const int32_t *packed, int64_t na, float *const *outs, char *wt,
                               int64_t tile) {
    const hk_many_fn full = kind->full[type == HK_Q6_K], half = kind->half[type == HK_Q6_K];
    for (int64_t t0 = r0; t0 < r1; t0 += tile) {
        const int64_t t1 = t0 + tile < r1 ? t0 + tile : r1;
        for (int64_t r = t0; r < t1; r++)
            for (int64_t b = 0; b < nblocks; b++)
                kind->decode(type, w + r * w_stride, b,
                             wt + ((r - t0) * nblocks + b) * kind->wblock);
        const int32_t *xv = packed;
        for (int64_t c = 0; c < na;) {
            const int L = hk_lanes(wide, na - c);
            const int nr = na - c < L ? (int)(na - c) : L;
            (L == 16 ? full : half)(wt, t0, t1, nblocks, xv, nr, outs + c);
            xv += (int64_t)L * kind->xunits * nblocks;
            c += L;
        }
    }
}

/* Decoded weight rows per tile (HK_TILE_BYTES), at most `rows`. */
static int64_t hk_tile_rows(const hk_many_kind *kind, int64_t nblocks, int64_t rows) {
    int64_t tile = HK_TILE_BYTES / (nblocks * (int64_t)kind->wblock);
    if (tile < 1) tile = 1;
    return tile > rows ? rows : tile;
}

static char *hk_scratch_or_die(size_t size) {
    char *p = hk_scratch_get(size);
    if (!p) { /* as ggml does: no silent wrong numbers (the runner is a subprocess) */
        fputs("hearth: out of memory in the many-rows kernel\n", stderr);
        abort();
    }
    return p;
}

#define HK_ALIGN64(n) (((size_t)(n) + 63) & ~(size_t)63)

/*
 * Weights [k, m] (nblocks blocks a row) times n activation rows, for this thread (ith of
 * nth). Threads take a share of the activation rows each where there are enough (each
 * quantizes only its own), and otherwise share the weight rows. Q8_0 comes here on the
 * AVX-512 path only.
 */
static HK_TARGET void hk_mul_mat_many(int isa, int type, const char *w, size_t w_stride,
                                      int64_t m, int64_t nblocks, const char *x,
                                      size_t x_stride, int64_t n, float *out, size_t os,
                                      int ith, int nth) {
    const int wide = isa >= HK_ISA_AVX512;
    const hk_many_kind *kind = hk_kind_of(isa, type);
    int64_t block_k;
    const hk_quantize_fn quantize = hk_quantizer_of(type, &block_k);

    int nt_c = 1; /* threads along the activation rows: each at least 32 of them */
    for (int d = nth; d >= 1; d--)
        if (nth % d == 0 && n / d >= 32) {
            nt_c = d;
            break;
        }
    const int nt_r = nth / nt_c, ic = ith % nt_c, ir = ith / nt_c;
    const int64_t units = (n + 7) / 8; /* activation rows in eights */
    const int64_t a0 = units * ic / nt_c * 8, a1_ = units * (ic + 1) / nt_c * 8;
    const int64_t a1 = a1_ < n ? a1_ : n;
    const int64_t r0 = m * ir / nt_r, r1 = m * (ir + 1) / nt_r;
    if (a0 >= a1 || r0 >= r1) return;

    const int64_t na = a1 - a0;
    const int64_t tile = hk_tile_rows(kind, nblocks, r1 - r0);
    const size_t packed_bytes =
        HK_ALIGN64(sizeof(int32_t) * hk_packed_units(kind, wide, na, nblocks));
    const size_t tile_bytes = HK_ALIGN64(kind->wblock * tile * nblocks);
    const size_t quant_bytes = HK_ALIGN64(kind->qblock * 16 * nblocks);
    const size_t outs_bytes = sizeof(float *) * na;
    char *scratch = hk_scratch_or_die(packed_bytes + tile_bytes + quant_bytes + outs_bytes);
    int32_t *packed = (int32_t *)scratch;
    char *wt = scratch + packed_bytes;
    char *quant = wt + tile_bytes;
    float **outs = (float **)(quant + quant_bytes);

    /* Quantize and pack this thread's activation rows, a group at a time. */
    int32_t *dst = packed;
    for (int64_t c = 0; c < na;) {
        const int L = hk_lanes(wide, na - c);
        const int nr = na - c < L ? (int)(na - c) : L;
        const void *rows[16];
        for (int j = 0; j < nr; j++) {
            char *q = quant + j * kind->qblock * nblocks;
            quantize((const float *)(x + (a0 + c + j) * x_stride), q, nblocks * block_k);
            rows[j] = q;
        }
        kind->pack(type, rows, nr, L, nblocks, dst);
        dst += (int64_t)L * kind->xunits * nblocks;
        c += L;
    }
    for (int64_t c = 0; c < na; c++) outs[c] = out + (a0 + c) * os;
    hk_tiles(kind, type, wide, w, w_stride, r0, r1, nblocks, packed, na, outs, wt, tile);
    hk_scratch_done(scratch);
}

/* ---- Routed experts (ggml_mul_mat_id) ---------------------------------------------------
 *
 * A prompt's tokens each choose a few experts (Qwen3-30B-A3B: 8 of 128), so an expert
 * multiplies the rows of the tokens that chose it, about 16 of them in a 256-token prompt.
 * ggml computes that with its one-row dot product, row by row; here every expert is one
 * many-rows product over its rows, with the same arithmetic per element (the contract above),
 * so the numbers are ggml's and a row's do not depend on the rows beside it. Two nodes: the
 * activations are quantized once (hearth_quantize_rows; the gate and up products of a layer
 * share them), then each expert's rows are gathered, packed and multiplied
 * (hearth_mul_mat_id).
 */

/*
 * ggml custom op: source x f32 [k, a, b] (any row strides), destination I8 [row bytes, a, b]
 * contiguous, each row quantized to the activation format of weight type `userdata`
 * (Q8_K for the K types, else Q8_0), as ggml quantizes a product's activations. Threads take
 * rows in turn.
 */
HK_TARGET void hearth_quantize_rows(void *dst, int ith, int nth, void *userdata) {
    void *x_t = ((void *const *)((char *)dst + hk.src))[0];
    const int64_t *x_ne = &HK_FIELD(x_t, hk.ne, int64_t);
    const size_t *x_nb = &HK_FIELD(x_t, hk.nb, size_t);
    const size_t *d_nb = &HK_FIELD(dst, hk.nb, size_t);
    const char *x = HK_FIELD(x_t, hk.data, const char *);
    char *q = HK_FIELD(dst, hk.data, char *);
    int64_t block_k;
    const hk_quantize_fn quantize = hk_quantizer_of((int)(intptr_t)userdata, &block_k);
    const int64_t a = x_ne[1], rows = x_ne[1] * x_ne[2];
    for (int64_t i = ith; i < rows; i += nth)
        quantize((const float *)(x + i % a * x_nb[1] + i / a * x_nb[2]),
                 q + i % a * d_nb[1] + i / a * d_nb[2], x_ne[0]);
}

/* The cost of one weight row of an expert with `cnt` activation rows, per block, in about
 * the int8 products of one 32-weight group: up to HK_MAX_COLS rows go to the few-rows code
 * (a decoding in registers per 4 rows, a group product per row), more to the many-rows code
 * (a decoding to memory, 8 group products per 8 rows). */
static inline int64_t hk_id_cost(int64_t cnt) {
    if (!cnt) return 0;
    return cnt <= HK_MAX_COLS ? 12 * ((cnt + 3) / 4) + 8 * cnt : 24 + 64 * ((cnt + 7) / 8);
}

/* Weight rows [r0, r1) of one expert times its `cnt` (<= HK_MAX_COLS) quantized activation
 * rows by the few-rows code (as hearth_mul_mat_few does), into out[c * m + r]. */
static HK_TARGET void hk_id_few(const hk_format *f, const char *w, size_t w_stride, int64_t r0,
                                int64_t r1, int64_t m, int64_t nblocks, const void *const *rows,
                                int cnt, float *xd, float *out) {
    const int groups = (cnt + 3) / 4;
    const void *cols[2][4];
    for (int gi = 0; gi < groups; gi++) {
        const int nc = cnt - 4 * gi < 4 ? cnt - 4 * gi : 4;
        for (int j = 0; j < 4; j++) {
            cols[gi][j] = rows[4 * gi + (j < nc ? j : 0)];
            for (int64_t l = 0; f->block == HK_QK && l < nblocks; l++)
                xd[gi * nblocks * 4 + l * 4 + j] =
                    j < nc ? hk_half(((const hk_block_q8_0 *)cols[gi][j])[l].d) : 0.0f;
        }
    }
    /* With two groups, both use a chunk of rows while it is in cache. */
    const int64_t chunk = groups == 1 ? r1 - r0 : HK_CHUNK_ROWS;
    for (int64_t c0 = r0; c0 < r1; c0 += chunk) {
        const int64_t c1 = c0 + chunk < r1 ? c0 + chunk : r1;
        for (int gi = 0; gi < groups; gi++) {
            const int nc = cnt - 4 * gi < 4 ? cnt - 4 * gi : 4;
            f->rows[nc - 1](w, w_stride, c0, c1, nblocks, cols[gi], xd + gi * nblocks * 4,
                            out + gi * 4 * m, (size_t)m);
        }
    }
}

/*
 * ggml custom op equal to ggml_mul_mat_id: sources experts [k, m, E] (a many-rows type),
 * activations as hearth_quantize_rows left them [row bytes, nx, n], ids I32 [used, n];
 * destination [m, used, n] f32; userdata: the code path. Slot j of token t is expert
 * ids[j, t] times activation row (j % nx, t), into destination column (j, t).
 *
 * Every thread groups the (slot, token) pairs by expert itself (a few microseconds; no
 * barrier needed). The work, each weight row of each chosen expert costed by the vectors
 * its activation rows fill, is cut into nth equal shares along the experts in order; a
 * thread decodes only its own weight rows and packs the rows of the experts it has a share
 * of (of one or two experts shared with a neighbour, the rows are packed by both).
 */
HK_TARGET void hearth_mul_mat_id(void *dst, int ith, int nth, void *userdata) {
    void *const *srcs = (void *const *)((char *)dst + hk.src);
    void *w_t = srcs[0], *q_t = srcs[1], *id_t = srcs[2];
    const int type = HK_FIELD(w_t, hk.type, int);
    const int64_t *w_ne = &HK_FIELD(w_t, hk.ne, int64_t);
    const size_t *w_nb = &HK_FIELD(w_t, hk.nb, size_t);
    const int64_t *q_ne = &HK_FIELD(q_t, hk.ne, int64_t);
    const size_t *q_nb = &HK_FIELD(q_t, hk.nb, size_t);
    const int64_t *id_ne = &HK_FIELD(id_t, hk.ne, int64_t);
    const size_t *id_nb = &HK_FIELD(id_t, hk.nb, size_t);
    const size_t *d_nb = &HK_FIELD(dst, hk.nb, size_t);
    const char *w = HK_FIELD(w_t, hk.data, const char *);
    const char *q = HK_FIELD(q_t, hk.data, const char *);
    const char *ids = HK_FIELD(id_t, hk.data, const char *);
    char *out = HK_FIELD(dst, hk.data, char *);

    int isa = (int)(intptr_t)userdata, best = hearth_kernels_isa();
    if (isa < HK_ISA_AVX2 || isa > best) isa = best;
    const int wide = isa >= HK_ISA_AVX512;
    const hk_format *f = hk_format_of(type);
    const int64_t k = w_ne[0], m = w_ne[1], n_expert = w_ne[2];
    const int64_t used = id_ne[0], n = id_ne[1], nx = q_ne[1];
    if (!f || k % f->block || (type == HK_Q8_0 && !wide)) {
        fputs("hearth: the experts' kernel was given a case it does not handle\n", stderr);
        abort(); /* ggml_experts.ExpertsKernel.applies never builds such a node */
    }
    const hk_many_kind *kind = hk_kind_of(isa, type);
    const int64_t nblocks = k / f->block;

    /* (slot, token) pairs by expert, in ggml's order: offsets[e] .. offsets[e + 1]. */
    int64_t *offsets = calloc((size_t)n_expert + 1, sizeof *offsets);
    int32_t *pairs = malloc(sizeof *pairs * (size_t)(used * n + 1));
    if (!offsets || !pairs) {
        fputs("hearth: out of memory in the experts' kernel\n", stderr);
        abort();
    }
    for (int64_t t = 0; t < n; t++)
        for (int64_t j = 0; j < used; j++) {
            const int32_t e = *(const int32_t *)(ids + t * id_nb[1] + j * id_nb[0]);
            if (e < 0 || e >= n_expert) {
                fputs("hearth: an expert id is out of range\n", stderr);
                abort(); /* as ggml's mul_mat_id asserts */
            }
            offsets[e + 1]++;
        }
    int64_t most = 0, total = 0; /* the most rows of one expert; the cost of all */
    for (int64_t e = 0; e < n_expert; e++) {
        const int64_t cnt = offsets[e + 1];
        if (cnt > most) most = cnt;
        total += m * hk_id_cost(cnt);
        offsets[e + 1] += offsets[e];
    }
    {
        int64_t *fill = malloc(sizeof *fill * (size_t)n_expert);
        if (!fill) {
            fputs("hearth: out of memory in the experts' kernel\n", stderr);
            abort();
        }
        memcpy(fill, offsets, sizeof *fill * (size_t)n_expert);
        for (int64_t t = 0; t < n; t++)
            for (int64_t j = 0; j < used; j++) {
                const int32_t e = *(const int32_t *)(ids + t * id_nb[1] + j * id_nb[0]);
                pairs[fill[e]++] = (int32_t)(t * used + j);
            }
        free(fill);
    }

    const int64_t lo = total * ith / nth, hi = total * (ith + 1) / nth;
    if (lo >= hi) {
        free(pairs);
        free(offsets);
        return;
    }
    const int64_t tile = hk_tile_rows(kind, nblocks, m);
    const size_t packed_bytes =
        HK_ALIGN64(sizeof(int32_t) * hk_packed_units(kind, wide, most, nblocks));
    const size_t tile_bytes = HK_ALIGN64(kind->wblock * tile * nblocks);
    const size_t rows_bytes =
        HK_ALIGN64(sizeof(void *) * (most > HK_MAX_COLS ? most : HK_MAX_COLS));
    const size_t few_bytes = HK_ALIGN64(sizeof(float) * HK_MAX_COLS * m); /* few rows' results */
    const size_t xd_bytes = HK_ALIGN64(sizeof(float) * 8 * nblocks); /* and scales (32-blocks) */
    char *scratch = hk_scratch_or_die(packed_bytes + tile_bytes + 2 * rows_bytes + few_bytes +
                                      xd_bytes);
    int32_t *packed = (int32_t *)scratch;
    char *wt = scratch + packed_bytes;
    const void **rows = (const void **)(wt + tile_bytes);
    float **outs = (float **)((char *)rows + rows_bytes);
    float *few = (float *)((char *)outs + rows_bytes);
    float *xd = (float *)((char *)few + few_bytes);

    int64_t start = 0; /* the cost before expert e */
    for (int64_t e = 0; e < n_expert && start < hi; e++) {
        const int64_t cnt = offsets[e + 1] - offsets[e];
        if (!cnt) continue;
        const int64_t per_row = hk_id_cost(cnt), end = start + m * per_row;
        /* This thread's weight rows: where its share's bounds fall, rounded to a row. */
        const int64_t b0 = lo <= start ? 0 : lo >= end ? m : (lo - start + per_row / 2) / per_row;
        const int64_t b1 = hi <= start ? 0 : hi >= end ? m : (hi - start + per_row / 2) / per_row;
        start = end;
        if (b0 >= b1) continue;
        for (int64_t c = 0; c < cnt; c++) {
            const int32_t s = pairs[offsets[e] + c];
            const int64_t t = s / used, j = s % used;
            rows[c] = q + (j % nx) * q_nb[1] + t * q_nb[2];
            outs[c] = (float *)(out + j * d_nb[1] + t * d_nb[2]);
        }
        const char *we = w + e * w_nb[2];
        if (cnt <= HK_MAX_COLS) { /* few rows: the few-rows code, then to their columns */
            hk_id_few(f, we, w_nb[1], b0, b1, m, nblocks, rows, (int)cnt, xd, few);
            for (int64_t c = 0; c < cnt; c++)
                memcpy(outs[c] + b0, few + c * m + b0, sizeof(float) * (size_t)(b1 - b0));
            continue;
        }
        int32_t *dst_v = packed;
        for (int64_t c = 0; c < cnt;) {
            const int L = hk_lanes(wide, cnt - c);
            const int nr = cnt - c < L ? (int)(cnt - c) : L;
            kind->pack(type, rows + c, nr, L, nblocks, dst_v);
            dst_v += (int64_t)L * kind->xunits * nblocks;
            c += L;
        }
        hk_tiles(kind, type, wide, we, w_nb[1], b0, b1, nblocks, packed, cnt, outs, wt, tile);
    }
    hk_scratch_done(scratch);
    free(pairs);
    free(offsets);
}

/*
 * ggml custom op (ggml_custom_4d, sources: weights [k, m], activations [k, n] f32,
 * destination [m, n] f32 contiguous; userdata: the code path, HK_ISA_*). Few rows: each
 * thread quantizes the activation rows itself (a few microseconds; no barrier needed) and
 * computes its share of the weight rows. Many rows: see hk_mul_mat_many.
 */
HK_TARGET void hearth_mul_mat_few(void *dst, int ith, int nth, void *userdata) {
    void *const *srcs = (void *const *)((char *)dst + hk.src);
    void *w_t = srcs[0], *x_t = srcs[1];
    const int type = HK_FIELD(w_t, hk.type, int);
    const int64_t *w_ne = &HK_FIELD(w_t, hk.ne, int64_t);
    const size_t *w_nb = &HK_FIELD(w_t, hk.nb, size_t);
    const int64_t *x_ne = &HK_FIELD(x_t, hk.ne, int64_t);
    const size_t *x_nb = &HK_FIELD(x_t, hk.nb, size_t);
    const size_t *d_nb = &HK_FIELD(dst, hk.nb, size_t);
    const char *w = HK_FIELD(w_t, hk.data, const char *);
    const char *x = HK_FIELD(x_t, hk.data, const char *);
    float *out = HK_FIELD(dst, hk.data, float *);

    const hk_format *f = hk_format_of(type);
    const int64_t k = w_ne[0], m = w_ne[1], n = x_ne[1];
    int isa = (int)(intptr_t)userdata, best = hearth_kernels_isa();
    if (isa < HK_ISA_AVX2 || isa > best) isa = best;
    const int few_max = isa == HK_ISA_AVX2 ? HK_FEW_MAX_K_AVX2 : HK_MAX_COLS;
    if (f && f->block == HK_QK_K && n > few_max && k % HK_QK_K == 0) {
        hk_mul_mat_many(isa, type, w, w_nb[1], m, k / HK_QK_K, x, x_nb[1], n, out,
                        d_nb[1] / sizeof(float), ith, nth);
        return;
    }
    if (f && f->block == HK_QK && n > HK_MAX_COLS && k % HK_QK == 0 &&
        (isa >= HK_ISA_AVX512 || type != HK_Q8_0)) {
        hk_mul_mat_many(isa, type, w, w_nb[1], m, k / HK_QK, x, x_nb[1], n, out,
                        d_nb[1] / sizeof(float), ith, nth);
        return;
    }
    if (!f || n < 1 || n > (f->block == HK_QK_K ? few_max : HK_MAX_COLS) || k % f->block) {
        fputs("hearth: the few-rows kernel was given a case it does not handle\n", stderr);
        abort(); /* ggml_kernels.FewRowsKernel.applies never builds such a node */
    }
    const int64_t nblocks = k / f->block;
    const int k_family = f->block == HK_QK_K;

    /* Rows for this thread, in pairs. */
    const int64_t per = ((m + nth - 1) / nth + 1) & ~(int64_t)1;
    const int64_t r0 = per * ith, r1 = r0 + per < m ? r0 + per : m;
    if (r0 >= r1) return;

    char *xq = malloc(f->x_block * nblocks * n);
    float *xd = malloc(sizeof(float) * nblocks * 4 * ((n + 3) / 4));
    if (!xq || !xd) { /* as ggml does: no silent wrong numbers (the runner is a subprocess) */
        fputs("hearth: out of memory in the few-rows kernel\n", stderr);
        abort();
    }
    const hk_quantize_fn quantize = k_family ? hk_quantize_q8_K : hk.quantize_q8_0;
    for (int64_t j = 0; j < n; j++)
        quantize((const float *)(x + j * x_nb[1]), xq + j * nblocks * f->x_block, k);

    /* Column groups of up to four; for Q8_0 activations, their scales interleaved per block. */
    const void *cols[HK_FEW_MAX_K_AVX2 / 4 + 1][4];
    int group_cols[HK_FEW_MAX_K_AVX2 / 4 + 1] = {0};
    const int groups = (int)((n + 3) / 4);
    for (int gi = 0; gi < groups; gi++) {
        const int64_t j0 = gi * 4;
        const int nc = n - j0 < 4 ? (int)(n - j0) : 4;
        float *scales = xd + gi * nblocks * 4;
        group_cols[gi] = nc;
        for (int j = 0; j < 4; j++) {
            cols[gi][j] = xq + (j0 + (j < nc ? j : 0)) * nblocks * f->x_block;
            for (int64_t l = 0; !k_family && l < nblocks; l++)
                scales[l * 4 + j] =
                    j < nc ? hk_half(((const hk_block_q8_0 *)cols[gi][j])[l].d) : 0.0f;
        }
    }
    /* With two groups, both use a chunk of rows while it is in cache: the weights are
     * read from memory once. */
    const size_t os = d_nb[1] / sizeof(float);
    const int64_t chunk = groups == 1 ? r1 - r0 : HK_CHUNK_ROWS;
    for (int64_t c0 = r0; c0 < r1; c0 += chunk) {
        const int64_t c1 = c0 + chunk < r1 ? c0 + chunk : r1;
        for (int gi = 0; gi < groups; gi++)
            f->rows[group_cols[gi] - 1](w, w_nb[1], c0, c1, nblocks, cols[gi],
                                        xd + gi * nblocks * 4, out + gi * 4 * os, os);
    }
    free(xq);
    free(xd);
}

#else /* not x86 with GCC/Clang: the kernel is absent and ggml's mul_mat is used */

int hearth_kernels_supported(void) { return 0; }

int hearth_kernels_isa(void) { return 0; }

static int hk_check_q8_K(void) { return 0; }

void hearth_mul_mat_few(void *dst, int ith, int nth, void *userdata) {
    (void)dst;
    (void)ith;
    (void)nth;
    (void)userdata;
}

void hearth_quantize_rows(void *dst, int ith, int nth, void *userdata) {
    hearth_mul_mat_few(dst, ith, nth, userdata);
}

void hearth_mul_mat_id(void *dst, int ith, int nth, void *userdata) {
    hearth_mul_mat_few(dst, ith, nth, userdata);
}

#endif

/* Built by setuptools as an extension module; Python loads it with ctypes, not import. */
static struct PyModuleDef hk_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_kernels",
    .m_doc = "Hearth's CPU kernels (used through ctypes).",
    .m_size = -1,
};

PyMODINIT_FUNC PyInit__kernels(void) { return PyModule_Create(&hk_module); }

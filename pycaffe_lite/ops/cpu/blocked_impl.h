/* Channel-blocked (NCHWc) kernels of kernels.c, float only: the direct convolution (dense,
 * grouped, depthwise; plain NCHW input for a net's first convolution), MAX and AVE pooling,
 * and the conversions to and from the blocked layout.
 *
 * A blocked array of B-channel blocks is (N, ceil(C / B), H, W, B): channel c of pixel (h, w)
 * at [n][c / B][h][w][c % B]. B is 16 for the AVX-512F build and 8 for the AVX2 + FMA build;
 * each kernel takes B and runs the build for it (the caller asks pcl_blocked_isa first). The
 * lanes of channels >= C in the last block are written as 0 and never read as data.
 *
 * Convolution weights come packed per output block: [K / B][C / group][kh][kw][B] (lane l of
 * block ob: output channel ob * B + l, zero beyond K); depthwise ones [C / B][kh][kw][B]; the
 * bias padded to whole blocks. The convolution sums w * x over the input channels in
 * increasing order and the taps in row-major order, starting from the bias, each step a
 * fused multiply-add (one rounding: within C kh kw eps sum |w x| of the exact sum, as any
 * GEMM order); then adds the residual, then max(., 0) (a NaN kept). Each output's order
 * depends only on its position, never on how the work is split, so results do not depend
 * on the thread count. Work units are (image, output block, output row, run of columns); an
 * output array may be a slice of blocks of a larger blocked array (a Concat's output written
 * in place): every array carries its own image stride.
 *
 * Built with fused multiply-adds (optimize("fp-contract=fast")) for the instruction sets
 * named, and only with GCC on x86-64 (elsewhere pcl_blocked_isa reports none). */

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 8 && \
    !defined(PCL_CLONES_GIVEN)
#define PCL_BLK_VECTOR
/* floats in the edge tiles' copy of a block of input (64 KiB on the stack) */
#define PCL_BLK_PATCH 16384
#define PCL_UNROLL _Pragma("GCC unroll 16")

#define BLK_B 16
#define BLK_NMAX 14
#define BLK_FN(f) pcl_blk16_##f
#define BLK_ATTR __attribute__((target("avx512f"), optimize("fp-contract=fast")))
#include "blocked_body.h"
#undef BLK_B
#undef BLK_NMAX
#undef BLK_FN
#undef BLK_ATTR

#define BLK_B 8
#define BLK_NMAX 12
#define BLK_FN(f) pcl_blk8_##f
#define BLK_ATTR __attribute__((target("avx2,fma"), optimize("fp-contract=fast")))
#include "blocked_body.h"
#undef BLK_B
#undef BLK_NMAX
#undef BLK_FN
#undef BLK_ATTR
#endif

/* Which builds this processor runs: 1 (AVX2 + FMA, B = 8) | 2 (AVX-512F, B = 16). */

EXPORT int pcl_blocked_isa(void)
{
    int found = 0;
#ifdef PCL_BLK_VECTOR
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        found |= 1;
    if (__builtin_cpu_supports("avx512f"))
        found |= 2;
#endif
    return found;
}

/* xb (N, Cb, HW, B) (image stride xbs_n) = x (N, C, HW) in blocks, padding lanes 0; units
 * (image, block). Runs of 16 pixels go through a 16 x B tile, read and written contiguously. */
EXPORT void pcl_to_blocked_f32(const float *restrict x, float *restrict xb, idx nc, idx hw,
                               idx bs, idx xbs_n, idx start, idx stop)
{
    const idx cbn = (nc + bs - 1) / bs;
    float t[16 * 16];
    for (idx u = start; u < stop; ++u) {
        const idx cb = u % cbn, n = u / cbn;
        float *o = xb + n * xbs_n + cb * hw * bs;
        const idx real = nc - cb * bs < bs ? nc - cb * bs : bs;
        const float *p = x + (n * nc + cb * bs) * hw;
        for (idx q0 = 0; q0 < hw; q0 += 16) {
            const idx run = hw - q0 < 16 ? hw - q0 : 16;
            for (idx l = 0; l < bs; ++l)
                for (idx k = 0; k < run; ++k)
                    t[k * bs + l] = l < real ? p[l * hw + q0 + k] : 0.0f;
            memcpy(o + q0 * bs, t, (size_t)(run * bs) * sizeof(float));
        }
    }
}

/* x (N, C, HW) = the real channels of xb (N, Cb, HW, B) (image stride xbs_n); units
 * (image, block), through 16 x B tiles as above. */
EXPORT void pcl_from_blocked_f32(const float *restrict xb, float *restrict x, idx nc, idx hw,
                                 idx bs, idx xbs_n, idx start, idx stop)
{
    const idx cbn = (nc + bs - 1) / bs;
    float t[16 * 16];
    for (idx u = start; u < stop; ++u) {
        const idx cb = u % cbn, n = u / cbn;
        const float *p = xb + n * xbs_n + cb * hw * bs;
        const idx real = nc - cb * bs < bs ? nc - cb * bs : bs;
        float *o = x + (n * nc + cb * bs) * hw;
        for (idx q0 = 0; q0 < hw; q0 += 16) {
            const idx run = hw - q0 < 16 ? hw - q0 : 16;
            memcpy(t, p + q0 * bs, (size_t)(run * bs) * sizeof(float));
            for (idx l = 0; l < real; ++l)
                for (idx k = 0; k < run; ++k)
                    o[l * hw + q0 + k] = t[k * bs + l];
        }
    }
}

/* The convolution (see above). depthwise: group == C == K (cg, kg unused); otherwise output
 * block ob reads the cg input channels of group ob * bs / kg (group 1: cg = C, kg = K).
 * input_blocked 0: x is plain (N, C, H, W). Units: (image, output block, output row, run of
 * seglen columns) for the dense kernel, (image, block, output row) for the depthwise one. */
EXPORT void pcl_blocked_conv_f32(const float *x, const float *wts, const float *bias,
                                 const float *res, float *y, idx bs, idx depthwise,
                                 idx input_blocked, idx nk, idx cg, idx kg, idx h, idx w,
                                 idx kh, idx kw, idx ph, idx pw, idx sh, idx sw, idx dh, idx dw,
                                 idx oh, idx ow, idx xs_n, idx ys_n, idx rs_n, idx relu,
                                 idx seglen, idx start, idx stop)
{
#ifdef PCL_BLK_VECTOR
    /* the edge tiles' copy of one block of channels: kh rows of at most
     * (NMAX - 1) * sw + (kw - 1) * dw + 1 columns (the caller checks PCL_BLK_PATCH) */
    float patch[PCL_BLK_PATCH] __attribute__((aligned(64)));
    if (bs == 16 && depthwise)
        pcl_blk16_depthwise(x, wts, bias, res, y, nk, h, w, kh, kw, ph, pw, sh, sw, dh, dw, oh,
                            ow, xs_n, ys_n, rs_n, relu, start, stop);
    else if (bs == 16)
        pcl_blk16_conv(x, wts, bias, res, y, input_blocked, nk, cg, kg, h, w, kh, kw, ph, pw,
                       sh, sw, dh, dw, oh, ow, xs_n, ys_n, rs_n, relu, seglen, patch, start,
                       stop);
    else if (bs == 8 && depthwise)
        pcl_blk8_depthwise(x, wts, bias, res, y, nk, h, w, kh, kw, ph, pw, sh, sw, dh, dw, oh,
                           ow, xs_n, ys_n, rs_n, relu, start, stop);
    else if (bs == 8)
        pcl_blk8_conv(x, wts, bias, res, y, input_blocked, nk, cg, kg, h, w, kh, kw, ph, pw,
                      sh, sw, dh, dw, oh, ow, xs_n, ys_n, rs_n, relu, seglen, patch, start,
                       stop);
#else
    (void)x, (void)wts, (void)bias, (void)res, (void)y, (void)bs, (void)depthwise;
    (void)input_blocked, (void)nk, (void)cg, (void)kg, (void)h, (void)w, (void)kh, (void)kw;
    (void)ph, (void)pw, (void)sh, (void)sw, (void)dh, (void)dw, (void)oh, (void)ow;
    (void)xs_n, (void)ys_n, (void)rs_n, (void)relu, (void)seglen, (void)start, (void)stop;
#endif
}

/* Caffe's MAX (first maximum, NaN skipped, -FLT_MAX floor) or AVE (window sums over the
 * window clipped to the padded image) pooling of every block; units (image, block, row). */
EXPORT void pcl_blocked_pool_f32(const float *x, float *y, idx bs, idx method_ave, idx cbn,
                                 idx h, idx w, idx oh, idx ow, idx kh, idx kw, idx ph, idx pw,
                                 idx sh, idx sw, idx xs_n, idx ys_n, idx start, idx stop)
{
#ifdef PCL_BLK_VECTOR
    if (bs == 16)
        pcl_blk16_pool(x, y, method_ave, cbn, h, w, oh, ow, kh, kw, ph, pw, sh, sw, xs_n, ys_n,
                       start, stop);
    else if (bs == 8)
        pcl_blk8_pool(x, y, method_ave, cbn, h, w, oh, ow, kh, kw, ph, pw, sh, sw, xs_n, ys_n,
                      start, stop);
#else
    (void)x, (void)y, (void)bs, (void)method_ave, (void)cbn, (void)h, (void)w, (void)oh;
    (void)ow, (void)kh, (void)kw, (void)ph, (void)pw, (void)sh, (void)sw, (void)xs_n;
    (void)ys_n, (void)start, (void)stop;
#endif
}

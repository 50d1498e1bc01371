/* The channel-blocked kernels for one block size (included by blocked_impl.h once per
 * instruction set, with BLK_B the block size, BLK_FN(f) the name of f for it and BLK_ATTR
 * its target and contraction attributes). See blocked_impl.h for the layouts. */

typedef float BLK_FN(vec) __attribute__((vector_size(BLK_B * 4), aligned(4)));
typedef int32_t BLK_FN(ivec) __attribute__((vector_size(BLK_B * 4), aligned(4)));
#define VEC BLK_FN(vec)
#define IVEC BLK_FN(ivec)

/* v, then max(v, 0) when relu (a NaN kept), lanes outside `lanes` made 0. */
ALWAYS_INLINE BLK_ATTR VEC BLK_FN(finish)(VEC v, const float *res, int relu, IVEC lanes)
{
    const VEC zero = {0};
    if (res)
        v += *(const VEC *)res;
    if (relu)
        v = (VEC)((IVEC)v & ((v > zero) | (v != v)));
    return (VEC)((IVEC)v & lanes);
}

/* The edge tiles' copy of one block of channels (pixels ps floats apart, ps == B or 1): rows
 * iy0 + i * dh for i in [i0, i1) at patch + i * cols * ps, their columns ix0 .. ix0 + cols - 1,
 * zeros outside the image. Out of line: one copy serves every tile size. */
static __attribute__((noinline)) BLK_ATTR void BLK_FN(fill_patch)(
    float *restrict patch, const float *restrict xc, idx ps, idx w, idx dh, idx iy0, idx ix0,
    idx i0, idx i1, idx cols)
{
    for (idx i = i0; i < i1; ++i) {
        const float *src = xc + (iy0 + i * dh) * w * ps;
        float *dst = patch + i * cols * ps;
        for (idx q = 0; q < cols; ++q) {
            const idx col = ix0 + q;
            const int in = col >= 0 && col < w;
            if (ps == BLK_B)
                *(VEC *)(dst + q * BLK_B) = in ? *(const VEC *)(src + col * BLK_B) : (VEC){0};
            else
                dst[q] = in ? src[col] : 0.0f;
        }
    }
}

/* N output pixels of one output block: pixel r reads input columns ix0 + r * SW + j * dw of
 * rows iy0 + i * dh, taps i in [i0, i1) (the rows inside the image). Each output starts at its
 * bias, then adds w[c][i][j] * x[c][iy][ix] over the group's input channels c in increasing
 * order and the taps in row-major order, one fused multiply-add each (the input value
 * broadcast over the block's lanes). Input channel c of the group is at
 * xg + (c / CDIV) * cstride + c % CDIV, pixels PS floats apart (CDIV == PS: B, or 1 for plain
 * NCHW input). Where some window crosses the left or right edge (patch not NULL), each block
 * of channels is first copied into patch, its columns ix0 .. ix0 + pw_ - 1 of the rows used,
 * zeros outside the image: the padding multiplied as Caffe's im2col does. */
ALWAYS_INLINE BLK_ATTR void BLK_FN(conv_tile)(
    const int N, const idx PS, const idx SW, const idx CDIV, const float *restrict xg,
    const float *restrict wb, const float *restrict bias, const float *res, float *restrict y,
    idx cg, idx cstride, idx w, idx kh, idx kw, idx dh, idx dw, idx iy0, idx ix0, idx i0,
    idx i1, float *restrict patch, int relu, IVEC lanes)
{
    VEC acc[BLK_NMAX]; /* N <= BLK_NMAX used */
    const VEC b = *(const VEC *)bias;
    PCL_UNROLL
    for (int r = 0; r < N; ++r)
        acc[r] = b;
    const idx taps = kh * kw, pw_ = (N - 1) * SW + (kw - 1) * dw + 1;
    for (idx cb = 0; cb * CDIV < cg; ++cb) {
        const idx ln = cg - cb * CDIV < CDIV ? cg - cb * CDIV : CDIV;
        const float *rows = xg + cb * cstride + (iy0 * w + ix0) * PS;
        idx rowstep = dh * w * PS;
        if (patch) {
            BLK_FN(fill_patch)(patch, xg + cb * cstride, PS, w, dh, iy0, ix0, i0, i1, pw_);
            rows = patch;
            rowstep = pw_ * PS;
        }
        for (idx l = 0; l < ln; ++l) {
            const float *wc = wb + (cb * CDIV + l) * taps * BLK_B;
            for (idx i = i0; i < i1; ++i) {
                const float *xr = rows + l + i * rowstep;
                const float *wr = wc + i * kw * BLK_B;
                for (idx j = 0; j < kw; ++j) {
                    const VEC wv = *(const VEC *)(wr + j * BLK_B);
                    const float *xp = xr + j * dw * PS;
                    PCL_UNROLL
                    for (int r = 0; r < N; ++r)
                        acc[r] += wv * xp[r * SW * PS];
                }
            }
        }
    }
    PCL_UNROLL
    for (int r = 0; r < N; ++r)
        *(VEC *)(y + r * BLK_B) =
            BLK_FN(finish)(acc[r], res ? res + r * BLK_B : NULL, relu, lanes);
}

/* conv_tile for a 1x1 filter without padding: N pixels whose input columns are
 * ix0 + r * SW of row iy0, one multiply-add per input channel. */
ALWAYS_INLINE BLK_ATTR void BLK_FN(conv1_tile)(
    const int N, const idx PS, const idx SW, const idx CDIV, const float *restrict xg,
    const float *restrict wb, const float *restrict bias, const float *res, float *restrict y,
    idx cg, idx cstride, idx w, idx iy0, idx ix0, int relu, IVEC lanes)
{
    VEC acc[BLK_NMAX]; /* N <= BLK_NMAX used */
    const VEC b = *(const VEC *)bias;
    PCL_UNROLL
    for (int r = 0; r < N; ++r)
        acc[r] = b;
    const float *wc = wb;
    for (idx cb = 0; cb * CDIV < cg; ++cb) {
        const idx ln = cg - cb * CDIV < CDIV ? cg - cb * CDIV : CDIV;
        const float *xp = xg + cb * cstride + (iy0 * w + ix0) * PS;
        for (idx l = 0; l < ln; ++l, ++xp, wc += BLK_B) {
            const VEC wv = *(const VEC *)wc;
            PCL_UNROLL
            for (int r = 0; r < N; ++r)
                acc[r] += wv * xp[r * SW * PS];
        }
    }
    PCL_UNROLL
    for (int r = 0; r < N; ++r)
        *(VEC *)(y + r * BLK_B) =
            BLK_FN(finish)(acc[r], res ? res + r * BLK_B : NULL, relu, lanes);
}

/* One unit of conv: output columns [c0, c1) of output row oy of one output block, in tiles
 * of equal sizes (within one) of at most BLK_NMAX pixels (with a stride other than 1 and 2,
 * tiles of 8, 4, 2 and 1); a tile with a window across the left or right edge goes through
 * the patch. */
ALWAYS_INLINE BLK_ATTR void BLK_FN(conv_row)(
    const int ONE, const idx PS, const idx SW, const idx CDIV, const float *restrict xg,
    const float *restrict wb, const float *restrict bias, const float *res, float *restrict y,
    idx cg, idx cstride, idx h, idx w, idx kh, idx kw, idx ph, idx pw, idx sh, idx dh, idx dw,
    idx oy, idx c0, idx c1, float *restrict patch, int relu, IVEC lanes)
{
    const idx iy0 = oy * sh - ph;
    idx i0 = 0, i1 = kh;
    while (i0 < kh && iy0 + i0 * dh < 0)
        ++i0;
    while (i1 > i0 && iy0 + (i1 - 1) * dh >= h)
        --i1;
#define BLK_ANY(n)                                                                             \
    do {                                                                                       \
        const float *r_ = res ? res + ox * BLK_B : NULL;                                       \
        const idx x0_ = ox * SW - pw;                                                          \
        const int in_ = x0_ >= 0 && x0_ + ((n) - 1) * SW + (kw - 1) * dw < w;                  \
        if (ONE)                                                                               \
            BLK_FN(conv1_tile)(n, PS, SW, CDIV, xg, wb, bias, r_, y + ox * BLK_B, cg, cstride, \
                               w, iy0, x0_, relu, lanes);                                      \
        else                                                                                   \
            BLK_FN(conv_tile)(n, PS, SW, CDIV, xg, wb, bias, r_, y + ox * BLK_B, cg, cstride,  \
                              w, kh, kw, dh, dw, iy0, x0_, i0, i1, in_ ? NULL : patch, relu,   \
                              lanes);                                                          \
    } while (0)
    if (SW != 1 && SW != 2) {
        idx ox = c0;
        for (; ox + 8 <= c1; ox += 8)
            BLK_ANY(8);
        for (; ox + 4 <= c1; ox += 4)
            BLK_ANY(4);
        for (; ox + 2 <= c1; ox += 2)
            BLK_ANY(2);
        for (; ox < c1; ++ox)
            BLK_ANY(1);
        return;
    }
    const idx count = c1 - c0, tiles = (count + BLK_NMAX - 1) / BLK_NMAX;
    idx ox = c0;
    for (idx t = 0; t < tiles; ++t) {
        const idx n = count / tiles + (t < count % tiles);
        switch (n) {
#define BLK_CASE(k)                                                                            \
    case k:                                                                                    \
        BLK_ANY(k);                                                                            \
        break;
            BLK_CASE(1) BLK_CASE(2) BLK_CASE(3) BLK_CASE(4) BLK_CASE(5) BLK_CASE(6)
            BLK_CASE(7) BLK_CASE(8) BLK_CASE(9) BLK_CASE(10) BLK_CASE(11) BLK_CASE(12)
#if BLK_NMAX > 12
            BLK_CASE(13) BLK_CASE(14)
#endif
#undef BLK_CASE
        default:
            break;
        }
        ox += n;
    }
#undef BLK_ANY
}

/* conv for one pixel stride and one column stride (constants once inlined). */
ALWAYS_INLINE BLK_ATTR void BLK_FN(conv_units)(
    const int ONE, const idx PS, const idx SW, const idx CDIV, const float *restrict x,
    const float *restrict wts, const float *restrict bias, const float *res,
    float *restrict y, idx nk, idx cg, idx kg, idx h, idx w, idx kh, idx kw, idx ph,
    idx pw, idx sh, idx dh, idx dw, idx oh, idx ow, idx xs_n, idx ys_n, idx rs_n, idx relu,
    idx seglen, float *restrict patch, idx start, idx stop)
{
    const idx kb = (nk + BLK_B - 1) / BLK_B, nseg = (ow + seglen - 1) / seglen;
    const idx cstride = CDIV == 1 ? h * w : h * w * BLK_B;
    for (idx u = start; u < stop; ++u) {
        const idx seg = u % nseg, oy = (u / nseg) % oh, ob = (u / (nseg * oh)) % kb,
                  n = u / (nseg * oh * kb);
        const idx c0 = seg * seglen, c1 = c0 + seglen < ow ? c0 + seglen : ow;
        const idx group = ob * BLK_B / kg;
        const float *xg = x + n * xs_n + (group * cg / CDIV) * cstride;
        IVEC lanes;
        for (int l = 0; l < BLK_B; ++l)
            lanes[l] = ob * BLK_B + l < nk ? -1 : 0;
        const idx out = (ob * oh + oy) * ow * BLK_B;
        BLK_FN(conv_row)(ONE, PS, SW, CDIV, xg, wts + ob * cg * kh * kw * BLK_B,
                         bias + ob * BLK_B, res ? res + n * rs_n + out : NULL,
                         y + n * ys_n + out, cg, cstride, h, w, kh, kw, ph, pw, sh, dh, dw, oy,
                         c0, c1, patch, (int)relu, lanes);
    }
}

static BLK_ATTR void BLK_FN(conv)(const float *x, const float *wts, const float *bias,
                                  const float *res, float *y, idx input_blocked, idx nk,
                                  idx cg, idx kg, idx h, idx w, idx kh, idx kw, idx ph,
                                  idx pw, idx sh, idx sw, idx dh, idx dw, idx oh, idx ow,
                                  idx xs_n, idx ys_n, idx rs_n, idx relu, idx seglen,
                                  float *patch, idx start, idx stop)
{
#define BLK_CALL(ONE, PS, SW, CDIV, KW, DW)                                                   \
    BLK_FN(conv_units)(ONE, PS, SW, CDIV, x, wts, bias, res, y, nk, cg, kg, h, w, kh, KW, ph, \
                       pw, sh, dh, DW, oh, ow, xs_n, ys_n, rs_n, relu, seglen, patch, start,  \
                       stop)
    /* the common shapes with their strides and widths as constants */
    const int one = kh == 1 && kw == 1 && ph == 0 && pw == 0, three = kw == 3 && dw == 1;
    if (input_blocked) {
        if (one && sw == 1)
            BLK_CALL(1, BLK_B, 1, BLK_B, 1, 1);
        else if (one && sw == 2)
            BLK_CALL(1, BLK_B, 2, BLK_B, 1, 1);
        else if (three && sw == 1)
            BLK_CALL(0, BLK_B, 1, BLK_B, 3, 1);
        else if (three && sw == 2)
            BLK_CALL(0, BLK_B, 2, BLK_B, 3, 1);
        else if (sw == 1)
            BLK_CALL(0, BLK_B, 1, BLK_B, kw, dw);
        else if (sw == 2)
            BLK_CALL(0, BLK_B, 2, BLK_B, kw, dw);
        else
            BLK_CALL(0, BLK_B, sw, BLK_B, kw, dw);
    } else {
        if (sw == 2)
            BLK_CALL(0, 1, 2, 1, kw, dw);
        else
            BLK_CALL(0, 1, sw, 1, kw, dw);
    }
#undef BLK_CALL
}

/* ---- depthwise: lanes are channels, each output lane from its own input lane ---------- */
ALWAYS_INLINE BLK_ATTR void BLK_FN(dw_tile)(const int N, const idx SW,
                                            const float *restrict xb, const float *restrict wb,
                                            const float *restrict bias, const float *res,
                                            float *restrict y, idx w, idx kw, idx dh, idx dw,
                                            idx iy0, idx ix0, idx i0, idx i1, idx j0, idx j1,
                                            int relu, IVEC lanes)
{
    VEC acc[8]; /* N <= 8 used */
    const VEC b = *(const VEC *)bias;
    PCL_UNROLL
    for (int r = 0; r < N; ++r)
        acc[r] = b;
    for (idx i = i0; i < i1; ++i) {
        const float *xr = xb + ((iy0 + i * dh) * w + ix0) * BLK_B;
        for (idx j = j0; j < j1; ++j) {
            const VEC wv = *(const VEC *)(wb + (i * kw + j) * BLK_B);
            const float *xp = xr + j * dw * BLK_B;
            PCL_UNROLL
    for (int r = 0; r < N; ++r)
                acc[r] += wv * *(const VEC *)(xp + r * SW * BLK_B);
        }
    }
    PCL_UNROLL
    for (int r = 0; r < N; ++r)
        *(VEC *)(y + r * BLK_B) =
            BLK_FN(finish)(acc[r], res ? res + r * BLK_B : NULL, relu, lanes);
}

ALWAYS_INLINE BLK_ATTR void BLK_FN(dw_units)(
    const idx SW, const float *restrict x, const float *restrict wts,
    const float *restrict bias, const float *res, float *restrict y, idx nk, idx h, idx w,
    idx kh, idx kw, idx ph, idx pw, idx sh, idx dh, idx dw, idx oh, idx ow, idx xs_n,
    idx ys_n, idx rs_n, idx relu, idx start, idx stop)
{
    const idx kb = (nk + BLK_B - 1) / BLK_B;
    idx lo = (pw + SW - 1) / SW, hi = w - 1 + pw - (kw - 1) * dw;
    hi = hi < 0 ? 0 : hi / SW + 1;
    if (hi > ow)
        hi = ow;
    if (lo > hi)
        lo = hi;
    for (idx u = start; u < stop; ++u) {
        const idx oy = u % oh, cb = (u / oh) % kb, n = u / (oh * kb);
        const float *xb = x + n * xs_n + cb * h * w * BLK_B;
        const float *wb = wts + cb * kh * kw * BLK_B;
        const float *bb = bias + cb * BLK_B;
        const idx out = (cb * oh + oy) * ow * BLK_B;
        float *yr = y + n * ys_n + out;
        const float *rr = res ? res + n * rs_n + out : NULL;
        IVEC lanes;
        for (int l = 0; l < BLK_B; ++l)
            lanes[l] = cb * BLK_B + l < nk ? -1 : 0;
        const idx iy0 = oy * sh - ph;
        idx i0 = 0, i1 = kh;
        while (i0 < kh && iy0 + i0 * dh < 0)
            ++i0;
        while (i1 > i0 && iy0 + (i1 - 1) * dh >= h)
            --i1;
#define DW_TILE(n, x0, j0, j1)                                                                 \
    BLK_FN(dw_tile)(n, SW, xb, wb, bb, rr ? rr + ox * BLK_B : NULL, yr + ox * BLK_B, w, kw, dh, \
                    dw, iy0, x0, i0, i1, j0, j1, (int)relu, lanes)
        idx ox = 0;
        while (ox < ow) {
            if (ox >= lo && ox < hi) { /* tiles of equal sizes (within one), at most 8 */
                const idx count = hi - lo, tiles = (count + 7) / 8;
                for (idx t = 0; t < tiles; ++t) {
                    const idx n = count / tiles + (t < count % tiles);
                    switch (n) {
#define DW_CASE(k)                                                                             \
    case k:                                                                                    \
        DW_TILE(k, ox * SW - pw, 0, kw);                                                       \
        break;
                        DW_CASE(1) DW_CASE(2) DW_CASE(3) DW_CASE(4) DW_CASE(5) DW_CASE(6)
                        DW_CASE(7) DW_CASE(8)
#undef DW_CASE
                    default:
                        break;
                    }
                    ox += n;
                }
            } else {
                const idx ix0 = ox * SW - pw;
                idx j0 = 0, j1 = kw;
                while (j0 < kw && ix0 + j0 * dw < 0)
                    ++j0;
                while (j1 > j0 && ix0 + (j1 - 1) * dw >= w)
                    --j1;
                DW_TILE(1, ix0, j0, j1);
                ++ox;
            }
        }
#undef DW_TILE
    }
}

static BLK_ATTR void BLK_FN(depthwise)(const float *x, const float *wts, const float *bias,
                                       const float *res, float *y, idx nk, idx h, idx w,
                                       idx kh, idx kw, idx ph, idx pw, idx sh, idx sw, idx dh,
                                       idx dw, idx oh, idx ow, idx xs_n, idx ys_n, idx rs_n,
                                       idx relu, idx start, idx stop)
{
    if (sw == 1)
        BLK_FN(dw_units)(1, x, wts, bias, res, y, nk, h, w, kh, kw, ph, pw, sh, dh, dw, oh, ow,
                         xs_n, ys_n, rs_n, relu, start, stop);
    else if (sw == 2)
        BLK_FN(dw_units)(2, x, wts, bias, res, y, nk, h, w, kh, kw, ph, pw, sh, dh, dw, oh, ow,
                         xs_n, ys_n, rs_n, relu, start, stop);
    else
        BLK_FN(dw_units)(sw, x, wts, bias, res, y, nk, h, w, kh, kw, ph, pw, sh, dh, dw, oh,
                         ow, xs_n, ys_n, rs_n, relu, start, stop);
}

/* ---- pooling: Caffe's windows, every lane at once ------------------------------------- */
static BLK_ATTR void BLK_FN(pool)(const float *x, float *y, idx method_ave, idx cb_total,
                                  idx h, idx w, idx oh, idx ow, idx kh, idx kw, idx ph, idx pw,
                                  idx sh, idx sw, idx xs_n, idx ys_n, idx start, idx stop)
{
    for (idx u = start; u < stop; ++u) {
        const idx oy = u % oh, cb = (u / oh) % cb_total, n = u / (oh * cb_total);
        const float *xb = x + n * xs_n + cb * h * w * BLK_B;
        float *yr = y + n * ys_n + (cb * oh + oy) * ow * BLK_B;
        idx hs = oy * sh - ph, he = hs + kh < h + ph ? hs + kh : h + ph;
        const idx hsize = he - hs;
        hs = hs < 0 ? 0 : hs;
        he = he < h ? he : h;
        for (idx ox = 0; ox < ow; ++ox) {
            idx ws = ox * sw - pw, we = ws + kw < w + pw ? ws + kw : w + pw;
            const idx size = hsize * (we - ws);
            ws = ws < 0 ? 0 : ws;
            we = we < w ? we : w;
            VEC v;
            if (method_ave) {
                v = (VEC){0};
                for (idx iy = hs; iy < he; ++iy)
                    for (idx ix = ws; ix < we; ++ix)
                        v += *(const VEC *)(xb + (iy * w + ix) * BLK_B);
                v /= (float)size;
            } else {
                v = (VEC){0} - FLT_MAX;
                for (idx iy = hs; iy < he; ++iy)
                    for (idx ix = ws; ix < we; ++ix) {
                        const VEC e = *(const VEC *)(xb + (iy * w + ix) * BLK_B);
                        const IVEC m = e > v; /* NaN never replaces */
                        v = (VEC)(((IVEC)e & m) | ((IVEC)v & ~m));
                    }
            }
            *(VEC *)(yr + ox * BLK_B) = v;
        }
    }
}

#undef VEC
#undef IVEC

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

/* N output pixels of one output block: columns ox0 + r (r < N) of an output row whose input
 * columns start at ix0 + r * SW * (pixel) and rows iy0 + i * dh, taps i in [i0, i1) and j in
 * [j0, j1) (the ones inside the image: the caller's bounds). Each output starts at its bias,
 * then adds w[c][i][j] * x[c][iy][ix] over the input channels c in increasing order and
 * the taps in row-major order, one fused multiply-add each (input value broadcast over the
 * block's lanes). Input channel c of the group is at xg + (c / CDIV) * cstride + c % CDIV,
 * one pixel PS floats after the other. */
ALWAYS_INLINE BLK_ATTR void BLK_FN(conv_tile)(
    const int N, const idx PS, const idx SW, const idx CDIV, const float *restrict xg,
    const float *restrict wb, const float *restrict bias, const float *res, float *restrict y,
    idx cg, idx cstride, idx w, idx kh, idx kw, idx dh, idx dw, idx iy0, idx ix0, idx i0,
    idx i1, idx j0, idx j1, int relu, IVEC lanes)
{
    VEC acc[12]; /* N <= 12 used */
    const VEC b = *(const VEC *)bias;
    for (int r = 0; r < N; ++r)
        acc[r] = b;
    const idx taps = kh * kw;
    for (idx cb = 0; cb * CDIV < cg; ++cb) {
        const idx ln = cg - cb * CDIV < CDIV ? cg - cb * CDIV : CDIV;
        const float *xb = xg + cb * cstride;
        for (idx l = 0; l < ln; ++l) {
            const float *xc = xb + l;
            const float *wc = wb + (cb * CDIV + l) * taps * BLK_B;
            for (idx i = i0; i < i1; ++i) {
                const float *xr = xc + ((iy0 + i * dh) * w + ix0) * PS;
                const float *wr = wc + i * kw * BLK_B;
                for (idx j = j0; j < j1; ++j) {
                    const VEC wv = *(const VEC *)(wr + j * BLK_B);
                    const float *xp = xr + j * dw * PS;
                    for (int r = 0; r < N; ++r)
                        acc[r] += wv * xp[r * SW * PS];
                }
            }
        }
    }
    for (int r = 0; r < N; ++r)
        *(VEC *)(y + r * BLK_B) =
            BLK_FN(finish)(acc[r], res ? res + r * BLK_B : NULL, relu, lanes);
}

/* One unit of conv: output columns [c0, c1) of output row oy of block ob of one image. The
 * columns whose window lies inside the image in tiles of 12, 6, 3 and 1 pixels; the others
 * pixel by pixel with their own tap bounds. */
ALWAYS_INLINE BLK_ATTR void BLK_FN(conv_row)(
    const idx PS, const idx SW, const idx CDIV, const float *restrict xg,
    const float *restrict wb, const float *restrict bias, const float *res, float *restrict y,
    idx cg, idx cstride, idx h, idx w, idx kh, idx kw, idx ph, idx pw, idx sh, idx dh, idx dw,
    idx oy, idx c0, idx c1, idx lo, idx hi, int relu, IVEC lanes)
{
    const idx iy0 = oy * sh - ph;
    idx i0 = 0, i1 = kh;
    while (i0 < kh && iy0 + i0 * dh < 0)
        ++i0;
    while (i1 > i0 && iy0 + (i1 - 1) * dh >= h)
        --i1;
    idx ox = c0;
#define BLK_TILE(n, x0, j0, j1)                                                                \
    BLK_FN(conv_tile)(n, PS, SW, CDIV, xg, wb, bias, res ? res + ox * BLK_B : NULL,          \
                      y + ox * BLK_B, cg, cstride, w, kh, kw, dh, dw, iy0, x0, i0, i1, j0, j1, \
                      relu, lanes)
    while (ox < c1) {
        if (ox >= lo && ox < hi) {
            const idx end = hi < c1 ? hi : c1;
            for (; ox + 12 <= end; ox += 12)
                BLK_TILE(12, ox * SW - pw, 0, kw);
            for (; ox + 6 <= end; ox += 6)
                BLK_TILE(6, ox * SW - pw, 0, kw);
            for (; ox + 3 <= end; ox += 3)
                BLK_TILE(3, ox * SW - pw, 0, kw);
            for (; ox < end; ++ox)
                BLK_TILE(1, ox * SW - pw, 0, kw);
        } else {
            const idx ix0 = ox * SW - pw;
            idx j0 = 0, j1 = kw;
            while (j0 < kw && ix0 + j0 * dw < 0)
                ++j0;
            while (j1 > j0 && ix0 + (j1 - 1) * dw >= w)
                --j1;
            BLK_TILE(1, ix0, j0, j1);
            ++ox;
        }
    }
#undef BLK_TILE
}

/* conv for one pixel stride and one column stride (constants once inlined). */
ALWAYS_INLINE BLK_ATTR void BLK_FN(conv_units)(
    const idx PS, const idx SW, const idx CDIV, const float *restrict x,
    const float *restrict wts, const float *restrict bias, const float *res,
    float *restrict y, idx nk, idx cg, idx kg, idx h, idx w, idx kh, idx kw, idx ph,
    idx pw, idx sh, idx dh, idx dw, idx oh, idx ow, idx xs_n, idx ys_n, idx rs_n, idx relu,
    idx seglen, idx start, idx stop)
{
    const idx kb = (nk + BLK_B - 1) / BLK_B, nseg = (ow + seglen - 1) / seglen;
    const idx cstride = CDIV == 1 ? h * w : h * w * BLK_B;
    /* interior columns: ox * SW - pw >= 0 and ox * SW - pw + (kw - 1) * dw < w */
    idx lo = (pw + SW - 1) / SW, hi = w - 1 + pw - (kw - 1) * dw;
    hi = hi < 0 ? 0 : hi / SW + 1;
    if (hi > ow)
        hi = ow;
    if (lo > hi)
        lo = hi;
    for (idx u = start; u < stop; ++u) {
        const idx seg = u % nseg, oy = (u / nseg) % oh, ob = (u / (nseg * oh)) % kb,
                  n = u / (nseg * oh * kb);
        const idx c0 = seg * seglen, c1 = c0 + seglen < ow ? c0 + seglen : ow;
        const idx group = ob * BLK_B / kg;
        const float *xg = x + n * xs_n + (group * cg / CDIV) * cstride;
        IVEC lanes;
        for (int l = 0; l < BLK_B; ++l)
            lanes[l] = ob * BLK_B + l < nk ? -1 : 0;
        const idx out = n * ys_n + (ob * oh + oy) * ow * BLK_B;
        BLK_FN(conv_row)(PS, SW, CDIV, xg, wts + ob * cg * kh * kw * BLK_B, bias + ob * BLK_B,
                         res ? res + n * rs_n + (ob * oh + oy) * ow * BLK_B : NULL, y + out,
                         cg, cstride, h, w, kh, kw, ph, pw, sh, dh, dw, oy, c0, c1, lo, hi,
                         (int)relu, lanes);
    }
}

static BLK_ATTR void BLK_FN(conv)(const float *x, const float *wts, const float *bias,
                                  const float *res, float *y, idx input_blocked, idx nk,
                                  idx cg, idx kg, idx h, idx w, idx kh, idx kw, idx ph,
                                  idx pw, idx sh, idx sw, idx dh, idx dw, idx oh, idx ow,
                                  idx xs_n, idx ys_n, idx rs_n, idx relu, idx seglen,
                                  idx start, idx stop)
{
#define BLK_CALL(PS, SW, CDIV)                                                                \
    BLK_FN(conv_units)(PS, SW, CDIV, x, wts, bias, res, y, nk, cg, kg, h, w, kh, kw, ph, pw,  \
                       sh, dh, dw, oh, ow, xs_n, ys_n, rs_n, relu, seglen, start, stop)
    if (input_blocked) {
        if (sw == 1)
            BLK_CALL(BLK_B, 1, BLK_B);
        else if (sw == 2)
            BLK_CALL(BLK_B, 2, BLK_B);
        else
            BLK_CALL(BLK_B, sw, BLK_B);
    } else {
        if (sw == 1)
            BLK_CALL(1, 1, 1);
        else if (sw == 2)
            BLK_CALL(1, 2, 1);
        else
            BLK_CALL(1, sw, 1);
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
    for (int r = 0; r < N; ++r)
        acc[r] = b;
    for (idx i = i0; i < i1; ++i) {
        const float *xr = xb + ((iy0 + i * dh) * w + ix0) * BLK_B;
        for (idx j = j0; j < j1; ++j) {
            const VEC wv = *(const VEC *)(wb + (i * kw + j) * BLK_B);
            const float *xp = xr + j * dw * BLK_B;
            for (int r = 0; r < N; ++r)
                acc[r] += wv * *(const VEC *)(xp + r * SW * BLK_B);
        }
    }
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
            if (ox >= lo && ox < hi) {
                for (; ox + 8 <= hi; ox += 8)
                    DW_TILE(8, ox * SW - pw, 0, kw);
                for (; ox < hi; ++ox)
                    DW_TILE(1, ox * SW - pw, 0, kw);
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

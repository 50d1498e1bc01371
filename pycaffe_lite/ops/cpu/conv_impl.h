/* Convolution kernels of kernels.c for one element type (included once per type, with T the
 * type and NAME(f) the exported name of f for it): the direct depthwise convolution and the
 * transforms of Winograd's F(2x2, 3x3). Unlike the kernels of kernels_impl.h these do not
 * repeat the NumPy code's order of operations (that code is a matrix product whose order is
 * BLAS's): their results equal it to float rounding, with the bounds their tests state.
 * Every kernel handles a range [start, stop) of planes or channels, for threads.
 */

/* ---- depthwise convolution: group == channels == outputs, one filter (kh, kw) per plane -- */

/* y (B * C, OH, OW) = the correlation of each plane of x (B * C, H, W) with its channel's
 * filter (plane s has channel s % nc) (+ bias[channel] when bias is not NULL), planes
 * [start, stop). Each output row is summed tap by tap over runs of output columns, a loop
 * the compiler vectorises when the stride is 1. */
EXPORT void NAME(depthwise_forward)(const T *restrict x, const T *restrict wts,
                                    const T *restrict bias, T *restrict y, idx nc, idx h,
                                    idx w, idx kh, idx kw, idx pad_h, idx pad_w, idx stride_h,
                                    idx stride_w, idx dil_h, idx dil_w, idx oh, idx ow,
                                    idx start, idx stop)
{
    for (idx s = start; s < stop; ++s) {
        idx c = s % nc;
        const T *plane = x + s * h * w;
        const T *f = wts + c * kh * kw;
        for (idx oy = 0; oy < oh; ++oy) {
            T *restrict out = y + (s * oh + oy) * ow;
            for (idx ox = 0; ox < ow; ++ox)
                out[ox] = (T)0;
            for (idx i = 0; i < kh; ++i) {
                idx r = oy * stride_h - pad_h + i * dil_h;
                if (r < 0 || r >= h)
                    continue;
                for (idx j = 0; j < kw; ++j) {
                    idx lo, hi;
                    NAME(inside)(j * dil_w, pad_w, stride_w, w, ow, &lo, &hi);
                    const T *restrict row = plane + r * w - pad_w + j * dil_w;
                    T v = f[i * kw + j];
                    if (stride_w == 1)
                        for (idx ox = lo; ox < hi; ++ox)
                            out[ox] += v * row[ox];
                    else
                        for (idx ox = lo; ox < hi; ++ox)
                            out[ox] += v * row[ox * stride_w];
                }
            }
            if (bias) {
                T b = bias[c];
                for (idx ox = 0; ox < ow; ++ox)
                    out[ox] += b;
            }
        }
    }
}

/* The gradient of depthwise_forward with respect to x: dx (B * C, H, W) (overwritten) from
 * dy (B * C, OH, OW), planes [start, stop). */
EXPORT void NAME(depthwise_backward_data)(const T *restrict dy, const T *restrict wts,
                                          T *restrict dx, idx nc, idx h, idx w, idx kh,
                                          idx kw, idx pad_h, idx pad_w, idx stride_h,
                                          idx stride_w, idx dil_h, idx dil_w, idx oh, idx ow,
                                          idx start, idx stop)
{
    for (idx s = start; s < stop; ++s) {
        idx c = s % nc;
        T *plane = dx + s * h * w;
        const T *f = wts + c * kh * kw;
        memset(plane, 0, (size_t)(h * w) * sizeof(T));
        for (idx oy = 0; oy < oh; ++oy) {
            const T *restrict g = dy + (s * oh + oy) * ow;
            for (idx i = 0; i < kh; ++i) {
                idx r = oy * stride_h - pad_h + i * dil_h;
                if (r < 0 || r >= h)
                    continue;
                for (idx j = 0; j < kw; ++j) {
                    idx lo, hi;
                    NAME(inside)(j * dil_w, pad_w, stride_w, w, ow, &lo, &hi);
                    T *restrict row = plane + r * w - pad_w + j * dil_w;
                    T v = f[i * kw + j];
                    if (stride_w == 1)
                        for (idx ox = lo; ox < hi; ++ox)
                            row[ox] += v * g[ox];
                    else
                        for (idx ox = lo; ox < hi; ++ox)
                            row[ox * stride_w] += v * g[ox];
                }
            }
        }
    }
}

#define PCL_DW_BLOCK 256

/* The gradient of depthwise_forward with respect to the filters, summed over the batch:
 * dw (C, kh, kw) += sum over images and output positions of dy * x, channels [start, stop).
 * Each tap's sum runs over blocks of up to PCL_DW_BLOCK output columns: a vector of partial
 * sums (one per column, a loop the compiler vectorises) over all images and rows, then
 * summed. */
EXPORT void NAME(depthwise_backward_weight)(const T *restrict x, const T *restrict dy,
                                            T *restrict dw, idx nb, idx nc, idx h, idx w,
                                            idx kh, idx kw, idx pad_h, idx pad_w,
                                            idx stride_h, idx stride_w, idx dil_h, idx dil_w,
                                            idx oh, idx ow, idx start, idx stop)
{
    T acc[PCL_DW_BLOCK];
    for (idx c = start; c < stop; ++c)
        for (idx i = 0; i < kh; ++i)
            for (idx j = 0; j < kw; ++j) {
                idx lo, hi;
                NAME(inside)(j * dil_w, pad_w, stride_w, w, ow, &lo, &hi);
                T total = (T)0;
                for (idx b0 = lo; b0 < hi; b0 += PCL_DW_BLOCK) {
                    idx n = hi - b0 < PCL_DW_BLOCK ? hi - b0 : PCL_DW_BLOCK;
                    for (idx k = 0; k < n; ++k)
                        acc[k] = (T)0;
                    for (idx b = 0; b < nb; ++b) {
                        const T *plane = x + (b * nc + c) * h * w;
                        for (idx oy = 0; oy < oh; ++oy) {
                            idx r = oy * stride_h - pad_h + i * dil_h;
                            if (r < 0 || r >= h)
                                continue;
                            const T *restrict g = dy + ((b * nc + c) * oh + oy) * ow + b0;
                            const T *restrict row = plane + r * w - pad_w + j * dil_w +
                                                    b0 * stride_w;
                            if (stride_w == 1)
                                for (idx k = 0; k < n; ++k)
                                    acc[k] += g[k] * row[k];
                            else
                                for (idx k = 0; k < n; ++k)
                                    acc[k] += g[k] * row[k * stride_w];
                        }
                    }
                    for (idx k = 0; k < n; ++k)
                        total += acc[k];
                }
                dw[(c * kh + i) * kw + j] += total;
            }
}

/* ---- Winograd F(2x2, 3x3): 3x3 filters, stride 1, dilation 1, one group ------------------
 * Each 2x2 block of outputs ("tile") comes from a 4x4 block of input, d, as
 * Y = A^T [(G g G^T) . (B^T d B)] A, where . is the elementwise product; summed over input
 * channels, the 16 elementwise products become 16 matrix products (U (16, K, C) times
 * V (16, C, T), T tiles), done by BLAS between the transforms below. The matrices:
 *   B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1],  G = [1 0 0; .5 .5 .5; .5 -.5 .5; 0 0 1],
 *   A^T = [1 1 1 0; 0 1 -1 -1]. */

/* U (16, K, C) = G g G^T of the filters g (K, C, 3, 3), output channels [start, stop). */
EXPORT void NAME(winograd_weights)(const T *restrict g, T *restrict u, idx nk, idx nc,
                                   idx start, idx stop)
{
    for (idx k = start; k < stop; ++k)
        for (idx c = 0; c < nc; ++c) {
            const T *f = g + (k * nc + c) * 9;
            T t[4][3]; /* G g */
            for (idx j = 0; j < 3; ++j) {
                T a = f[j], b = f[3 + j], e = f[6 + j];
                t[0][j] = a;
                t[1][j] = (a + b + e) * (T)0.5;
                t[2][j] = (a - b + e) * (T)0.5;
                t[3][j] = e;
            }
            for (idx r = 0; r < 4; ++r) {
                T a = t[r][0], b = t[r][1], e = t[r][2];
                T *o = u + (r * 4) * nk * nc + k * nc + c;
                o[0] = a;
                o[nk * nc] = (a + b + e) * (T)0.5;
                o[2 * nk * nc] = (a - b + e) * (T)0.5;
                o[3 * nk * nc] = e;
            }
        }
}

/* V (16, C, T) = B^T d B for every tile of x (B, C, H, W) padded by (pad_h, pad_w) with
 * zeros, tiles t = (b * th + ty) * tw + tx with their top-left input corner at
 * (2 ty - pad_h, 2 tx - pad_w), channels [start, stop). */
EXPORT void NAME(winograd_input)(const T *restrict x, T *restrict v, idx nb, idx nc, idx h,
                                 idx w, idx pad_h, idx pad_w, idx th, idx tw, idx start,
                                 idx stop)
{
    idx nt = nb * th * tw, stride = nc * nt;
    for (idx c = start; c < stop; ++c)
        for (idx b = 0; b < nb; ++b) {
            const T *plane = x + (b * nc + c) * h * w;
            for (idx ty = 0; ty < th; ++ty) {
                idx r0 = 2 * ty - pad_h;
                int rows_inside = r0 >= 0 && r0 + 4 <= h;
                for (idx tx = 0; tx < tw; ++tx) {
                    idx c0 = 2 * tx - pad_w;
                    T d[4][4];
                    if (rows_inside && c0 >= 0 && c0 + 4 <= w) {
                        for (idx r = 0; r < 4; ++r)
                            for (idx q = 0; q < 4; ++q)
                                d[r][q] = plane[(r0 + r) * w + c0 + q];
                    } else {
                        for (idx r = 0; r < 4; ++r)
                            for (idx q = 0; q < 4; ++q) {
                                idx rr = r0 + r, cc = c0 + q;
                                d[r][q] = (rr >= 0 && rr < h && cc >= 0 && cc < w)
                                              ? plane[rr * w + cc] : (T)0;
                            }
                    }
                    T e[4][4]; /* B^T d */
                    for (idx q = 0; q < 4; ++q) {
                        e[0][q] = d[0][q] - d[2][q];
                        e[1][q] = d[1][q] + d[2][q];
                        e[2][q] = d[2][q] - d[1][q];
                        e[3][q] = d[1][q] - d[3][q];
                    }
                    T *o = v + c * nt + (b * th + ty) * tw + tx;
                    for (idx r = 0; r < 4; ++r) { /* (B^T d) B */
                        o[(r * 4 + 0) * stride] = e[r][0] - e[r][2];
                        o[(r * 4 + 1) * stride] = e[r][1] + e[r][2];
                        o[(r * 4 + 2) * stride] = e[r][2] - e[r][1];
                        o[(r * 4 + 3) * stride] = e[r][1] - e[r][3];
                    }
                }
            }
        }
}

/* y (B, K, OH, OW) = A^T m A for every tile of M (16, K, T) (+ bias[k] when bias is not
 * NULL), the outputs beyond (OH, OW) of the last row and column of tiles dropped, output
 * channels [start, stop). */
EXPORT void NAME(winograd_output)(const T *restrict m, const T *restrict bias, T *restrict y,
                                  idx nb, idx nk, idx oh, idx ow, idx th, idx tw, idx start,
                                  idx stop)
{
    idx nt = nb * th * tw, stride = nk * nt;
    for (idx k = start; k < stop; ++k) {
        T b0 = bias ? bias[k] : (T)0;
        for (idx b = 0; b < nb; ++b) {
            T *plane = y + (b * nk + k) * oh * ow;
            for (idx ty = 0; ty < th; ++ty)
                for (idx tx = 0; tx < tw; ++tx) {
                    const T *s = m + k * nt + (b * th + ty) * tw + tx;
                    T t[2][4]; /* A^T m */
                    for (idx q = 0; q < 4; ++q) {
                        T m0 = s[q * stride], m1 = s[(4 + q) * stride];
                        T m2 = s[(8 + q) * stride], m3 = s[(12 + q) * stride];
                        t[0][q] = m0 + m1 + m2;
                        t[1][q] = m1 - m2 - m3;
                    }
                    idx oy = 2 * ty, ox = 2 * tx;
                    for (idx r = 0; r < 2 && oy + r < oh; ++r) {
                        T *out = plane + (oy + r) * ow + ox;
                        out[0] = t[r][0] + t[r][1] + t[r][2] + b0;
                        if (ox + 1 < ow)
                            out[1] = t[r][1] - t[r][2] - t[r][3] + b0;
                    }
                }
        }
    }
}

/* Convolution kernels of kernels.c for one element type (included once per type, with T the
 * type and NAME(f) the exported name of f for it): the direct depthwise convolution and the
 * transforms of Winograd's F(2x2, 3x3) and F(4x4, 3x3). Unlike the kernels of kernels_impl.h
 * these do not repeat the NumPy code's order of operations (that code is a matrix product
 * whose order is BLAS's): their results equal it to float rounding, with the bounds their
 * tests state. Every kernel handles a range [start, stop) of planes or channels, for threads.
 */

/* ---- depthwise convolution: group == channels == outputs, one filter (kh, kw) per plane -- */

/* One output row of a 3x3, dilation 1 depthwise filter f, columns [lo, hi) whose three
 * input columns c = ox * stride + x0 .. c + 2 are all inside: each output's taps summed in
 * row-major order from 0, the rows r0, r1, r2 taken where use0, use1, use2 (a row outside the
 * image adds nothing, as in the tap-by-tap loop). Inlined with constant flags and strides: a
 * loop the compiler vectorises, each output written once. */
ALWAYS_INLINE void NAME(dw3_row)(T *restrict o, const T *r0, const T *r1, const T *r2,
                                 const T *restrict f, idx lo, idx hi, idx stride, idx x0,
                                 int use0, int use1, int use2)
{
    T f0 = f[0], f1 = f[1], f2 = f[2], f3 = f[3], f4 = f[4], f5 = f[5], f6 = f[6], f7 = f[7];
    T f8 = f[8];
    for (idx ox = lo; ox < hi; ++ox) {
        idx c = ox * stride + x0;
        T acc = (T)0;
        if (use0) {
            acc += f0 * r0[c];
            acc += f1 * r0[c + 1];
            acc += f2 * r0[c + 2];
        }
        if (use1) {
            acc += f3 * r1[c];
            acc += f4 * r1[c + 1];
            acc += f5 * r1[c + 2];
        }
        if (use2) {
            acc += f6 * r2[c];
            acc += f7 * r2[c + 1];
            acc += f8 * r2[c + 2];
        }
        o[ox] = acc;
    }
}

/* dw3_row for a row whose three input rows are all inside, or all but the first or the
 * last, with stride 1 or 2 as constants; any other case with the flags as variables. */
ALWAYS_INLINE void NAME(dw3_row_any)(T *restrict o, const T *r0, const T *r1, const T *r2,
                                     const T *restrict f, idx lo, idx hi, idx stride, idx x0,
                                     int use0, int use1, int use2)
{
    int all = use0 && use1 && use2, top = !use0 && use1 && use2, bottom = use0 && use1 && !use2;
    if (stride == 1 && all)
        NAME(dw3_row)(o, r0, r1, r2, f, lo, hi, 1, x0, 1, 1, 1);
    else if (stride == 2 && all)
        NAME(dw3_row)(o, r0, r1, r2, f, lo, hi, 2, x0, 1, 1, 1);
    else if (stride == 1 && top)
        NAME(dw3_row)(o, r0, r1, r2, f, lo, hi, 1, x0, 0, 1, 1);
    else if (stride == 1 && bottom)
        NAME(dw3_row)(o, r0, r1, r2, f, lo, hi, 1, x0, 1, 1, 0);
    else if (stride == 2 && top)
        NAME(dw3_row)(o, r0, r1, r2, f, lo, hi, 2, x0, 0, 1, 1);
    else if (stride == 2 && bottom)
        NAME(dw3_row)(o, r0, r1, r2, f, lo, hi, 2, x0, 1, 1, 0);
    else
        NAME(dw3_row)(o, r0, r1, r2, f, lo, hi, stride, x0, use0, use1, use2);
}

/* depthwise_forward for 3x3 filters at dilation 1 (MobileNet's): output row by output row,
 * the columns whose window lies inside the image through dw3_row, the others (at most a few
 * at each end) tap by tap with bounds checks; the same sums in the same order as the general
 * loop. */
VECTOR_CLONES
static void NAME(depthwise3_forward)(const T *restrict x, const T *restrict wts,
                                     const T *restrict bias, T *restrict y, idx nc, idx h,
                                     idx w, idx pad_h, idx pad_w, idx stride_h, idx stride_w,
                                     idx oh, idx ow, idx start, idx stop)
{
    /* interior columns: 0 <= ox * stride_w - pad_w and ox * stride_w - pad_w + 2 < w */
    idx lo = (pad_w + stride_w - 1) / stride_w, hi = w - 3 + pad_w < 0 ? 0 :
                                                     (w - 3 + pad_w) / stride_w + 1;
    if (hi > ow)
        hi = ow;
    if (lo > hi)
        lo = hi;
    for (idx s = start; s < stop; ++s) {
        idx c = s % nc;
        const T *plane = x + s * h * w;
        const T *f = wts + c * 9;
        T b = bias ? bias[c] : (T)0;
        for (idx oy = 0; oy < oh; ++oy) {
            T *restrict o = y + (s * oh + oy) * ow;
            idx r = oy * stride_h - pad_h;
            const T *rows[3];
            int use[3];
            for (idx i = 0; i < 3; ++i) {
                use[i] = r + i >= 0 && r + i < h;
                rows[i] = use[i] ? plane + (r + i) * w : plane;
            }
            NAME(dw3_row_any)(o, rows[0], rows[1], rows[2], f, lo, hi, stride_w, -pad_w,
                              use[0], use[1], use[2]);
            for (idx ox = 0; ox < ow; ++ox) {
                if (ox == lo && hi > lo) {
                    ox = hi - 1;
                    continue;
                }
                idx q = ox * stride_w - pad_w;
                T acc = (T)0;
                for (idx i = 0; i < 3; ++i) {
                    if (!use[i])
                        continue;
                    for (idx j = 0; j < 3; ++j)
                        if (q + j >= 0 && q + j < w)
                            acc += f[i * 3 + j] * rows[i][q + j];
                }
                o[ox] = acc;
            }
            if (bias)
                for (idx ox = 0; ox < ow; ++ox)
                    o[ox] += b;
        }
    }
}

/* y (B * C, OH, OW) = the correlation of each plane of x (B * C, H, W) with its channel's
 * filter (plane s has channel s % nc) (+ bias[channel] when bias is not NULL), planes
 * [start, stop). The plane is summed tap by tap (each output's taps in row-major order), each
 * tap a pass over runs of output columns, a loop the compiler vectorises when the stride is
 * 1; the plane stays in cache between the passes. 3x3 filters at dilation 1 go through
 * depthwise3_forward (the same sums, each output written once). */
VECTOR_CLONES
EXPORT void NAME(depthwise_forward)(const T *restrict x, const T *restrict wts,
                                    const T *restrict bias, T *restrict y, idx nc, idx h,
                                    idx w, idx kh, idx kw, idx pad_h, idx pad_w, idx stride_h,
                                    idx stride_w, idx dil_h, idx dil_w, idx oh, idx ow,
                                    idx start, idx stop)
{
    if (kh == 3 && kw == 3 && dil_h == 1 && dil_w == 1) {
        NAME(depthwise3_forward)(x, wts, bias, y, nc, h, w, pad_h, pad_w, stride_h, stride_w,
                                 oh, ow, start, stop);
        return;
    }
    for (idx s = start; s < stop; ++s) {
        idx c = s % nc;
        const T *plane = x + s * h * w;
        const T *f = wts + c * kh * kw;
        T *restrict out = y + s * oh * ow;
        T b = bias ? bias[c] : (T)0;
        for (idx e = 0; e < oh * ow; ++e)
            out[e] = (T)0;
        for (idx i = 0; i < kh; ++i) {
            idx ylo, yhi; /* the output rows whose input row is inside */
            NAME(inside)(i * dil_h, pad_h, stride_h, h, oh, &ylo, &yhi);
            for (idx j = 0; j < kw; ++j) {
                idx lo, hi;
                NAME(inside)(j * dil_w, pad_w, stride_w, w, ow, &lo, &hi);
                T v = f[i * kw + j];
                for (idx oy = ylo; oy < yhi; ++oy) {
                    const T *restrict row = plane + (oy * stride_h - pad_h + i * dil_h) * w -
                                            pad_w + j * dil_w;
                    T *restrict o = out + oy * ow;
                    if (stride_w == 1)
                        for (idx ox = lo; ox < hi; ++ox)
                            o[ox] += v * row[ox];
                    else
                        for (idx ox = lo; ox < hi; ++ox)
                            o[ox] += v * row[ox * stride_w];
                }
            }
        }
        if (bias)
            for (idx e = 0; e < oh * ow; ++e)
                out[e] += b;
    }
}

/* The gradient of depthwise_forward with respect to x: dx (B * C, H, W) (overwritten) from
 * dy (B * C, OH, OW), planes [start, stop), tap by tap as the forward. */
VECTOR_CLONES
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
        for (idx i = 0; i < kh; ++i) {
            idx ylo, yhi;
            NAME(inside)(i * dil_h, pad_h, stride_h, h, oh, &ylo, &yhi);
            for (idx j = 0; j < kw; ++j) {
                idx lo, hi;
                NAME(inside)(j * dil_w, pad_w, stride_w, w, ow, &lo, &hi);
                T v = f[i * kw + j];
                for (idx oy = ylo; oy < yhi; ++oy) {
                    const T *restrict g = dy + (s * oh + oy) * ow;
                    T *restrict row = plane + (oy * stride_h - pad_h + i * dil_h) * w -
                                      pad_w + j * dil_w;
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
VECTOR_CLONES
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
 *   A^T = [1 1 1 0; 0 1 -1 -1].
 * The transforms read and write channel ranges of larger arrays: x has xc channels per image
 * (its first nc transformed: a group's), y has yc (the first nk written). */

#ifndef PCL_WINOGRAD_MAX_TW
#define PCL_WINOGRAD_MAX_TW 1024 /* tiles per row: outputs up to 2048 wide */
#endif

#define PCL_WINOGRAD_BLOCK 64

/* U (16, K, C) = G g G^T of the filters g (K, C, 3, 3), output channels [start, stop). The
 * filters PCL_WINOGRAD_BLOCK at a time: their taps gathered tap-major into f, then the
 * transform as loops over the block that the compiler vectorises, writing runs of U. */
VECTOR_CLONES
EXPORT void NAME(winograd_weights)(const T *restrict g, T *restrict u, idx nk, idx nc,
                                   idx start, idx stop)
{
    T f[9][PCL_WINOGRAD_BLOCK], t[12][PCL_WINOGRAD_BLOCK]; /* t: G g, 4 x 3 */
    idx plane = nk * nc;
    for (idx first = start * nc; first < stop * nc; first += PCL_WINOGRAD_BLOCK) {
        idx n = stop * nc - first < PCL_WINOGRAD_BLOCK ? stop * nc - first : PCL_WINOGRAD_BLOCK;
        for (idx e = 0; e < n; ++e)
            for (idx a = 0; a < 9; ++a)
                f[a][e] = g[(first + e) * 9 + a];
        for (idx j = 0; j < 3; ++j) {
            const T *restrict a = f[j], *restrict b = f[3 + j], *restrict c = f[6 + j];
            T *restrict t0 = t[j], *restrict t1 = t[3 + j], *restrict t2 = t[6 + j];
            T *restrict t3 = t[9 + j];
            for (idx e = 0; e < n; ++e) {
                t0[e] = a[e];
                t1[e] = (a[e] + b[e] + c[e]) * (T)0.5;
                t2[e] = (a[e] - b[e] + c[e]) * (T)0.5;
                t3[e] = c[e];
            }
        }
        for (idx r = 0; r < 4; ++r) {
            const T *restrict a = t[3 * r], *restrict b = t[3 * r + 1];
            const T *restrict c = t[3 * r + 2];
            T *restrict o0 = u + (r * 4) * plane + first, *restrict o1 = o0 + plane;
            T *restrict o2 = o1 + plane, *restrict o3 = o2 + plane;
            for (idx e = 0; e < n; ++e) {
                o0[e] = a[e];
                o1[e] = (a[e] + b[e] + c[e]) * (T)0.5;
                o2[e] = (a[e] - b[e] + c[e]) * (T)0.5;
                o3[e] = c[e];
            }
        }
    }
}

/* Rows [first, first + count) of plane (H, W) into work rows of `wide` elements, the input
 * at columns [lo, hi) (column lo holds input column lo - pad_w), zeros elsewhere and in rows
 * outside the plane: the padded input block of a row of Winograd tiles. */
ALWAYS_INLINE void NAME(winograd_padded_rows)(const T *plane, T *d, idx first, idx count,
                                              idx h, idx w, idx pad_w, idx wide, idx lo,
                                              idx hi)
{
    for (idx r = 0; r < count; ++r) {
        T *row = d + r * wide;
        idx rr = first + r;
        if (rr < 0 || rr >= h || hi <= lo) {
            memset(row, 0, (size_t)wide * sizeof(T));
            continue;
        }
        memset(row, 0, (size_t)lo * sizeof(T));
        memcpy(row + lo, plane + rr * w + (lo - pad_w), (size_t)(hi - lo) * sizeof(T));
        memset(row + hi, 0, (size_t)(wide - hi) * sizeof(T));
    }
}

/* V (16, C, T) = B^T d B for every tile of x (B, C, H, W) padded by (pad_h, pad_w) with
 * zeros, tiles t = (b * th + ty) * tw + tx with their top-left input corner at
 * (2 ty - pad_h, 2 tx - pad_w), channels [start, stop). A row of tiles at a time: its four
 * input rows, padded, into work; B^T d along the columns (e, four rows); then d B for all the
 * tiles of the row, loops over tx that write runs of V and that the compiler vectorises.
 * work: 8 * (2 tw + 2) elements, this call's own. */
VECTOR_CLONES
static void NAME(winograd_input_rows)(const T *restrict x, T *restrict v, T *restrict work,
                                      idx nb, idx nc, idx xc, idx h, idx w, idx pad_h,
                                      idx pad_w, idx th, idx tw, idx start, idx stop)
{
    idx nt = nb * th * tw, stride = nc * nt, wide = 2 * tw + 2;
    T *d = work, *e = work + 4 * wide;
    idx lo = pad_w < wide ? pad_w : wide; /* padded columns [lo, hi) hold the input */
    idx hi = pad_w + w < wide ? pad_w + w : wide;
    for (idx c = start; c < stop; ++c)
        for (idx b = 0; b < nb; ++b) {
            const T *plane = x + (b * xc + c) * h * w;
            for (idx ty = 0; ty < th; ++ty) {
                NAME(winograd_padded_rows)(plane, d, 2 * ty - pad_h, 4, h, w, pad_w, wide, lo,
                                           hi);
                const T *d0 = d, *d1 = d + wide, *d2 = d + 2 * wide, *d3 = d + 3 * wide;
                T *e0 = e, *e1 = e + wide, *e2 = e + 2 * wide, *e3 = e + 3 * wide;
                for (idx q = 0; q < wide; ++q) {
                    e0[q] = d0[q] - d2[q];
                    e1[q] = d1[q] + d2[q];
                    e2[q] = d2[q] - d1[q];
                    e3[q] = d1[q] - d3[q];
                }
                T *o = v + c * nt + (b * th + ty) * tw;
                for (idx r = 0; r < 4; ++r) {
                    const T *restrict er = e + r * wide;
                    T *restrict o0 = o + (r * 4) * stride, *restrict o1 = o0 + stride;
                    T *restrict o2 = o1 + stride, *restrict o3 = o2 + stride;
                    for (idx tx = 0; tx < tw; ++tx) {
                        T a = er[2 * tx], p = er[2 * tx + 1], q = er[2 * tx + 2];
                        T z = er[2 * tx + 3];
                        o0[tx] = a - q;
                        o1[tx] = p + q;
                        o2[tx] = q - p;
                        o3[tx] = p - z;
                    }
                }
            }
        }
}

/* The callers keep tw <= PCL_WINOGRAD_MAX_TW (ops.cpu.convolution checks it). */
EXPORT void NAME(winograd_input)(const T *restrict x, T *restrict v, idx nb, idx nc, idx xc,
                                 idx h, idx w, idx pad_h, idx pad_w, idx th, idx tw, idx start,
                                 idx stop)
{
    T work[8 * (2 * PCL_WINOGRAD_MAX_TW + 2)];
    NAME(winograd_input_rows)(x, v, work, nb, nc, xc, h, w, pad_h, pad_w, th, tw, start, stop);
}

/* y (B, K, OH, OW) = A^T m A for every tile of M (16, K, T) (+ bias[k] when bias is not
 * NULL), the outputs beyond (OH, OW) of the last row and column of tiles dropped, output
 * channels [start, stop). A row of tiles at a time into two output rows in work
 * (4 tw elements, this call's own), then copied. */
VECTOR_CLONES
static void NAME(winograd_output_rows)(const T *restrict m, const T *restrict bias,
                                       T *restrict y, T *restrict work, idx nb, idx nk, idx yc,
                                       idx oh, idx ow, idx th, idx tw, idx start, idx stop)
{
    idx nt = nb * th * tw, stride = nk * nt;
    T *row0 = work, *row1 = work + 2 * tw;
    for (idx k = start; k < stop; ++k) {
        T b0 = bias ? bias[k] : (T)0;
        for (idx b = 0; b < nb; ++b) {
            T *plane = y + (b * yc + k) * oh * ow;
            for (idx ty = 0; ty < th; ++ty) {
                const T *restrict s = m + k * nt + (b * th + ty) * tw;
                for (idx tx = 0; tx < tw; ++tx) {
                    T t0[4], t1[4]; /* A^T m */
                    for (idx q = 0; q < 4; ++q) {
                        T m0 = s[q * stride + tx], m1 = s[(4 + q) * stride + tx];
                        T m2 = s[(8 + q) * stride + tx], m3 = s[(12 + q) * stride + tx];
                        t0[q] = m0 + m1 + m2;
                        t1[q] = m1 - m2 - m3;
                    }
                    row0[2 * tx] = t0[0] + t0[1] + t0[2] + b0;
                    row0[2 * tx + 1] = t0[1] - t0[2] - t0[3] + b0;
                    row1[2 * tx] = t1[0] + t1[1] + t1[2] + b0;
                    row1[2 * tx + 1] = t1[1] - t1[2] - t1[3] + b0;
                }
                idx oy = 2 * ty;
                memcpy(plane + oy * ow, row0, (size_t)ow * sizeof(T));
                if (oy + 1 < oh)
                    memcpy(plane + (oy + 1) * ow, row1, (size_t)ow * sizeof(T));
            }
        }
    }
}

EXPORT void NAME(winograd_output)(const T *restrict m, const T *restrict bias, T *restrict y,
                                  idx nb, idx nk, idx yc, idx oh, idx ow, idx th, idx tw,
                                  idx start, idx stop)
{
    T work[4 * PCL_WINOGRAD_MAX_TW];
    NAME(winograd_output_rows)(m, bias, y, work, nb, nk, yc, oh, ow, th, tw, start, stop);
}

/* ---- Winograd F(4x4, 3x3) ---------------------------------------------------------------
 * As F(2x2, 3x3) above with 4x4 output tiles from 6x6 input blocks and 36 matrix products
 * (U (36, K, C) times V (36, C, T)): 2.25 multiplications per output instead of 4 (and 9
 * directly), and fewer transformed values per output. The matrices (interpolation points
 * 0, 1, -1, 2, -2 and infinity):
 *   B^T = [4 0 -5 0 1 0; 0 -4 -4 1 1 0; 0 4 -4 -1 1 0; 0 -2 -1 2 1 0; 0 2 -1 -2 1 0;
 *          0 4 0 -5 0 1],
 *   G = [1/4 0 0; -1/6 -1/6 -1/6; -1/6 1/6 -1/6; 1/24 1/12 1/6; 1/24 -1/12 1/6; 0 0 1],
 *   A^T = [1 1 1 1 1 0; 0 1 -1 2 -2 0; 0 1 1 4 4 0; 0 1 -1 8 -8 1]. */

/* U (36, K, C) = G g G^T of the filters g (K, C, 3, 3), output channels [start, stop), the
 * filters PCL_WINOGRAD_BLOCK at a time as in winograd_weights. */
VECTOR_CLONES
EXPORT void NAME(winograd4_weights)(const T *restrict g, T *restrict u, idx nk, idx nc,
                                    idx start, idx stop)
{
    T f[9][PCL_WINOGRAD_BLOCK], t[18][PCL_WINOGRAD_BLOCK]; /* t: G g, 6 x 3 */
    const T quarter = (T)0.25, sixth = (T)(1.0 / 6), twelfth = (T)(1.0 / 12);
    const T twentyfourth = (T)(1.0 / 24);
    idx plane = nk * nc;
    for (idx first = start * nc; first < stop * nc; first += PCL_WINOGRAD_BLOCK) {
        idx n = stop * nc - first < PCL_WINOGRAD_BLOCK ? stop * nc - first : PCL_WINOGRAD_BLOCK;
        for (idx e = 0; e < n; ++e)
            for (idx a = 0; a < 9; ++a)
                f[a][e] = g[(first + e) * 9 + a];
        for (idx j = 0; j < 3; ++j) { /* column j of g: (a, b, c) down its rows */
            const T *restrict a = f[j], *restrict b = f[3 + j], *restrict c = f[6 + j];
            for (idx e = 0; e < n; ++e) {
                t[j][e] = a[e] * quarter;
                t[3 + j][e] = -(a[e] + b[e] + c[e]) * sixth;
                t[6 + j][e] = -(a[e] - b[e] + c[e]) * sixth;
                t[9 + j][e] = a[e] * twentyfourth + b[e] * twelfth + c[e] * sixth;
                t[12 + j][e] = a[e] * twentyfourth - b[e] * twelfth + c[e] * sixth;
                t[15 + j][e] = c[e];
            }
        }
        for (idx r = 0; r < 6; ++r) { /* row r of G g: (a, b, c) along it */
            const T *restrict a = t[3 * r], *restrict b = t[3 * r + 1];
            const T *restrict c = t[3 * r + 2];
            T *restrict o = u + (r * 6) * plane + first;
            for (idx e = 0; e < n; ++e) {
                o[e] = a[e] * quarter;
                o[plane + e] = -(a[e] + b[e] + c[e]) * sixth;
                o[2 * plane + e] = -(a[e] - b[e] + c[e]) * sixth;
                o[3 * plane + e] = a[e] * twentyfourth + b[e] * twelfth + c[e] * sixth;
                o[4 * plane + e] = a[e] * twentyfourth - b[e] * twelfth + c[e] * sixth;
                o[5 * plane + e] = c[e];
            }
        }
    }
}

/* V (36, C, T) = B^T d B for every tile of x (B, C, H, W) padded by (pad_h, pad_w) with
 * zeros, tiles t = (b * th + ty) * tw + tx with their top-left input corner at
 * (4 ty - pad_h, 4 tx - pad_w), channels [start, stop), a row of tiles at a time as in
 * winograd_input_rows. work: 12 * (4 tw + 2) elements, this call's own. */
VECTOR_CLONES
static void NAME(winograd4_input_rows)(const T *restrict x, T *restrict v, T *restrict work,
                                       idx nb, idx nc, idx xc, idx h, idx w, idx pad_h,
                                       idx pad_w, idx th, idx tw, idx start, idx stop)
{
    idx nt = nb * th * tw, stride = nc * nt, wide = 4 * tw + 2;
    T *d = work, *e = work + 6 * wide;
    idx lo = pad_w < wide ? pad_w : wide; /* padded columns [lo, hi) hold the input */
    idx hi = pad_w + w < wide ? pad_w + w : wide;
    const T two = (T)2, four = (T)4, five = (T)5;
    for (idx c = start; c < stop; ++c)
        for (idx b = 0; b < nb; ++b) {
            const T *plane = x + (b * xc + c) * h * w;
            for (idx ty = 0; ty < th; ++ty) {
                NAME(winograd_padded_rows)(plane, d, 4 * ty - pad_h, 6, h, w, pad_w, wide, lo,
                                           hi);
                const T *d0 = d, *d1 = d + wide, *d2 = d + 2 * wide, *d3 = d + 3 * wide;
                const T *d4 = d + 4 * wide, *d5 = d + 5 * wide;
                T *e0 = e, *e1 = e + wide, *e2 = e + 2 * wide, *e3 = e + 3 * wide;
                T *e4 = e + 4 * wide, *e5 = e + 5 * wide;
                for (idx q = 0; q < wide; ++q) { /* B^T d down the columns */
                    e0[q] = four * d0[q] - five * d2[q] + d4[q];
                    e1[q] = d3[q] + d4[q] - four * (d1[q] + d2[q]);
                    e2[q] = four * (d1[q] - d2[q]) - d3[q] + d4[q];
                    e3[q] = two * (d3[q] - d1[q]) - d2[q] + d4[q];
                    e4[q] = two * (d1[q] - d3[q]) - d2[q] + d4[q];
                    e5[q] = four * d1[q] - five * d3[q] + d5[q];
                }
                T *o = v + c * nt + (b * th + ty) * tw;
                for (idx r = 0; r < 6; ++r) { /* then B along each tile's row */
                    const T *restrict er = e + r * wide;
                    T *restrict o0 = o + (r * 6) * stride, *restrict o1 = o0 + stride;
                    T *restrict o2 = o1 + stride, *restrict o3 = o2 + stride;
                    T *restrict o4 = o3 + stride, *restrict o5 = o4 + stride;
                    for (idx tx = 0; tx < tw; ++tx) {
                        const T *p = er + 4 * tx;
                        o0[tx] = four * p[0] - five * p[2] + p[4];
                        o1[tx] = p[3] + p[4] - four * (p[1] + p[2]);
                        o2[tx] = four * (p[1] - p[2]) - p[3] + p[4];
                        o3[tx] = two * (p[3] - p[1]) - p[2] + p[4];
                        o4[tx] = two * (p[1] - p[3]) - p[2] + p[4];
                        o5[tx] = four * p[1] - five * p[3] + p[5];
                    }
                }
            }
        }
}

/* The callers keep tw <= PCL_WINOGRAD_MAX_TW / 2 (outputs up to 2048 wide, as F(2x2)). */
EXPORT void NAME(winograd4_input)(const T *restrict x, T *restrict v, idx nb, idx nc, idx xc,
                                  idx h, idx w, idx pad_h, idx pad_w, idx th, idx tw, idx start,
                                  idx stop)
{
    T work[12 * (2 * PCL_WINOGRAD_MAX_TW + 2)];
    NAME(winograd4_input_rows)(x, v, work, nb, nc, xc, h, w, pad_h, pad_w, th, tw, start, stop);
}

/* y (B, K, OH, OW) = A^T m A for every tile of M (36, K, T) (+ bias[k] when bias is not
 * NULL), the outputs beyond (OH, OW) dropped, output channels [start, stop); a row of tiles
 * at a time into four output rows in work (16 tw elements, this call's own), then copied. */
VECTOR_CLONES
static void NAME(winograd4_output_rows)(const T *restrict m, const T *restrict bias,
                                        T *restrict y, T *restrict work, idx nb, idx nk, idx yc,
                                        idx oh, idx ow, idx th, idx tw, idx start, idx stop)
{
    idx nt = nb * th * tw, stride = nk * nt;
    const T two = (T)2, four = (T)4, eight = (T)8;
    for (idx k = start; k < stop; ++k) {
        T b0 = bias ? bias[k] : (T)0;
        for (idx b = 0; b < nb; ++b) {
            T *plane = y + (b * yc + k) * oh * ow;
            for (idx ty = 0; ty < th; ++ty) {
                const T *restrict s = m + k * nt + (b * th + ty) * tw;
                for (idx tx = 0; tx < tw; ++tx) {
                    T t[4][6]; /* A^T m */
                    for (idx q = 0; q < 6; ++q) {
                        T m0 = s[q * stride + tx], m1 = s[(6 + q) * stride + tx];
                        T m2 = s[(12 + q) * stride + tx], m3 = s[(18 + q) * stride + tx];
                        T m4 = s[(24 + q) * stride + tx], m5 = s[(30 + q) * stride + tx];
                        t[0][q] = m0 + m1 + m2 + m3 + m4;
                        t[1][q] = m1 - m2 + two * (m3 - m4);
                        t[2][q] = m1 + m2 + four * (m3 + m4);
                        t[3][q] = m1 - m2 + eight * (m3 - m4) + m5;
                    }
                    for (idx p = 0; p < 4; ++p) { /* then A along the tile's rows */
                        T *row = work + p * 4 * tw + 4 * tx;
                        const T *r = t[p];
                        row[0] = r[0] + r[1] + r[2] + r[3] + r[4] + b0;
                        row[1] = r[1] - r[2] + two * (r[3] - r[4]) + b0;
                        row[2] = r[1] + r[2] + four * (r[3] + r[4]) + b0;
                        row[3] = r[1] - r[2] + eight * (r[3] - r[4]) + r[5] + b0;
                    }
                }
                for (idx p = 0; p < 4 && 4 * ty + p < oh; ++p)
                    memcpy(plane + (4 * ty + p) * ow, work + p * 4 * tw,
                           (size_t)ow * sizeof(T));
            }
        }
    }
}

EXPORT void NAME(winograd4_output)(const T *restrict m, const T *restrict bias, T *restrict y,
                                   idx nb, idx nk, idx yc, idx oh, idx ow, idx th, idx tw,
                                   idx start, idx stop)
{
    T work[8 * PCL_WINOGRAD_MAX_TW];
    NAME(winograd4_output_rows)(m, bias, y, work, nb, nk, yc, oh, ow, th, tw, start, stop);
}

/* ---- 1x1 convolution (stride 1, no pad, one group), direct ---------------------------------
 * y (N, K, P) = w (K, C) . x (N, C, P) (+ bias (K,)) (then max(., 0) when relu), a product
 * whose inner dimension C is short in the narrow layers (16-128 channels), where a BLAS call
 * spends more time packing and waking its threads than multiplying. Work units [start, stop)
 * are (image, block of PCL_PW_LANES * 3 pixels) pairs. Per unit, register tiles of 4 output
 * channels x 3 vectors of pixels (12 accumulators) sum over c in increasing order, reading the
 * input rows in place (no packing: the pixels of a channel are contiguous); the bias and the
 * ReLU are applied before the tile is stored. The last, partial block of an image runs the same
 * sums one pixel at a time. Each output is sum_c w[k][c] x[c][p] taken in increasing c, so it
 * differs from the exact sum by at most C * eps * sum |w x|, as any BLAS order does. ReLU
 * keeps a NaN (NumPy's maximum does). */
#ifndef PCL_PW_LANES_DEFINED
#define PCL_PW_LANES_DEFINED
#define PCL_PW_BYTES 32
/* Unlike the other vector loops this one may fuse each multiply-add (one rounding instead of
 * two: the bound above holds all the more): on processors with AVX2 and FMA it runs a copy
 * built for them that contracts a * b + c (a separate multiply and add halve the rate on
 * cores whose adders are the multipliers' ports). Chosen at run time from the processor's
 * features (target_clones' "arch=" clones would test its model name instead). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 8 && \
    !defined(PCL_CLONES_GIVEN)
#define PCL_PW_FMA
#define PCL_PW_CONTRACT __attribute__((optimize("fp-contract=fast")))
#else
#define PCL_PW_CONTRACT
#endif
#endif
ALWAYS_INLINE PCL_PW_CONTRACT void NAME(pointwise_body)(const T *restrict x, const T *restrict w,
                                                       const T *restrict bias, T *restrict y,
                                                       idx nk, idx nc, idx npix, idx relu,
                                                       idx start, idx stop, T *restrict pack)
{
    typedef T vec __attribute__((vector_size(PCL_PW_BYTES), aligned(sizeof(T))));
    enum { L = PCL_PW_BYTES / sizeof(T), TILE = 3 * L };
    const idx blocks = (npix + TILE - 1) / TILE;
    const vec zero = {0};
    for (idx u = start; u < stop; ++u) {
        const idx b = u / blocks, p0 = (u % blocks) * TILE;
        const T *xb = x + b * nc * npix + p0;
        T *yb = y + b * nk * npix + p0;
        if (p0 + TILE > npix) { /* the partial block: one pixel at a time */
            for (idx k = 0; k < nk; ++k)
                for (idx p = 0; p < npix - p0; ++p) {
                    T s = (T)0;
                    for (idx c = 0; c < nc; ++c)
                        s += w[k * nc + c] * xb[c * npix + p];
                    if (bias)
                        s += bias[k];
                    if (relu && !(s > (T)0) && s == s)
                        s = (T)0;
                    yb[k * npix + p] = s;
                }
            continue;
        }
        /* the block's rows side by side (pack: nc * TILE values), read once per 4 outputs */
        const T *xs = xb;
        idx step = npix;
        if (pack) {
            for (idx c = 0; c < nc; ++c)
                memcpy(pack + c * TILE, xb + c * npix, TILE * sizeof(T));
            xs = pack;
            step = TILE;
        }
        idx k = 0;
        for (; k + 4 <= nk; k += 4) {
            vec a[4][3];
            for (int r = 0; r < 4; ++r)
                for (int j = 0; j < 3; ++j)
                    a[r][j] = zero;
            const T *w0 = w + k * nc;
            const T *xp = xs;
            for (idx c = 0; c < nc; ++c, xp += step) {
                const vec x0 = *(const vec *)xp, x1 = *(const vec *)(xp + L),
                          x2 = *(const vec *)(xp + 2 * L);
                for (int r = 0; r < 4; ++r) {
                    const vec s = zero + w0[r * nc + c];
                    a[r][0] += s * x0;
                    a[r][1] += s * x1;
                    a[r][2] += s * x2;
                }
            }
            for (int r = 0; r < 4; ++r)
                for (int j = 0; j < 3; ++j) {
                    vec v = a[r][j];
                    if (bias)
                        v += bias[k + r];
                    if (relu) /* keep v where v > 0 or v is NaN, else +0 */
                        v = (vec)((__typeof__(v > v))v & ((v > zero) | (v != v)));
                    *(vec *)(yb + (k + r) * npix + j * L) = v;
                }
        }
        for (; k < nk; ++k) {
            vec a0 = zero, a1 = zero, a2 = zero;
            const T *xp = xs;
            for (idx c = 0; c < nc; ++c, xp += step) {
                const vec s = zero + w[k * nc + c];
                a0 += s * *(const vec *)xp;
                a1 += s * *(const vec *)(xp + L);
                a2 += s * *(const vec *)(xp + 2 * L);
            }
            vec v[3] = {a0, a1, a2};
            for (int j = 0; j < 3; ++j) {
                if (bias)
                    v[j] += bias[k];
                if (relu)
                    v[j] = (vec)((__typeof__(v[j] > v[j]))v[j] & ((v[j] > zero) | (v[j] != v[j])));
                *(vec *)(yb + k * npix + j * L) = v[j];
            }
        }
    }
}

#ifdef PCL_PW_FMA
__attribute__((target("avx2,fma"))) PCL_PW_CONTRACT static void NAME(pointwise_fma)(
    const T *restrict x, const T *restrict w, const T *restrict bias, T *restrict y, idx nk,
    idx nc, idx npix, idx relu, idx start, idx stop, T *restrict pack)
{
    NAME(pointwise_body)(x, w, bias, y, nk, nc, npix, relu, start, stop, pack);
}
#endif

VECTOR_CLONES
static void NAME(pointwise_plain)(const T *restrict x, const T *restrict w,
                                  const T *restrict bias, T *restrict y, idx nk, idx nc,
                                  idx npix, idx relu, idx start, idx stop, T *restrict pack)
{
    NAME(pointwise_body)(x, w, bias, y, nk, nc, npix, relu, start, stop, pack);
}

EXPORT void NAME(pointwise_forward)(const T *restrict x, const T *restrict w,
                                    const T *restrict bias, T *restrict y, idx nk, idx nc,
                                    idx npix, idx relu, idx start, idx stop)
{
    /* this call's packed block (without memory: the rows are read in place) */
    T *pack = (T *)malloc((size_t)nc * 3 * PCL_PW_BYTES);
#ifdef PCL_PW_FMA
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        NAME(pointwise_fma)(x, w, bias, y, nk, nc, npix, relu, start, stop, pack);
    else
#endif
        NAME(pointwise_plain)(x, w, bias, y, nk, nc, npix, relu, start, stop, pack);
    free(pack);
}

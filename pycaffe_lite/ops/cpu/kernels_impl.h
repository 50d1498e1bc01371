/* The kernels of kernels.c for one element type: included once per type, with T the type
 * and NAME(f) the exported name of f for it. Every kernel handles a range [start, stop) of
 * channels or of (image, channel) planes, so that threads can share one call. Sums are taken
 * in the order the NumPy code takes them, so the results are the same bit for bit.
 */

/* The output columns [*lo, *hi) whose input column xo * stride - pad + offset lies in
 * [0, width). */
static void NAME(inside)(idx offset, idx pad, idx stride, idx width, idx count, idx *lo,
                         idx *hi)
{
    idx first = pad - offset, last = width - 1 + pad - offset;
    *lo = first <= 0 ? 0 : (first + stride - 1) / stride;
    *hi = last < 0 ? 0 : last / stride + 1;
    if (*hi > count)
        *hi = count;
    if (*lo > count)
        *lo = count;
    if (*hi < *lo)
        *hi = *lo;
}

/* cols (C, kh, kw, B, OH, OW) of images x (B, C, H, W), channels [start, stop): Caffe's
 * column matrix of each image side by side (column b * OH * OW + p), zero outside. */
EXPORT void NAME(im2col_batch_first)(const T *restrict x, T *restrict cols, idx nb, idx nc,
                                     idx h, idx w, idx kh, idx kw, idx pad_h, idx pad_w,
                                     idx stride_h, idx stride_w, idx dil_h, idx dil_w, idx oh,
                                     idx ow, idx start, idx stop)
{
    for (idx c = start; c < stop; ++c)
        for (idx i = 0; i < kh; ++i)
            for (idx j = 0; j < kw; ++j) {
                idx lo, hi;
                NAME(inside)(j * dil_w, pad_w, stride_w, w, ow, &lo, &hi);
                for (idx b = 0; b < nb; ++b) {
                    const T *plane = x + (b * nc + c) * h * w;
                    T *out = cols + ((((c * kh + i) * kw + j) * nb + b) * oh) * ow;
                    for (idx y = 0; y < oh; ++y, out += ow) {
                        idx r = y * stride_h - pad_h + i * dil_h;
                        if (r < 0 || r >= h) {
                            for (idx xo = 0; xo < ow; ++xo)
                                out[xo] = (T)0;
                            continue;
                        }
                        const T *row = plane + r * w - pad_w + j * dil_w;
                        for (idx xo = 0; xo < lo; ++xo)
                            out[xo] = (T)0;
                        if (stride_w == 1)
                            memcpy(out + lo, row + lo, (size_t)(hi - lo) * sizeof(T));
                        else
                            for (idx xo = lo; xo < hi; ++xo)
                                out[xo] = row[xo * stride_w];
                        for (idx xo = hi; xo < ow; ++xo)
                            out[xo] = (T)0;
                    }
                }
            }
}

/* The adjoint of im2col_batch_first into out (B, C, H, W) (overwritten), channels
 * [start, stop); overlapping windows summed in kernel-offset order. */
VECTOR_CLONES
EXPORT void NAME(col2im_batch_first)(const T *restrict cols, T *restrict out, idx nb, idx nc,
                                     idx h, idx w, idx kh, idx kw, idx pad_h, idx pad_w,
                                     idx stride_h, idx stride_w, idx dil_h, idx dil_w, idx oh,
                                     idx ow, idx start, idx stop)
{
    for (idx c = start; c < stop; ++c) {
        for (idx b = 0; b < nb; ++b)
            memset(out + (b * nc + c) * h * w, 0, (size_t)(h * w) * sizeof(T));
        for (idx i = 0; i < kh; ++i)
            for (idx j = 0; j < kw; ++j) {
                idx lo, hi;
                NAME(inside)(j * dil_w, pad_w, stride_w, w, ow, &lo, &hi);
                for (idx b = 0; b < nb; ++b) {
                    T *plane = out + (b * nc + c) * h * w;
                    const T *in = cols + ((((c * kh + i) * kw + j) * nb + b) * oh) * ow;
                    for (idx y = 0; y < oh; ++y, in += ow) {
                        idx r = y * stride_h - pad_h + i * dil_h;
                        if (r < 0 || r >= h)
                            continue;
                        T *row = plane + r * w - pad_w + j * dil_w;
                        for (idx xo = lo; xo < hi; ++xo)
                            row[xo * stride_w] += in[xo];
                    }
                }
            }
    }
}

/* One output row's update by one kernel offset: best[px] = max(best[px], row[px * stride]) for
 * px in [lo, hi), pick[px] = k where the new value is larger. Inlined with stride 1 and 2 as
 * constants: contiguous (or pairwise) vector loads instead of a gather. */
ALWAYS_INLINE void NAME(max_pool_row)(const T *restrict row, T *restrict best,
                                      int32_t *restrict pick, int32_t k, idx lo, idx hi,
                                      idx stride)
{
    for (idx px = lo; px < hi; ++px) {
        T v = row[px * stride];
        int32_t better = -(int32_t)(v > best[px]); /* all ones or zero */
        pick[px] += (k - pick[px]) & better;
        best[px] = v > best[px] ? v : best[px]; /* a max instruction */
    }
}

/* The output columns each kernel column j reaches (NAME(inside)), worked out once per call
 * for the first PCL_POOL_KNOWN kernel columns (pool_columns) and read back, or computed for
 * wider kernels (pool_column). */
#ifndef PCL_POOL_KNOWN
#define PCL_POOL_KNOWN 64
#endif

static void NAME(pool_columns)(idx *los, idx *his, idx kw, idx pad_w, idx stride_w, idx w,
                               idx pw)
{
    for (idx j = 0; j < kw && j < PCL_POOL_KNOWN; ++j)
        NAME(inside)(j, pad_w, stride_w, w, pw, &los[j], &his[j]);
}

ALWAYS_INLINE void NAME(pool_column)(const idx *los, const idx *his, idx j, idx pad_w,
                                     idx stride_w, idx w, idx pw, idx *lo, idx *hi)
{
    if (j < PCL_POOL_KNOWN) {
        *lo = los[j];
        *hi = his[j];
    } else {
        NAME(inside)(j, pad_w, stride_w, w, pw, lo, hi);
    }
}

/* max_pool_row without the choices (argmax not wanted). */
ALWAYS_INLINE void NAME(max_pool_row_values)(const T *restrict row, T *restrict best,
                                             idx lo, idx hi, idx stride)
{
    for (idx px = lo; px < hi; ++px) {
        T v = row[px * stride];
        best[px] = v > best[px] ? v : best[px];
    }
}

/* MAX pooling over planes [start, stop) of x (S, H, W): each window's first maximum in
 * row-major order (strict > from -FLT_MAX, so NaN never wins) into top (S, PH, PW), and its
 * kernel offset i * kw + j (-1 when none) into argmax (when not NULL). For each output row,
 * the kernel offsets are the outer loops and the output columns the inner one: a loop without
 * branches (on random data the processor would mispredict every other comparison), where a
 * loop per window would be a few steps long. The columns each kernel column reaches are
 * worked out once per call (up to 64 kernel columns; wider kernels per row). */
VECTOR_CLONES
EXPORT void NAME(max_pool_forward)(const T *restrict x, T *restrict top,
                                   int32_t *restrict argmax, idx h, idx w, idx ph,
                                   idx pw, idx kh, idx kw, idx pad_h, idx pad_w, idx stride_h,
                                   idx stride_w, idx start, idx stop)
{
    const T floor = (T)-FLT_MAX;
    idx los[PCL_POOL_KNOWN], his[PCL_POOL_KNOWN];
    NAME(pool_columns)(los, his, kw, pad_w, stride_w, w, pw);
    for (idx s = start; s < stop; ++s) {
        const T *plane = x + s * h * w;
        for (idx py = 0; py < ph; ++py) {
            T *restrict best = top + (s * ph + py) * pw;
            int32_t *restrict pick = argmax ? argmax + (s * ph + py) * pw : NULL;
            for (idx px = 0; px < pw; ++px)
                best[px] = floor;
            if (pick)
                for (idx px = 0; px < pw; ++px)
                    pick[px] = -1;
            for (idx i = 0; i < kh; ++i) {
                idx r = py * stride_h - pad_h + i;
                if (r < 0 || r >= h)
                    continue;
                for (idx j = 0; j < kw; ++j) {
                    idx lo, hi;
                    NAME(pool_column)(los, his, j, pad_w, stride_w, w, pw, &lo, &hi);
                    const T *row = plane + r * w - pad_w + j;
                    int32_t k = (int32_t)(i * kw + j);
                    if (!pick) {
                        if (stride_w == 1)
                            NAME(max_pool_row_values)(row, best, lo, hi, 1);
                        else if (stride_w == 2)
                            NAME(max_pool_row_values)(row, best, lo, hi, 2);
                        else
                            NAME(max_pool_row_values)(row, best, lo, hi, stride_w);
                    } else if (stride_w == 1)
                        NAME(max_pool_row)(row, best, pick, k, lo, hi, 1);
                    else if (stride_w == 2)
                        NAME(max_pool_row)(row, best, pick, k, lo, hi, 2);
                    else
                        NAME(max_pool_row)(row, best, pick, k, lo, hi, stride_w);
                }
            }
        }
    }
}

/* AVE pooling over planes [start, stop) of x (S, H, W): each window's in-image values summed
 * from 0 in row-major kernel order (the NumPy code adds the padding's zeros too, which changes
 * no sum that starts at +0), then divided by divisors (PH, PW). One output per plane (global
 * pooling) sums the window's rows in place of a loop per kernel offset. */
VECTOR_CLONES
EXPORT void NAME(ave_pool_forward)(const T *restrict x, T *restrict top,
                                   const T *restrict divisors, idx h, idx w, idx ph, idx pw,
                                   idx kh, idx kw, idx pad_h, idx pad_w, idx stride_h,
                                   idx stride_w, idx start, idx stop)
{
    idx los[PCL_POOL_KNOWN], his[PCL_POOL_KNOWN];
    NAME(pool_columns)(los, his, kw, pad_w, stride_w, w, pw);
    for (idx s = start; s < stop; ++s) {
        const T *plane = x + s * h * w;
        if (ph == 1 && pw == 1) {
            idx r0 = pad_h > 0 ? 0 : -pad_h, r1 = kh - pad_h < h ? kh - pad_h : h;
            idx c0 = pad_w > 0 ? 0 : -pad_w, c1 = kw - pad_w < w ? kw - pad_w : w;
            T sum = (T)0;
            for (idx r = r0; r < r1; ++r)
                for (idx c = c0; c < c1; ++c)
                    sum += plane[r * w + c];
            top[s] = sum / divisors[0];
            continue;
        }
        for (idx py = 0; py < ph; ++py) {
            T *restrict out = top + (s * ph + py) * pw;
            for (idx px = 0; px < pw; ++px)
                out[px] = (T)0;
            for (idx i = 0; i < kh; ++i) {
                idx r = py * stride_h - pad_h + i;
                if (r < 0 || r >= h)
                    continue;
                for (idx j = 0; j < kw; ++j) {
                    idx lo, hi;
                    NAME(pool_column)(los, his, j, pad_w, stride_w, w, pw, &lo, &hi);
                    const T *row = plane + r * w - pad_w + j;
                    if (stride_w == 1)
                        for (idx px = lo; px < hi; ++px)
                            out[px] += row[px];
                    else
                        for (idx px = lo; px < hi; ++px)
                            out[px] += row[px * stride_w];
                }
            }
            const T *restrict div = divisors + py * pw;
            for (idx px = 0; px < pw; ++px)
                out[px] = out[px] / div[px];
        }
    }
}

/* The gradient of max_pool_forward over planes [start, stop): bottom_diff (S, H, W) zeroed,
 * then each window's gradient added at its picked element (none where argmax is -1). The
 * windows are visited in reverse raster order: a bottom element picked by several windows
 * then sums them in increasing kernel offset, the order of the NumPy code. */
EXPORT void NAME(max_pool_backward)(const T *top_diff, const int32_t *argmax, T *bottom_diff,
                                    idx h, idx w, idx ph, idx pw, idx kh, idx kw, idx pad_h,
                                    idx pad_w, idx stride_h, idx stride_w, idx start, idx stop)
{
    (void)kh; /* the same geometry arguments as the forward */
    for (idx s = start; s < stop; ++s) {
        T *d = bottom_diff + s * h * w;
        const T *g = top_diff + s * ph * pw;
        const int32_t *a = argmax + s * ph * pw;
        memset(d, 0, (size_t)(h * w) * sizeof(T));
        for (idx py = ph - 1; py >= 0; --py)
            for (idx px = pw - 1; px >= 0; --px) {
                int32_t k = a[py * pw + px];
                if (k < 0)
                    continue;
                idx r = py * stride_h - pad_h + k / kw, q = px * stride_w - pad_w + k % kw;
                d[r * w + q] += g[py * pw + px];
            }
    }
}

/* y = x + bias[c] (when bias is given), then max(y, 0) (when relu) as NumPy's maximum takes
 * it (y <= 0 gives +0, NaN stays NaN), over planes [start, stop) of (S, P) arrays whose plane
 * s is channel s % nc; y may be x (in place). */
VECTOR_CLONES
EXPORT void NAME(bias_relu)(const T *x, T *y, const T *bias, idx nc, idx npix, int32_t relu,
                            idx start, idx stop)
{
    for (idx s = start; s < stop; ++s) {
        const T *in = x + s * npix;
        T *out = y + s * npix;
        T b = bias ? bias[s % nc] : (T)0;
        if (bias && relu)
            for (idx p = 0; p < npix; ++p) {
                T v = in[p] + b;
                out[p] = v <= (T)0 ? (T)0 : v;
            }
        else if (bias)
            for (idx p = 0; p < npix; ++p)
                out[p] = in[p] + b;
        else if (relu)
            for (idx p = 0; p < npix; ++p) {
                T v = in[p];
                out[p] = v <= (T)0 ? (T)0 : v;
            }
        else if (out != in)
            memcpy(out, in, (size_t)npix * sizeof(T));
    }
}

/* y = a + b, then max(y, 0) when relu (as bias_relu: a NaN stays), over elements
 * [start, stop): Eltwise SUM of two blobs and the ReLU after it in one pass. */
VECTOR_CLONES
EXPORT void NAME(add_relu)(const T *a, const T *b, T *y, int32_t relu, idx start, idx stop)
{
    if (relu)
        for (idx i = start; i < stop; ++i) {
            T v = a[i] + b[i];
            y[i] = v <= (T)0 ? (T)0 : v;
        }
    else
        for (idx i = start; i < stop; ++i)
            y[i] = a[i] + b[i];
}

/* ReLU's gradient (negative slope 0) over elements [start, stop): dx = dy * (x > 0), the
 * product NumPy forms (a NaN or negative top gradient times 0 gives NaN or -0). */
VECTOR_CLONES
EXPORT void NAME(relu_backward)(const T *x, const T *dy, T *dx, idx start, idx stop)
{
    for (idx e = start; e < stop; ++e)
        dx[e] = dy[e] * (T)(x[e] > (T)0);
}

/* The SGD solver's step for elements [start, stop) of one parameter, as its NumPy steps do it,
 * rounding after every operation as they do: g = diff * norm (norm = 1 / iter_size; skipped
 * when 1); g += decay * data (L2) or decay * sign(data) (L1) when decay is not 0; history =
 * history * momentum + g * rate; diff = history. */
VECTOR_CLONES
EXPORT void NAME(sgd_update)(T *restrict diff, T *restrict history, const T *restrict data,
                             T norm, T decay, int32_t l1, T rate, T momentum, idx start,
                             idx stop)
{
    for (idx i = start; i < stop; ++i) {
        T g = diff[i];
        if (norm != (T)1)
            g = g * norm;
        if (decay != (T)0) {
            T v = data[i];
            T reg = l1 ? (T)((v > (T)0) - (v < (T)0)) * decay : v * decay;
            g = g + reg;
        }
        T h = history[i] * momentum;
        g = g * rate;
        h = h + g;
        history[i] = h;
        diff[i] = h;
    }
}

/* One image of LRN: out (C, P) = the sum over the size channels centred on each channel of
 * src (C, P) (squared first when square), in window order from the first channel, as the
 * NumPy code sums. */
VECTOR_CLONES
static void NAME(channel_window_sum)(const T *restrict src, T *restrict out, idx nc, idx npix,
                                     idx size, int square)
{
    idx pre = (size - 1) / 2;
    for (idx c = 0; c < nc; ++c, out += npix) {
        for (idx p = 0; p < npix; ++p)
            out[p] = (T)0;
        for (idx i = 0; i < size; ++i) {
            idx cc = c - pre + i;
            if (cc < 0 || cc >= nc)
                continue;
            const T *restrict row = src + cc * npix;
            if (square)
                for (idx p = 0; p < npix; ++p)
                    out[p] += row[p] * row[p];
            else
                for (idx p = 0; p < npix; ++p)
                    out[p] += row[p];
        }
    }
}

/* LRN across channels, planes [start, stop) of x (N * C, P) (plane n * C + c): scale = k +
 * a * (the window sum of x^2; a = alpha / size), summed as channel_window_sum sums. When top
 * is given (beta = 0.75), also top = x / (sqrt(scale) * sqrt(sqrt(scale))), x * scale^-0.75
 * through two correctly rounded square roots, as the NumPy code computes it. */
VECTOR_CLONES
EXPORT void NAME(lrn_scale)(const T *restrict x, T *restrict scale, T *restrict top, idx nc,
                            idx npix, idx size, T a, T k, idx start, idx stop)
{
    idx pre = (size - 1) / 2;
    for (idx s = start; s < stop; ++s) {
        idx n = s / nc, c = s % nc;
        T *restrict out = scale + s * npix;
        for (idx p = 0; p < npix; ++p)
            out[p] = (T)0;
        for (idx i = 0; i < size; ++i) {
            idx cc = c - pre + i;
            if (cc < 0 || cc >= nc)
                continue;
            const T *restrict row = x + (n * nc + cc) * npix;
            for (idx p = 0; p < npix; ++p)
                out[p] += row[p] * row[p];
        }
        for (idx p = 0; p < npix; ++p)
            out[p] = out[p] * a + k;
        if (top) {
            const T *restrict in = x + s * npix;
            T *restrict y = top + s * npix;
            for (idx p = 0; p < npix; ++p) {
                T r = SQRT(out[p]);
                T t = r * SQRT(r);
                y[p] = in[p] / t;
            }
        }
    }
}

/* LRN's backward window term, images [start, stop): accum = the window sum of
 * top_diff * top / scale (computed once per element into work, an (N, C, P) buffer). */
VECTOR_CLONES
EXPORT void NAME(lrn_accum)(const T *restrict top_diff, const T *restrict top,
                            const T *restrict scale, T *restrict work, T *restrict accum,
                            idx nc, idx npix, idx size, idx start, idx stop)
{
    for (idx n = start; n < stop; ++n) {
        idx base = n * nc * npix;
        for (idx e = base; e < base + nc * npix; ++e)
            work[e] = top_diff[e] * top[e] / scale[e];
        NAME(channel_window_sum)(work + base, accum + base, nc, npix, size, 0);
    }
}

/* The kernels of kernels.c for one element type: included once per type, with T the type
 * and NAME(f) the exported name of f for it. Every kernel handles a range [start, stop) of
 * channels or of (image, channel) planes, so that threads can share one call. Sums are taken
 * in the order the NumPy code takes them, so the results are the same bit for bit.
 */

/* cols (C, kh, kw, OH, OW, B) of images x (B, C, H, W), channels [start, stop). Each channel
 * is first copied, batch last and zero-padded, into a buffer; every column element is then a
 * copy of B contiguous values (OW * B of them when the horizontal stride is 1). */
EXPORT int NAME(im2col_batch_last)(const T *x, T *cols, idx nb, idx nc, idx h, idx w, idx kh,
                                   idx kw, idx pad_h, idx pad_w, idx stride_h, idx stride_w,
                                   idx dil_h, idx dil_w, idx oh, idx ow, idx start, idx stop)
{
    idx hp = h + 2 * pad_h, wp = w + 2 * pad_w;
    T *buf = (T *)calloc((size_t)(hp * wp * nb), sizeof(T));
    if (buf == NULL)
        return -1;
    for (idx c = start; c < stop; ++c) {
        for (idx b = 0; b < nb; ++b) {
            const T *src = x + (b * nc + c) * h * w;
            for (idx r = 0; r < h; ++r)
                for (idx q = 0; q < w; ++q)
                    buf[((r + pad_h) * wp + q + pad_w) * nb + b] = src[r * w + q];
        }
        T *out = cols + c * kh * kw * oh * ow * nb;
        for (idx i = 0; i < kh; ++i)
            for (idx j = 0; j < kw; ++j)
                for (idx y = 0; y < oh; ++y) {
                    const T *row = buf + ((y * stride_h + i * dil_h) * wp + j * dil_w) * nb;
                    if (stride_w == 1) {
                        memcpy(out, row, (size_t)(ow * nb) * sizeof(T));
                        out += ow * nb;
                        continue;
                    }
                    if (nb == 1) {
                        for (idx xo = 0; xo < ow; ++xo)
                            out[xo] = row[xo * stride_w];
                        out += ow;
                        continue;
                    }
                    for (idx xo = 0; xo < ow; ++xo, out += nb)
                        memcpy(out, row + xo * stride_w * nb, (size_t)nb * sizeof(T));
                }
    }
    free(buf);
    return 0;
}

/* out (B, C, H, W) = the sum over overlapping windows of cols (C, kh, kw, OH, OW, B), kernel
 * offsets in row-major order, channels [start, stop). */
EXPORT int NAME(col2im_batch_last)(const T *restrict cols, T *restrict out, idx nb, idx nc, idx h, idx w, idx kh,
                                   idx kw, idx pad_h, idx pad_w, idx stride_h, idx stride_w,
                                   idx dil_h, idx dil_w, idx oh, idx ow, idx start, idx stop)
{
    idx hp = h + 2 * pad_h, wp = w + 2 * pad_w;
    T *acc = (T *)malloc((size_t)(hp * wp * nb) * sizeof(T));
    if (acc == NULL)
        return -1;
    for (idx c = start; c < stop; ++c) {
        memset(acc, 0, (size_t)(hp * wp * nb) * sizeof(T));
        const T *restrict in = cols + c * kh * kw * oh * ow * nb;
        for (idx i = 0; i < kh; ++i)
            for (idx j = 0; j < kw; ++j)
                for (idx y = 0; y < oh; ++y) {
                    T *restrict row = acc + ((y * stride_h + i * dil_h) * wp + j * dil_w) * nb;
                    if (stride_w == 1) { /* one run of OW * B values */
                        for (idx e = 0; e < ow * nb; ++e)
                            row[e] += in[e];
                        in += ow * nb;
                        continue;
                    }
                    if (nb == 1) {
                        for (idx xo = 0; xo < ow; ++xo)
                            row[xo * stride_w] += in[xo];
                        in += ow;
                        continue;
                    }
                    for (idx xo = 0; xo < ow; ++xo, in += nb) {
                        T *a = row + xo * stride_w * nb;
                        for (idx b = 0; b < nb; ++b)
                            a[b] += in[b];
                    }
                }
        for (idx b = 0; b < nb; ++b) {
            T *dst = out + (b * nc + c) * h * w;
            for (idx r = 0; r < h; ++r)
                for (idx q = 0; q < w; ++q)
                    dst[r * w + q] = acc[((r + pad_h) * wp + q + pad_w) * nb + b];
        }
    }
    free(acc);
    return 0;
}

/* dst (B, C, P) = src (C, P, B), plus bias[c] when bias is not NULL, channels [start, stop);
 * in tiles of TILE positions, whose B-long source rows and TILE-long destination runs stay in
 * cache. */
EXPORT int NAME(batch_to_first)(T *dst, const T *src, const T *bias, idx nc, idx npix, idx nb,
                                idx start, idx stop)
{
    for (idx c = start; c < stop; ++c) {
        for (idx p0 = 0; p0 < npix; p0 += TILE) {
            idx p1 = p0 + TILE < npix ? p0 + TILE : npix;
            for (idx b = 0; b < nb; ++b) {
                T *d = dst + (b * nc + c) * npix;
                const T *s = src + c * npix * nb + b;
                if (bias != NULL) {
                    T add = bias[c];
                    for (idx p = p0; p < p1; ++p)
                        d[p] = s[p * nb] + add;
                } else {
                    for (idx p = p0; p < p1; ++p)
                        d[p] = s[p * nb];
                }
            }
        }
    }
    return 0;
}

/* dst (C, P, B) = src (B, C, P), channels [start, stop), in tiles of TILE positions. */
EXPORT int NAME(batch_to_last)(T *restrict dst, const T *restrict src, idx nc, idx npix, idx nb,
                               idx start, idx stop)
{
    for (idx c = start; c < stop; ++c)
        for (idx p0 = 0; p0 < npix; p0 += TILE) {
            idx p1 = p0 + TILE < npix ? p0 + TILE : npix;
            for (idx b = 0; b < nb; ++b) {
                const T *s = src + (b * nc + c) * npix;
                T *d = dst + c * npix * nb + b;
                for (idx p = p0; p < p1; ++p)
                    d[p * nb] = s[p];
            }
        }
    return 0;
}

/* The output columns [*lo, *hi) whose window column j (an offset in the kernel) lies in the
 * image: 0 <= px * stride - pad + j < width. */
static void NAME(inside_columns)(idx j, idx pad, idx stride, idx width, idx pooled, idx *lo,
                                 idx *hi)
{
    idx first = pad - j, last = width - 1 + pad - j;
    *lo = first <= 0 ? 0 : (first + stride - 1) / stride;
    *hi = last < 0 ? 0 : last / stride + 1;
    if (*hi > pooled)
        *hi = pooled;
    if (*hi < *lo)
        *hi = *lo;
}

/* MAX pooling over planes [start, stop) of x (S, H, W): each window's first maximum in
 * row-major order (strict > from -FLT_MAX, so NaN never wins) into top (S, PH, PW), and its
 * kernel offset i * kw + j (-1 when none) into argmax. For each output row, the kernel
 * offsets are the outer loops and the output columns the inner one: a long loop without
 * branches (on random data the processor would mispredict every other comparison), where a
 * loop per window would be a few steps long. */
EXPORT int NAME(max_pool_forward)(const T *restrict x, T *restrict top,
                                  int32_t *restrict argmax, idx h, idx w, idx ph,
                                  idx pw, idx kh, idx kw, idx pad_h, idx pad_w, idx stride_h,
                                  idx stride_w, idx start, idx stop)
{
    const T floor = (T)-FLT_MAX;
    for (idx s = start; s < stop; ++s) {
        const T *plane = x + s * h * w;
        for (idx py = 0; py < ph; ++py) {
            T *restrict best = top + (s * ph + py) * pw;
            int32_t *restrict pick = argmax + (s * ph + py) * pw;
            for (idx px = 0; px < pw; ++px) {
                best[px] = floor;
                pick[px] = -1;
            }
            for (idx i = 0; i < kh; ++i) {
                idx r = py * stride_h - pad_h + i;
                if (r < 0 || r >= h)
                    continue;
                for (idx j = 0; j < kw; ++j) {
                    idx lo, hi;
                    NAME(inside_columns)(j, pad_w, stride_w, w, pw, &lo, &hi);
                    const T *restrict row = plane + r * w - pad_w + j;
                    int32_t k = (int32_t)(i * kw + j);
                    for (idx px = lo; px < hi; ++px) {
                        T v = row[px * stride_w];
                        int32_t better = -(int32_t)(v > best[px]); /* all ones or zero */
                        pick[px] += (k - pick[px]) & better;
                        best[px] = v > best[px] ? v : best[px]; /* a max instruction */
                    }
                }
            }
        }
    }
    return 0;
}

/* The gradient of max_pool_forward over planes [start, stop): bottom_diff (S, H, W) zeroed,
 * then each window's gradient added at its picked element (none where argmax is -1). The
 * windows are visited in reverse raster order: a bottom element picked by several windows
 * then sums them in increasing kernel offset, the order of the NumPy code. */
EXPORT int NAME(max_pool_backward)(const T *top_diff, const int32_t *argmax, T *bottom_diff,
                                   idx h, idx w, idx ph, idx pw, idx kh, idx kw, idx pad_h,
                                   idx pad_w, idx stride_h, idx stride_w, idx start, idx stop)
{
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
    return 0;
}

/* The SGD solver's step for elements [start, stop) of one parameter, as its NumPy steps do it,
 * rounding after every operation as they do: g = diff * norm (norm = 1 / iter_size; skipped
 * when 1); g += decay * data (L2) or decay * sign(data) (L1) when decay is not 0; history =
 * history * momentum + g * rate; diff = history. */
EXPORT int NAME(sgd_update)(T *restrict diff, T *restrict history, const T *restrict data,
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
    return 0;
}

/* LRN across channels, images [start, stop) of x (N, C, P): scale = k + a * (the sum of x^2
 * over the size channels centred on each channel; a = alpha / size), the sum taken in
 * window order from the first channel, as the NumPy code does. */
EXPORT int NAME(lrn_scale)(const T *restrict x, T *restrict scale, idx nc, idx npix, idx size,
                           T a, T k, idx start, idx stop)
{
    idx pre = (size - 1) / 2;
    for (idx n = start; n < stop; ++n)
        for (idx c = 0; c < nc; ++c) {
            T *restrict out = scale + (n * nc + c) * npix;
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
        }
    return 0;
}

/* LRN's backward window term, images [start, stop): accum = the sum over the size channels
 * centred on each channel of top_diff * top / scale (computed once per element into work,
 * an (N, C, P) buffer). */
EXPORT int NAME(lrn_accum)(const T *restrict top_diff, const T *restrict top,
                           const T *restrict scale, T *restrict work, T *restrict accum,
                           idx nc, idx npix, idx size, idx start, idx stop)
{
    idx pre = (size - 1) / 2;
    for (idx n = start; n < stop; ++n) {
        idx base = n * nc * npix;
        for (idx e = base; e < base + nc * npix; ++e)
            work[e] = top_diff[e] * top[e] / scale[e];
        for (idx c = 0; c < nc; ++c) {
            T *restrict out = accum + base + c * npix;
            for (idx p = 0; p < npix; ++p)
                out[p] = (T)0;
            for (idx i = 0; i < size; ++i) {
                idx cc = c - pre + i;
                if (cc < 0 || cc >= nc)
                    continue;
                const T *restrict row = work + base + cc * npix;
                for (idx p = 0; p < npix; ++p)
                    out[p] += row[p];
            }
        }
    }
    return 0;
}

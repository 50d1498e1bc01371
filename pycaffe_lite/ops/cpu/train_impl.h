/* The training kernels of kernels.c for one element type (included once per type, as
 * kernels_impl.h): BatchNorm -> Scale -> ReLU on one blob, forward and backward, each over a
 * range [start, stop) of channels; and the SGD solver's update of every parameter in one call,
 * over a range of elements of all the parameters laid end to end.
 *
 * The per-channel sums are taken in double, in PCL_TRAIN_LANES interleaved partial sums (one
 * per element position modulo the count, so that the loops vectorise without reassociation,
 * added up in lane order at the end): as accurate as NumPy's pairwise sums, not equal to them
 * bit for bit. Everything per element is the NumPy layers' own operations, rounded after each.
 */

#ifndef PCL_TRAIN_LANES
#define PCL_TRAIN_LANES 8
/* The comparisons of the ReLU: quiet (no exception on a NaN, the same result as > and <=),
 * so that the compiler turns them into vector masks instead of branches. */
#if defined(__GNUC__)
#define PCL_GREATER(a, b) __builtin_isgreater(a, b)
#define PCL_LESS_EQUAL(a, b) __builtin_islessequal(a, b)
#else
#define PCL_GREATER(a, b) ((a) > (b))
#define PCL_LESS_EQUAL(a, b) ((a) <= (b))
#endif

/* The gradient past the ReLU: dy * (y > 0) (a NaN or negative dy times 0 gives NaN or -0, as
 * relu_backward), or dy without one. */
#define PCL_DZ(relu, dy, y) ((relu) ? (dy) * (T)PCL_GREATER((y), (T)0) : (dy))
#endif

/* Into the lanes: sum += row[0:n] (squares 0), or sq += (row[0:n] - mu)^2 (squares 1). */
ALWAYS_INLINE void NAME(row_sums)(const T *restrict row, idx n, T mu, int squares,
                                  double *restrict sum, double *restrict sq)
{
    idx p = 0;
    for (; p + PCL_TRAIN_LANES <= n; p += PCL_TRAIN_LANES)
        for (int k = 0; k < PCL_TRAIN_LANES; ++k) {
            T v = row[p + k];
            if (squares) {
                T d = v - mu;
                sq[k] += (double)(d * d);
            } else {
                sum[k] += (double)v;
            }
        }
    for (int k = 0; p < n; ++p, ++k) {
        T v = row[p];
        if (squares) {
            T d = v - mu;
            sq[k] += (double)(d * d);
        } else {
            sum[k] += (double)v;
        }
    }
}

/* sums of dz and dz * xnorm over row[0:n] (relu a constant at each call: the loops are built
 * without the test). */
ALWAYS_INLINE void NAME(grad_sums)(const T *restrict dy, const T *restrict xn,
                                   const T *restrict y, idx n, const int relu,
                                   double *restrict sdz, double *restrict sdzx)
{
    idx p = 0;
    for (; p + PCL_TRAIN_LANES <= n; p += PCL_TRAIN_LANES)
        for (int k = 0; k < PCL_TRAIN_LANES; ++k) {
            T dz = PCL_DZ(relu, dy[p + k], y[p + k]);
            sdz[k] += (double)dz;
            sdzx[k] += (double)(dz * xn[p + k]);
        }
    for (int k = 0; p < n; ++p, ++k) {
        T dz = PCL_DZ(relu, dy[p], y[p]);
        sdz[k] += (double)dz;
        sdzx[k] += (double)(dz * xn[p]);
    }
}

/* out[0:n] = the bottom's gradient (out may be dy: each element is read before it is written,
 * at the same position); keep: dy[0:n] = dz * g too (the Scale's bottom gradient). */
ALWAYS_INLINE void NAME(grad_apply)(T *dy, const T *restrict xn, const T *restrict y,
                                    T *out, idx n, const int relu, const int global,
                                    const int keep, T g, T mean_dz, T mean_dzx, T s)
{
    for (idx p = 0; p < n; ++p) {
        T d = PCL_DZ(relu, dy[p], y[p]) * g;
        if (keep)
            dy[p] = d;
        if (!global)
            d = (d - mean_dz) - mean_dzx * xn[p];
        out[p] = d / s;
    }
}

ALWAYS_INLINE double NAME(lane_total)(const double *lanes)
{
    double total = 0.0;
    for (int k = 0; k < PCL_TRAIN_LANES; ++k)
        total += lanes[k];
    return total;
}

/* Forward of a channel range of x (B, C, S) into y (may be x: in place), with m = B * S values
 * per channel:
 *   batch statistics (global 0): mean[c] and var[c] (biased) of the channel are written;
 *   global statistics (global 1): mean[c] and var[c] are read;
 *   stdv[c] = sqrt(var + eps); xnorm = (x - mean) / stdv (kept for the backward);
 *   y = xnorm * gamma[c] (gamma not NULL) + beta[c] (beta not NULL), then 0 where y <= 0
 *   (relu, as bias_relu).
 */
VECTOR_CLONES
EXPORT void NAME(bn_train_forward)(const T *x, T *y, T *restrict xnorm, T *restrict mean,
                                   T *restrict var, T *restrict stdv, const T *restrict gamma,
                                   const T *restrict beta, idx nb, idx nc, idx sp, T eps,
                                   int32_t global, int32_t relu, idx start, idx stop)
{
    idx m = nb * sp;
    for (idx c = start; c < stop; ++c) {
        T mu, v;
        if (global) {
            mu = mean[c];
            v = var[c];
        } else {
            double sum[PCL_TRAIN_LANES] = {0}, sq[PCL_TRAIN_LANES] = {0};
            for (idx b = 0; b < nb; ++b)
                NAME(row_sums)(x + (b * nc + c) * sp, sp, (T)0, 0, sum, sq);
            mu = (T)(NAME(lane_total)(sum) / (double)m);
            for (idx b = 0; b < nb; ++b)
                NAME(row_sums)(x + (b * nc + c) * sp, sp, mu, 1, sum, sq);
            v = (T)(NAME(lane_total)(sq) / (double)m);
            mean[c] = mu;
            var[c] = v;
        }
        T s = SQRT(v + eps);
        stdv[c] = s;
        T g = gamma ? gamma[c] : (T)1;
        T h = beta ? beta[c] : (T)0;
        for (idx b = 0; b < nb; ++b) {
            idx off = (b * nc + c) * sp;
            const T *row = x + off;
            T *out = y + off;
            T *restrict xn = xnorm + off;
            for (idx p = 0; p < sp; ++p) {
                T n = (row[p] - mu) / s;
                xn[p] = n;
                T z = n;
                if (gamma)
                    z = z * g;
                if (beta)
                    z = z + h;
                if (relu && PCL_LESS_EQUAL(z, (T)0))
                    z = (T)0;
                out[p] = z;
            }
        }
    }
}

/* Backward of the chain for a channel range: dy (B, C, S) the top's diff, dx the bottom's
 * (may be dy: in place), xnorm and stdv from the forward, y the top's data (dz = dy * (y > 0)
 * when relu, as relu_backward). With dz the gradient past the ReLU:
 *   dgamma[c] += sum(dz * xnorm) (dgamma not NULL); dbeta[c] += sum(dz) (dbeta not NULL);
 *   batch statistics: dx = (dz g - mean(dz g) - mean(dz g xnorm) xnorm) / stdv, g = gamma[c]
 *   (1 when gamma is NULL); global statistics: dx = dz g / stdv;
 *   keep (dx not dy): dy = dz g, the diff the Scale's (or ReLU's) backward leaves in place.
 */
VECTOR_CLONES
EXPORT void NAME(bn_train_backward)(T *dy, const T *restrict xnorm, const T *y,
                                    const T *restrict stdv, const T *restrict gamma,
                                    T *restrict dgamma, T *restrict dbeta, T *dx, idx nb,
                                    idx nc, idx sp, int32_t global, int32_t relu, int32_t keep,
                                    idx start, idx stop)
{
    idx m = nb * sp;
    for (idx c = start; c < stop; ++c) {
        double sdz_lanes[PCL_TRAIN_LANES] = {0}, sdzx_lanes[PCL_TRAIN_LANES] = {0};
        for (idx b = 0; b < nb; ++b) {
            idx off = (b * nc + c) * sp;
            if (relu)
                NAME(grad_sums)(dy + off, xnorm + off, y + off, sp, 1, sdz_lanes, sdzx_lanes);
            else
                NAME(grad_sums)(dy + off, xnorm + off, y + off, sp, 0, sdz_lanes, sdzx_lanes);
        }
        double sdz = NAME(lane_total)(sdz_lanes), sdzx = NAME(lane_total)(sdzx_lanes);
        if (dgamma)
            dgamma[c] = dgamma[c] + (T)sdzx;
        if (dbeta)
            dbeta[c] = dbeta[c] + (T)sdz;
        T g = gamma ? gamma[c] : (T)1;
        T s = stdv[c];
        T mean_dz = global ? (T)0 : (T)((double)g * sdz / (double)m);
        T mean_dzx = global ? (T)0 : (T)((double)g * sdzx / (double)m);
        for (idx b = 0; b < nb; ++b) {
            idx off = (b * nc + c) * sp;
            T *g_row = dy + off;
            const T *x_row = xnorm + off, *y_row = y + off;
            T *out = dx + off;
            if (keep && relu)
                NAME(grad_apply)(g_row, x_row, y_row, out, sp, 1, global, 1, g, mean_dz,
                                 mean_dzx, s);
            else if (keep)
                NAME(grad_apply)(g_row, x_row, y_row, out, sp, 0, global, 1, g, mean_dz,
                                 mean_dzx, s);
            else if (relu && global)
                NAME(grad_apply)(g_row, x_row, y_row, out, sp, 1, 1, 0, g, mean_dz, mean_dzx,
                                 s);
            else if (relu)
                NAME(grad_apply)(g_row, x_row, y_row, out, sp, 1, 0, 0, g, mean_dz, mean_dzx,
                                 s);
            else if (global)
                NAME(grad_apply)(g_row, x_row, y_row, out, sp, 0, 1, 0, g, mean_dz, mean_dzx,
                                 s);
            else
                NAME(grad_apply)(g_row, x_row, y_row, out, sp, 0, 0, 0, g, mean_dz, mean_dzx,
                                 s);
        }
    }
}

/* One element's gradient as the solvers' normalize and regularize steps leave it: g = diff *
 * norm (skipped when norm is 1); g += decay * data (L2) or decay * sign(data) (L1) when decay is
 * not 0. */
ALWAYS_INLINE T NAME(regularized)(T g, T v, T norm, T decay, int32_t l1)
{
    if (norm != (T)1)
        g = g * norm;
    if (decay != (T)0) {
        T reg = l1 ? (T)((v > (T)0) - (v < (T)0)) * decay : v * decay;
        g = g + reg;
    }
    return g;
}

/* A solver's step for elements [lo, hi) of one parameter, each operation rounded as the
 * solver's NumPy steps round it, then data -= the update (Net.update); diff holds the update:
 *   SGD (rule 0):      h = h * momentum + g * rate; diff = h
 *   Nesterov (rule 1): h' = h * momentum + g * rate; diff = h' * (1 + momentum) - h * momentum
 *   Adam (rule 2):     m = m * beta1 + g * (1 - beta1); v = v * beta2 + (g * g) * (1 - beta2);
 *                      diff = m / (sqrt(v) + eps) * rate  (rate with Adam's correction)
 * coef: SGD {momentum}, Nesterov {momentum, 1 + momentum}, Adam {beta1, 1 - beta1, beta2,
 * 1 - beta2, eps}. */
ALWAYS_INLINE void NAME(param_step)(T *restrict diff, T *restrict s0, T *restrict s1,
                                    T *restrict data, idx lo, idx hi, const int rule,
                                    const T *coef, T rate, T decay, T norm, int32_t l1)
{
    for (idx i = lo; i < hi; ++i) {
        T g = NAME(regularized)(diff[i], data[i], norm, decay, l1), u;
        if (rule == 0) {
            T h = s0[i] * coef[0];
            g = g * rate;
            h = h + g;
            s0[i] = h;
            u = h;
        } else if (rule == 1) {
            T previous = s0[i];
            T h = previous * coef[0];
            g = g * rate;
            h = h + g;
            s0[i] = h;
            u = h * coef[1];
            u = u - previous * coef[0];
        } else {
            T m = s0[i] * coef[0];
            m = m + g * coef[1];
            T v = s1[i] * coef[2];
            v = v + (g * g) * coef[3];
            s0[i] = m;
            s1[i] = v;
            T d = SQRT(v) + coef[4];
            u = (m / d) * rate;
        }
        diff[i] = u;
        data[i] = data[i] - u;
    }
}

/* A solver's step (see param_step) for elements [start, stop) of all the parameters laid end
 * to end: parameter k holds elements [ends[k - 1], ends[k]) (ends[-1] = 0), its arrays are
 * diffs[k], datas[k] and states0[k] (the history, or Adam's m), states1[k] (Adam's v; else
 * unread), its rate rates[k] and its weight decay decays[k]. */
VECTOR_CLONES
EXPORT void NAME(solver_update_all)(T **diffs, T **states0, T **states1, T **datas,
                                    const idx *ends, const T *rates, const T *decays,
                                    const T *coef, idx nparams, T norm, int32_t l1,
                                    int32_t rule, idx start, idx stop)
{
    idx k = 0;
    while (k < nparams && ends[k] <= start)
        ++k;
    for (; k < nparams && start < stop; ++k) {
        idx first = k ? ends[k - 1] : 0;
        idx lo = start - first, hi = (ends[k] < stop ? ends[k] : stop) - first;
        T *s1 = rule == 2 ? states1[k] : states0[k];
        if (rule == 0)
            NAME(param_step)(diffs[k], states0[k], s1, datas[k], lo, hi, 0, coef, rates[k],
                             decays[k], norm, l1);
        else if (rule == 1)
            NAME(param_step)(diffs[k], states0[k], s1, datas[k], lo, hi, 1, coef, rates[k],
                             decays[k], norm, l1);
        else
            NAME(param_step)(diffs[k], states0[k], s1, datas[k], lo, hi, 2, coef, rates[k],
                             decays[k], norm, l1);
        start = first + hi;
    }
}

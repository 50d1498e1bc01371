"""Lstm: CTPN's single-layer LSTM over a (T, N, ...) sequence (not BVLC's LSTM)."""

from ...backend import get_array_module
from ...fillers import fill
from ...layer import Layer
from ...registry import register_layer


def _sigmoid(xp, x):
    return 0.5 * xp.tanh(0.5 * x) + 0.5


@register_layer("Lstm")
class LstmLayer(Layer):
    """The LSTM of CTPN's Caffe (tianzhi0549/CTPN, ``lstm_layer.cpp``).

    For ``t = 0 .. T-1`` and each sequence ``n``: ``z = W_x x_t + b (+ W_h h_{t-1} when the
    sequence continues)``, split into four blocks of ``H``: ``i = sigmoid(z_0)``, ``f =
    sigmoid(z_1)`` (0 when it does not continue), ``o = sigmoid(z_2)``, ``g = tanh(z_3)``;
    ``c_t = f * c_{t-1} + i * g``, ``h_t = o * tanh(c_t)``. Without the second bottom a
    sequence continues at every ``t > 0`` and starts from zero; with it (``clip``, ``(T, N)``)
    a sequence continues where ``clip[t, n]`` is nonzero, and step 0 continues from the last
    state of the previous forward pass.

    Backward: the exact gradients (through time) of the above; with ``clipping_threshold >
    0`` the gate gradients are clipped to ``[-threshold, threshold]`` first, as in the fork.
    Bottoms: x ``(T, N, ...)`` (``I = x.count(2)`` inputs), optional clip ``(T, N)``.
    Tops: h ``(T, N, H)``.
    Params: ``lstm_param { num_output (H, required) clipping_threshold (0) weight_filler
    bias_filler batch_size (not used) }``.
    Blobs: ``W_x (4H, I)``, ``W_h (4H, H)``, ``b (4H,)``.
    """

    min_num_bottom_blobs = 1
    max_num_bottom_blobs = 2
    exact_num_top_blobs = 1

    def setup(self, bottom, top):
        p = self.layer_param.lstm_param
        self.hidden = int(p.num_output)
        if self.hidden <= 0:
            raise self.error("lstm_param num_output (the hidden units) must be > 0")
        if bottom[0].num_axes < 2:
            raise self.error("input must be (T, N, ...), got shape %s" % (bottom[0].shape,))
        self.inputs = bottom[0].count // (bottom[0].shape[0] * bottom[0].shape[1])
        self.clip = float(p.clipping_threshold)
        self.last = None
        self.cache = None
        h = self.hidden
        if len(self.blobs) > 0:
            shapes = [b.shape for b in self.blobs]
            if shapes != [(4 * h, self.inputs), (4 * h, h), (4 * h,)]:
                raise self.error("expected blobs of shapes %s, got %s"
                                 % ([(4 * h, self.inputs), (4 * h, h), (4 * h,)], shapes))
            return
        fill(self.blobs.add_blob(4 * h, self.inputs), p.weight_filler)
        fill(self.blobs.add_blob(4 * h, h), p.weight_filler)
        fill(self.blobs.add_blob(4 * h), p.bias_filler)

    def reshape(self, bottom, top):
        x = bottom[0]
        t, n = x.shape[:2]
        if x.count != t * n * self.inputs:
            raise self.error("input shape %s does not give %d inputs per step (the weights'"
                             % (x.shape, self.inputs) + ")")
        if len(bottom) > 1 and bottom[1].count != t * n:
            raise self.error("clip (bottom 1) must hold T x N = %d values, got shape %s"
                             % (t * n, bottom[1].shape))
        top[0].reshape(t, n, self.hidden)

    def forward(self, bottom, top):
        x = bottom[0].read_data()
        xp = get_array_module(x)
        t_len, n = x.shape[:2]
        hdim = self.hidden
        w_x, w_h, b = (blob.read_data() for blob in self.blobs)
        pre = x.reshape(t_len, n, -1) @ w_x.T + b
        if len(bottom) > 1:
            cont = bottom[1].read_data().reshape(t_len, n) != 0
            h0, c0 = self.last if self.last is not None and self.last[0].shape == (n, hdim) \
                else (xp.zeros((n, hdim), x.dtype), xp.zeros((n, hdim), x.dtype))
        else:
            cont = xp.arange(t_len)[:, None].repeat(n, axis=1) > 0
            h0 = c0 = xp.zeros((n, hdim), x.dtype)
        hs = xp.empty((t_len, n, hdim), x.dtype)
        cs = xp.empty((t_len, n, hdim), x.dtype)
        gates = xp.empty((t_len, n, 4, hdim), x.dtype)
        h_prev, c_prev = h0, c0
        for t in range(t_len):
            k = cont[t][:, None]
            z = pre[t] + xp.where(k, h_prev @ w_h.T, 0)
            z = z.reshape(n, 4, hdim)
            g = gates[t]
            g[:, 0] = _sigmoid(xp, z[:, 0])
            g[:, 1] = xp.where(k, _sigmoid(xp, z[:, 1]), 0)
            g[:, 2] = _sigmoid(xp, z[:, 2])
            g[:, 3] = xp.tanh(z[:, 3])
            cs[t] = g[:, 1] * c_prev + g[:, 0] * g[:, 3]
            hs[t] = g[:, 2] * xp.tanh(cs[t])
            h_prev, c_prev = hs[t], cs[t]
        self.cache = (x.reshape(t_len, n, -1), cont, h0, c0, hs, cs, gates)
        self.last = (hs[-1].copy(), cs[-1].copy())
        top[0].write_data()[...] = hs

    def backward(self, top, propagate_down, bottom):
        if self.cache is None:
            raise self.error("backward needs a forward pass first")
        x, cont, h0, c0, hs, cs, gates = self.cache
        xp = get_array_module(x)
        t_len, n, hdim = hs.shape
        w_x, w_h = self.blobs[0].read_data(), self.blobs[1].read_data()
        dh_all = top[0].read_diff().copy()
        dpre = xp.empty((t_len, n, 4, hdim), x.dtype)
        dc_next = xp.zeros((n, hdim), x.dtype)
        dh_next = xp.zeros((n, hdim), x.dtype)
        for t in range(t_len - 1, -1, -1):
            k = cont[t][:, None]
            g = gates[t]
            c_prev = cs[t - 1] if t > 0 else c0
            dh = dh_all[t] + dh_next
            tanh_c = xp.tanh(cs[t])
            dc = dc_next + dh * g[:, 2] * (1 - tanh_c * tanh_c)
            d = dpre[t]
            d[:, 0] = dc * g[:, 3] * g[:, 0] * (1 - g[:, 0])
            d[:, 1] = xp.where(k, dc * c_prev * g[:, 1] * (1 - g[:, 1]), 0)
            d[:, 2] = dh * tanh_c * g[:, 2] * (1 - g[:, 2])
            d[:, 3] = dc * g[:, 0] * (1 - g[:, 3] * g[:, 3])
            if self.clip > 0:
                xp.clip(d, -self.clip, self.clip, out=d)
            dc_next = xp.where(k, dc * g[:, 1], 0)
            dh_next = xp.where(k, d.reshape(n, 4 * hdim) @ w_h, 0)
        flat = dpre.reshape(t_len, n, 4 * hdim)
        h_prev = xp.concatenate([h0[None], hs[:-1]], axis=0)
        h_prev = xp.where(cont[:, :, None], h_prev, 0)
        if self.param_propagate_down[0]:
            self.blobs[0].write_diff()[...] += xp.einsum("tng,tni->gi", flat, x)
        if self.param_propagate_down[1]:
            self.blobs[1].write_diff()[...] += xp.einsum("tng,tnh->gh", flat, h_prev)
        if self.param_propagate_down[2]:
            self.blobs[2].write_diff()[...] += flat.sum(axis=(0, 1))
        if propagate_down[0]:
            bottom[0].write_diff()[...] = (flat @ w_x).reshape(bottom[0].shape)

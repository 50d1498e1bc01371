"""LSTMUnit: one time step of Caffe's LSTM cell (the gate nonlinearities and the state update).

The cell math is also used by the LSTM layer for each of its time steps, through
:func:`lstm_cell_forward` and :func:`lstm_cell_backward`.
"""

from ...backend import get_array_module
from ...layer import Layer
from ...registry import register_layer


def sigmoid(xp, a):
    """Logistic function, as ``0.5 * tanh(0.5 a) + 0.5`` (no overflow for large |a|)."""
    return xp.tanh(a * 0.5) * 0.5 + 0.5


def lstm_cell_forward(xp, gates, cont, c_prev):
    """One LSTM step in Caffe's gate order (i, f, o, g).

    ``gates``: (N, 4H) pre-activations; ``cont``: (N, 1) continuation indicators;
    ``c_prev``: (N, H). Returns ``(c, h, acts)`` where ``acts = (i, f, o, g, tanh_c)`` is what
    :func:`lstm_cell_backward` needs; ``f`` is already multiplied by ``cont``.
    """
    hdim = c_prev.shape[-1]
    i = sigmoid(xp, gates[:, :hdim])
    f = sigmoid(xp, gates[:, hdim:2 * hdim])
    f *= cont
    o = sigmoid(xp, gates[:, 2 * hdim:3 * hdim])
    g = xp.tanh(gates[:, 3 * hdim:])
    c = f * c_prev
    c += i * g
    tanh_c = xp.tanh(c)
    h = o * tanh_c
    return c, h, (i, f, o, g, tanh_c)


def lstm_cell_backward(xp, acts, c_prev, dc, dh):
    """Gradients of one LSTM step: returns ``(dc_prev, dgates)`` with dgates of shape (N, 4H).

    As Caffe's LSTMUnit, the forget gate's derivative is taken as ``f (1 - f)`` of the
    cont-scaled gate ``f = cont * sigmoid(f')``: exact for the binary indicators Caffe expects.
    """
    i, f, o, g, tanh_c = acts
    dc_total = dh * o * (1 - tanh_c * tanh_c)
    dc_total += dc
    dc_prev = dc_total * f
    dgates = xp.concatenate([
        dc_total * g * i * (1 - i),
        dc_total * c_prev * f * (1 - f),
        dh * tanh_c * o * (1 - o),
        dc_total * i * (1 - g * g),
    ], axis=1)
    return dc_prev, dgates


@register_layer("LSTMUnit")
class LSTMUnitLayer(Layer):
    """One LSTM time step for N independent streams (Caffe's LSTMUnit).

    Bottoms: c_prev (1, N, H), the previous cell state; x (1, N, 4H), the gate
    pre-activations (i', f', o', g'), in that order; cont (1, N), the sequence continuation
    indicators (0 starts a new sequence).
    Tops: c (1, N, H) and h (1, N, H)::

        i = sigmoid(i')  f = cont * sigmoid(f')  o = sigmoid(o')  g = tanh(g')
        c = f * c_prev + i * g
        h = o * tanh(c)

    Params: none. Backward fills the diffs of c_prev and x; there is no gradient for cont
    (asking for it is an error, and force_backward does not reach it).
    """

    exact_num_bottom_blobs = 3
    exact_num_top_blobs = 2

    def allow_force_backward(self, bottom_index):
        return bottom_index != 2

    def reshape(self, bottom, top):
        c_prev, x, cont = bottom
        names = ("c_prev", "x", "cont")
        n = c_prev.shape[1] if c_prev.num_axes >= 2 else None
        for k, (blob, name) in enumerate(zip(bottom, names)):
            want_axes = 2 if k == 2 else 3
            if blob.num_axes != want_axes:
                raise self.error("bottom[%d] (%s) must have %d axes, got shape %s"
                                 % (k, name, want_axes, blob.shape))
            if blob.shape[0] != 1:
                raise self.error("bottom[%d] (%s) must hold a single time step (first axis 1), "
                                 "got shape %s" % (k, name, blob.shape))
            if blob.shape[1] != n:
                raise self.error("bottom[%d] (%s) has %d streams (axis 1 of shape %s); "
                                 "c_prev has %d" % (k, name, blob.shape[1], blob.shape, n))
        self.hidden_dim = c_prev.shape[2]
        if x.shape[2] != 4 * self.hidden_dim:
            raise self.error("bottom[1] (x) must have 4 * H = %d gate inputs on axis 2 (H = %d "
                             "from c_prev of shape %s), got shape %s"
                             % (4 * self.hidden_dim, self.hidden_dim, c_prev.shape, x.shape))
        top[0].reshape(c_prev.shape)
        top[1].reshape(c_prev.shape)

    def _inputs(self, bottom):
        n, hdim = bottom[0].shape[1], self.hidden_dim
        c_prev = bottom[0].read_data().reshape(n, hdim)
        gates = bottom[1].read_data().reshape(n, 4 * hdim)
        cont = bottom[2].read_data().reshape(n, 1)
        return c_prev, gates, cont

    def forward(self, bottom, top):
        c_prev, gates, cont = self._inputs(bottom)
        xp = get_array_module(gates)
        c, h, _ = lstm_cell_forward(xp, gates, cont, c_prev)
        top[0].write_data()[...] = c.reshape(top[0].shape)
        top[1].write_data()[...] = h.reshape(top[1].shape)

    def backward(self, top, propagate_down, bottom):
        if propagate_down[2]:
            raise self.error("cannot backpropagate to the sequence continuation indicators "
                             "(bottom[2], cont); set propagate_down: false for it")
        if not (propagate_down[0] or propagate_down[1]):
            return
        c_prev, gates, cont = self._inputs(bottom)
        xp = get_array_module(gates)
        # The activations are recomputed from the bottoms rather than kept from forward, as
        # Caffe does; only the top diffs are new here.
        _, _, acts = lstm_cell_forward(xp, gates, cont, c_prev)
        n, hdim = c_prev.shape
        dc = top[0].read_diff().reshape(n, hdim)
        dh = top[1].read_diff().reshape(n, hdim)
        dc_prev, dgates = lstm_cell_backward(xp, acts, c_prev, dc, dh)
        if propagate_down[0]:
            bottom[0].write_diff()[...] = dc_prev.reshape(bottom[0].shape)
        if propagate_down[1]:
            bottom[1].write_diff()[...] = dgates.reshape(bottom[1].shape)

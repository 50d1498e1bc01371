"""RNN: Caffe's simple recurrent layer (tanh hidden state, tanh output).

Computed directly, step by step, rather than through an unrolled inner Net; see the
``recurrent_layer`` module for that choice and what is kept identical to Caffe.
"""

from ...registry import register_layer
from .recurrent_layer import RecurrentLayer


@register_layer("RNN")
class RNNLayer(RecurrentLayer):
    """A fully recurrent layer over T time steps of N streams (Caffe's RNN layer)::

        h_t = tanh(W_hh (cont_t * h_{t-1}) + W_xh x_t + b_h [+ W_xh_static x_static])
        o_t = tanh(W_ho h_t + b_o)

    Bottoms: x (T, N, ...) (at least 3 axes; the features are the axes from 2 on, D values);
    cont (T, N), 0 where a sequence starts; optionally x_static (N, ...) (S features from
    axis 1 on); with ``expose_hidden``, then h_0 (1, N, H).
    Tops: o (T, N, H), the output of every step; with ``expose_hidden``, then h_T (1, N, H).
    Params: ``recurrent_param { num_output: H (required), weight_filler, bias_filler,
    debug_info, expose_hidden }``.
    Blobs, in Caffe's order: W_xh (H, D), b_h (H,), W_xh_static (H, S) when x_static is given,
    W_hh (H, H), W_ho (H, H), b_o (H,).

    Without ``expose_hidden`` the state h carries over from one Forward to the next (zero at
    first; cont = 0 at a step discards it); :meth:`reset` zeroes it. There is no gradient for
    cont, nor (with ``expose_hidden``) for h_0, and the h_T top's diff is not used, as in
    Caffe.
    """

    state_names = ("h",)
    gates_per_output = 1
    input_param_names = ("W_xh", "b_h", "W_xh_static", "W_hh")

    def extra_param_specs(self):
        rp = self.layer_param.recurrent_param
        hdim = self.num_output
        return [("W_ho", (hdim, hdim), rp.weight_filler), ("b_o", (hdim,), rp.bias_filler)]

    def _step_forward(self, xp, t, pre, cont_t, states):
        return [xp.tanh(pre)]

    def _step_backward(self, xp, t, cont_t, dstates):
        h = self._cache["hs"][t]
        return dstates[0] * (1 - h * h), []

    def _output_forward(self, xp, hs):
        t_steps, n, hdim = hs.shape
        w_ho = self._param("W_ho").read_data()
        pre = xp.matmul(hs.reshape(t_steps * n, hdim), w_ho.T)
        pre += self._param("b_o").read_data()
        out = xp.tanh(pre).reshape(t_steps, n, hdim)
        self._out = out
        return out

    def _output_backward(self, xp, dy, hs):
        t_steps, n, hdim = hs.shape
        o = self._out.reshape(t_steps * n, hdim)
        dpre = dy.reshape(t_steps * n, hdim) * (1 - o * o)
        ppd = self.param_propagate_down
        if ppd[self._param_index["W_ho"]]:
            self._param("W_ho").write_diff()[...] += xp.matmul(dpre.T,
                                                               hs.reshape(t_steps * n, hdim))
        if ppd[self._param_index["b_o"]]:
            self._param("b_o").write_diff()[...] += dpre.sum(axis=0)
        w_ho = self._param("W_ho").read_data()
        return xp.matmul(dpre, w_ho).reshape(t_steps, n, hdim)

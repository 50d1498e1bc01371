"""LSTM: Caffe's long short-term memory layer (a RecurrentLayer whose cell is LSTMUnit).

Computed directly, step by step, rather than through an unrolled inner Net; see the
``recurrent_layer`` module for that choice and what is kept identical to Caffe.
"""

from ...registry import register_layer
from .lstm_unit_layer import lstm_cell_backward, lstm_cell_forward
from .recurrent_layer import RecurrentLayer


@register_layer("LSTM")
class LSTMLayer(RecurrentLayer):
    """Long short-term memory over T time steps of N streams (Caffe's LSTM layer)::

        gates_t = W_xc x_t + b_c [+ W_xc_static x_static] + W_hc (cont_t * h_{t-1})
        (i', f', o', g') = gates_t                      (4 blocks of H, in that order)
        i = sigmoid(i')  f = cont_t * sigmoid(f')  o = sigmoid(o')  g = tanh(g')
        c_t = f * c_{t-1} + i * g
        h_t = o * tanh(c_t)

    Bottoms: x (T, N, ...) (at least 3 axes; the features are the axes from 2 on, D values);
    cont (T, N), 0 where a sequence starts; optionally x_static (N, ...) (S features from
    axis 1 on); with ``expose_hidden``, then h_0 and c_0, each (1, N, H).
    Tops: h (T, N, H), the hidden state of every step; with ``expose_hidden``, then h_T and
    c_T, each (1, N, H).
    Params: ``recurrent_param { num_output: H (required), weight_filler, bias_filler,
    debug_info, expose_hidden }``.
    Blobs, in Caffe's order: W_xc (4H, D), b_c (4H,), W_xc_static (4H, S) when x_static is
    given, W_hc (4H, H).

    Without ``expose_hidden`` the state (h, c) carries over from one Forward to the next
    (zero at first; cont = 0 at a step discards it); :meth:`reset` zeroes it. There is no
    gradient for cont, nor (with ``expose_hidden``) for h_0 / c_0, and the diffs of the h_T /
    c_T tops are not used, as in Caffe.
    """

    state_names = ("h", "c")
    gates_per_output = 4
    input_param_names = ("W_xc", "b_c", "W_xc_static", "W_hc")

    def _begin(self, t_steps):
        self._steps = [None] * t_steps

    def _step_forward(self, xp, t, pre, cont_t, states):
        c_prev = states[1]
        c, h, acts = lstm_cell_forward(xp, pre, cont_t, c_prev)
        self._steps[t] = (c_prev, acts)
        return [h, c]

    def _step_backward(self, xp, t, cont_t, dstates):
        dh, dc = dstates
        c_prev, acts = self._steps[t]
        dc_prev, dgates = lstm_cell_backward(xp, acts, c_prev, dc, dh)
        return dgates, [dc_prev]

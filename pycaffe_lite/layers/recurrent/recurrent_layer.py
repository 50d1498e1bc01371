"""RecurrentLayer: what Caffe's LSTM and RNN layers share (inputs, parameters, state, BPTT).

How it is implemented
---------------------
Caffe's RecurrentLayer builds an *unrolled* Net (T copies of the cell, their weights shared
by name) and exposes that net's owner parameter blobs as its own. This implementation runs the
same unrolled computation directly instead: the input projection of all T time steps is one
vectorised matrix product, then a Python loop over the T steps does the recurrent product and
the cell (each step vectorised over the N streams), and backward is the matching
backpropagation through time with the parameter gradients of all steps summed in one product
each. No inner Net is built. What Caffe's unrolled net makes observable is kept exactly:

- the parameter blobs: the unrolled net's owner params, in Caffe's order and with Caffe's
  shapes (InnerProduct weights ``(outputs, inputs)``, biases ``(outputs,)``), filled by
  ``weight_filler`` / ``bias_filler``, so that a ``.caffemodel`` (or HDF5) from Caffe loads
  and ``param { lr_mult ... }`` specs line up;
- the numbers: ``h_conted_{t-1} = cont_t * h_{t-1}`` before the recurrent weights, the
  subclass's cell, and the same gradients as the unrolled net's backward;
- the state: without ``expose_hidden`` the final state of one Forward is the initial state
  of the next (Caffe copies ``h_T`` into ``h_0`` before each forward), zero at first;
  :meth:`RecurrentLayer.reset` zeroes it. When N changes the stored state keeps its first
  ``N * num_output`` values per state, as Caffe's blob reshape does;
- which gradients exist: x and x_static get theirs; cont gets none (zeros when asked, and
  force_backward does not reach it); with ``expose_hidden`` the initial-state bottoms get
  none either (zeros when asked) and the final-state tops' diffs are ignored, because Caffe
  shares only their *data* with the unrolled net ("we can't backpropagate across batches").

Why: it avoids building ~6T inner layers (and the pseudo-loss layers Caffe adds to force
backward), is faster per step, and keeps every gradient path explicit.
"""

import logging

import numpy as np

from ...backend import get_array_module
from ...blob import Blob
from ...fillers import fill
from ...layer import Layer

log = logging.getLogger("pycaffe_lite")


class RecurrentLayer(Layer):
    """Base of the recurrent layers (Caffe's abstract RecurrentLayer; not registered itself).

    Bottoms: x (T, N, ...) with at least 3 axes: T time steps of N independent streams (the
    streams are interleaved), the axes from 2 on being the features; cont (T, N), the
    sequence continuation indicators (0 at the first step of a sequence, 1 after); optionally
    x_static (N, ...) with at least 2 axes, an input shared by all time steps; with
    ``expose_hidden``, then the initial recurrent states (subclass order, each (1, N, H)).
    Tops: the output (T, N, H), H = ``num_output``; with ``expose_hidden``, then the final
    recurrent states (each (1, N, H)).
    Params: ``recurrent_param { num_output (required, > 0), weight_filler (constant 0),
    bias_filler (constant 0), debug_info (false: log per-step statistics when true),
    expose_hidden (false) }``.

    Subclasses set ``state_names`` (Caffe's recurrent input order, the hidden state ``h``
    first), ``gates_per_output`` (rows of the input weights per output unit),
    ``input_param_names`` (Caffe's names of the input weights, bias, static weights and
    recurrent weights) and implement the cell (``_step_forward`` / ``_step_backward``) and the
    output (``_output_forward`` / ``_output_backward``).
    """

    state_names = ("h",)
    gates_per_output = 1
    input_param_names = ("W_x", "b", "W_x_static", "W_h")

    def __init__(self, layer_param=None, dtype=np.float32):
        super().__init__(layer_param, dtype)
        rp = self.layer_param.recurrent_param
        self.expose_hidden = bool(rp.expose_hidden)
        exposed = len(self.state_names) if self.expose_hidden else 0
        self.min_num_bottom_blobs = 2 + exposed
        self.max_num_bottom_blobs = 3 + exposed
        self.exact_num_top_blobs = 1 + exposed
        # The recurrent state carried from one Forward to the next (without expose_hidden).
        self._state = [Blob((1, 0, 0), self.dtype) for _ in self.state_names]
        self._cache = None

    def allow_force_backward(self, bottom_index):
        return bottom_index != 1  # no gradient for the continuation indicators

    # ---- parameters ----------------------------------------------------------------------
    def extra_param_specs(self):
        """``(name, shape, filler)`` of the params after the shared input/recurrent ones."""
        return []

    def param_specs(self):
        """``(name, shape, filler)`` of every param blob, in Caffe's order."""
        rp = self.layer_param.recurrent_param
        hdim = self.num_output
        gdim = self.gates_per_output * hdim
        w_x, b, w_static, w_h = self.input_param_names
        specs = [(w_x, (gdim, self.input_dim), rp.weight_filler), (b, (gdim,), rp.bias_filler)]
        if self.static_input:
            specs.append((w_static, (gdim, self.static_dim), rp.weight_filler))
        specs.append((w_h, (gdim, hdim), rp.weight_filler))
        return specs + self.extra_param_specs()

    def _param(self, name):
        return self.blobs[self._param_index[name]]

    def _make_params(self):
        specs = self.param_specs()
        self.param_names = [name for name, _, _ in specs]
        self._param_index = {name: i for i, name in enumerate(self.param_names)}
        if len(self.blobs):
            # Params given with the layer (a saved net): they must fit the inputs.
            if len(self.blobs) != len(specs):
                raise self.error("expected %d parameter blobs (%s), got %d"
                                 % (len(specs), ", ".join(self.param_names), len(self.blobs)))
            for i, (blob, (name, shape, _)) in enumerate(zip(self.blobs, specs)):
                if blob.count != int(np.prod(shape)):
                    raise self.error("parameter blob %d (%s) has shape %s, expected %s"
                                     % (i, name, blob.shape, shape))
                if blob.shape != shape:
                    blob.reshape(shape)
            return
        for _, shape, filler in specs:
            fill(self.blobs.add_blob(*shape), filler)

    # ---- shapes --------------------------------------------------------------------------
    def _check_inputs(self, bottom):
        x, cont = bottom[0], bottom[1]
        if x.num_axes < 3:
            raise self.error("bottom[0] (x) must have at least 3 axes (T, N, features...), got "
                             "shape %s" % (x.shape,))
        if cont.num_axes != 2:
            raise self.error("bottom[1] (cont) must have exactly 2 axes (T, N), got shape %s"
                             % (cont.shape,))
        if cont.shape != x.shape[:2]:
            raise self.error("bottom[1] (cont) has shape %s; expected (T, N) = %s from bottom[0] "
                             "(x) of shape %s" % (cont.shape, x.shape[:2], x.shape))
        if self.static_input:
            xs = bottom[2]
            if xs.num_axes < 2:
                raise self.error("bottom[2] (x_static) must have at least 2 axes (N, "
                                 "features...), got shape %s" % (xs.shape,))
            if xs.shape[0] != x.shape[1]:
                raise self.error("bottom[2] (x_static) has %d streams (shape %s); bottom[0] (x) "
                                 "of shape %s has N = %d"
                                 % (xs.shape[0], xs.shape, x.shape, x.shape[1]))

    def setup(self, bottom, top):
        rp = self.layer_param.recurrent_param
        self.num_output = int(rp.num_output)
        if self.num_output <= 0:
            raise self.error("recurrent_param.num_output must be positive, got %d (is "
                             "num_output missing?)" % self.num_output)
        self.debug_info = bool(rp.debug_info)
        exposed = len(self.state_names) if self.expose_hidden else 0
        self.static_input = len(bottom) > 2 + exposed
        self._hidden_bottom0 = 2 + int(self.static_input)
        self._check_inputs(bottom)
        self.T, self.N = bottom[0].shape[:2]
        self.input_dim = bottom[0].count_range(2)
        self.static_dim = bottom[2].count_range(1) if self.static_input else 0
        self._make_params()

    def reshape(self, bottom, top):
        self._check_inputs(bottom)
        x = bottom[0]
        if x.shape[0] != self.T:
            raise self.error("the number of time steps changed from %d (at setup) to %d (bottom[0] "
                             "of shape %s); a recurrent layer keeps T fixed"
                             % (self.T, x.shape[0], x.shape))
        if x.count_range(2) != self.input_dim:
            raise self.error("input size incompatible: bottom[0] (x) of shape %s has %d features "
                             "per step, the parameters expect %d"
                             % (x.shape, x.count_range(2), self.input_dim))
        if self.static_input and bottom[2].count_range(1) != self.static_dim:
            raise self.error("input size incompatible: bottom[2] (x_static) of shape %s has %d "
                             "features, the parameters expect %d"
                             % (bottom[2].shape, bottom[2].count_range(1), self.static_dim))
        self.N = x.shape[1]
        state_shape = (1, self.N, self.num_output)
        if self.expose_hidden:
            for j, name in enumerate(self.state_names):
                k = self._hidden_bottom0 + j
                if bottom[k].shape != state_shape:
                    raise self.error("bottom[%d] (%s_0) has shape %s; it must match the hidden "
                                     "state input shape (1, N, num_output) = %s"
                                     % (k, name, bottom[k].shape, state_shape))
        top[0].reshape(self.T, self.N, self.num_output)
        for j in range(len(self.state_names)):
            if self.expose_hidden:
                top[1 + j].reshape(state_shape)
            self._state[j].reshape(state_shape)

    def reset(self):
        """Zero the recurrent state carried between Forward calls (Caffe's Reset)."""
        for blob in self._state:
            blob.write_data()[...] = 0

    # ---- forward / backward --------------------------------------------------------------
    def forward(self, bottom, top):
        t_steps, n, hdim = self.T, self.N, self.num_output
        x = bottom[0].read_data().reshape(t_steps * n, self.input_dim)
        xp = get_array_module(x)
        cont = bottom[1].read_data()
        w_x, b, w_static, w_h = (self._param(p).read_data() if p in self._param_index else None
                                 for p in self.input_param_names)
        gdim = w_h.shape[0]
        pre_x = xp.matmul(x, w_x.T).reshape(t_steps, n, gdim)
        pre_x += b
        if self.static_input:
            xs = bottom[2].read_data().reshape(n, self.static_dim)
            pre_x += xp.matmul(xs, w_static.T)
        if self.expose_hidden:
            sources = bottom[self._hidden_bottom0:]
        else:
            sources = self._state
        states = [s.read_data().reshape(n, hdim).copy() for s in sources]
        h_conted = xp.empty((t_steps, n, hdim), dtype=self.dtype)
        hs = xp.empty((t_steps, n, hdim), dtype=self.dtype)
        self._begin(t_steps)
        for t in range(t_steps):
            cont_t = cont[t].reshape(n, 1)
            xp.multiply(states[0], cont_t, out=h_conted[t])
            pre = pre_x[t]
            pre += xp.matmul(h_conted[t], w_h.T)
            states = self._step_forward(xp, t, pre, cont_t, states)
            hs[t] = states[0]
        self._cache = {"h_conted": h_conted, "hs": hs}
        top[0].write_data()[...] = self._output_forward(xp, hs)
        targets = top[1:] if self.expose_hidden else self._state
        for blob, state in zip(targets, states):
            blob.write_data()[...] = state.reshape(blob.shape)
        if self.debug_info:
            self._log_forward(xp, hs, top[0])

    def backward(self, top, propagate_down, bottom):
        if self._cache is None:
            raise self.error("backward called before forward")
        t_steps, n, hdim = self.T, self.N, self.num_output
        cont = bottom[1].read_data()
        w_h = self._param(self.input_param_names[3]).read_data()
        xp = get_array_module(w_h)
        gdim = w_h.shape[0]
        dh_out = self._output_backward(xp, top[0].read_diff(), self._cache["hs"])
        # Gradients flowing into step t from step t + 1, one per recurrent state; the final
        # states' own top diffs are not used (as in Caffe).
        dnext = [xp.zeros((n, hdim), dtype=self.dtype) for _ in self.state_names]
        dpre = xp.empty((t_steps, n, gdim), dtype=self.dtype)
        for t in range(t_steps - 1, -1, -1):
            cont_t = cont[t].reshape(n, 1)
            dnext[0] += dh_out[t]
            dpre[t], others = self._step_backward(xp, t, cont_t, dnext)
            dh_prev = xp.matmul(dpre[t], w_h)
            dh_prev *= cont_t
            dnext = [dh_prev] + list(others)
        self._accumulate_input_grads(xp, dpre, propagate_down, bottom)
        if propagate_down[1]:
            bottom[1].write_diff()[...] = 0
        if self.expose_hidden:
            for k in range(self._hidden_bottom0, len(bottom)):
                if propagate_down[k]:
                    bottom[k].write_diff()[...] = 0
        if self.debug_info:
            log.info("    [Backward] %s '%s': x diff asum %g, pre-activation diff asum %g",
                     self.type, self.name, bottom[0].asum_diff() if propagate_down[0] else 0.0,
                     float(abs(dpre).sum()))

    def _accumulate_input_grads(self, xp, dpre, propagate_down, bottom):
        """Param diffs of the input, static and recurrent weights (summed over all steps) and
        the diffs of x and x_static, from the pre-activation gradients ``dpre`` (T, N, G)."""
        t_steps, n = self.T, self.N
        gdim = dpre.shape[2]
        flat = dpre.reshape(t_steps * n, gdim)
        name_x, name_b, name_static, name_h = self.input_param_names
        ppd = self.param_propagate_down
        x = bottom[0].read_data().reshape(t_steps * n, self.input_dim)
        idx = self._param_index
        if ppd[idx[name_x]]:
            self._param(name_x).write_diff()[...] += xp.matmul(flat.T, x)
        if ppd[idx[name_b]]:
            self._param(name_b).write_diff()[...] += flat.sum(axis=0)
        if ppd[idx[name_h]]:
            h_conted = self._cache["h_conted"].reshape(t_steps * n, self.num_output)
            self._param(name_h).write_diff()[...] += xp.matmul(flat.T, h_conted)
        if self.static_input:
            dsum = dpre.sum(axis=0)
            if ppd[idx[name_static]]:
                xs = bottom[2].read_data().reshape(n, self.static_dim)
                self._param(name_static).write_diff()[...] += xp.matmul(dsum.T, xs)
            if propagate_down[2]:
                w_static = self._param(name_static).read_data()
                bottom[2].write_diff()[...] = xp.matmul(dsum, w_static).reshape(bottom[2].shape)
        if propagate_down[0]:
            w_x = self._param(name_x).read_data()
            bottom[0].write_diff()[...] = xp.matmul(flat, w_x).reshape(bottom[0].shape)

    def _log_forward(self, xp, hs, out):
        for t in range(self.T):
            log.info("    [Forward] %s '%s': step %d: h data mean |h| %g", self.type, self.name,
                     t + 1, float(abs(hs[t]).mean()))
        log.info("    [Forward] %s '%s': top data asum %g", self.type, self.name, out.asum_data())

    # ---- subclass hooks ------------------------------------------------------------------
    def _begin(self, t_steps):
        """Called before the time loop of every forward (allocate per-step caches)."""

    def _step_forward(self, xp, t, pre, cont_t, states):
        """One step: ``pre`` (N, G) are the summed pre-activations, ``cont_t`` (N, 1) and
        ``states`` the previous states (N, H) each; return the new states (``h`` first)."""
        raise NotImplementedError

    def _step_backward(self, xp, t, cont_t, dstates):
        """Given the gradients of step t's new states, return ``(dpre (N, G), others)`` where
        ``others`` are the gradients of the previous states other than ``h`` (whose gradient
        through the recurrent weights the base class adds)."""
        raise NotImplementedError

    def _output_forward(self, xp, hs):
        """The output top (T, N, H) from the hidden states of all steps."""
        return hs

    def _output_backward(self, xp, dy, hs):
        """The gradient of the hidden states (T, N, H) from the output top's diff ``dy``;
        accumulates the output params' diffs."""
        return dy

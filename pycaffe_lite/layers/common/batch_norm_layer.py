"""BatchNorm: normalise each channel to zero mean and unit variance (and, NVCaffe's
``scale_bias``, scale and shift it)."""

import logging

from ...backend import get_array_module
from ...fillers import fill
from ...layer import Layer
from ...ops.gpu import channels as gpu_channels
from ...ops.gpu import on_gpu
from ...ops.gpu._util import kernel_dtype
from ...proto import caffe_pb2
from ...registry import register_layer

log = logging.getLogger(__name__)


@register_layer("BatchNorm")
class BatchNormLayer(Layer):
    """Per-channel normalisation y = (x - mean) / sqrt(var + eps), without scale or shift
    (follow it with a Scale layer with ``bias_term: true`` for those).

    Bottoms: x of shape (N,) , (N, C) or (N, C, ...); statistics are per channel (axis 1),
    over the batch and all spatial positions (m = N * spatial values per channel).
    Tops: y, x's shape; may be computed in place.
    Params: ``batch_norm_param { use_global_stats (phase == TEST), moving_average_fraction
    (0.999), eps (1e-5) }``. In training mode the batch statistics are used (biased variance)
    and the running sums are updated; with global stats the stored ones are used.
    Blobs (never learned: the layer forces ``lr_mult: 0`` for all three, as Caffe does): the
    running mean sum (C,), the running variance sum (C,) and the running weight sum (1,), all
    initialised to 0. Each forward in training does ``s = s * f + 1``, ``mean_sum = mean_sum
    * f + batch_mean``, ``var_sum = var_sum * f + batch_var * m / (m - 1)``; the statistics
    used in global mode are ``mean_sum / s`` and ``var_sum / s`` (0 when s is 0).

    NVCaffe's ``scale_bias: true`` (or a ``scale_filler`` or ``bias_filler``, fillers default
    to 1 and 0) adds two learned blobs, scale and bias (C,), and ``y = scale * x_hat + bias``:
    five blobs, as NVCaffe stores them. Those layers follow NVCaffe for the statistics too:
    blobs 0 and 1 hold the moving mean and (biased) variance themselves, copied from the first
    two batches, then ``m = f * m + (1 - f) * batch``; blob 2 stays 1 (so the global formula
    above reads them unchanged); eps is at least 1e-5. Scale and bias get ``lr_mult: 1``,
    ``decay_mult: 1`` as NVCaffe sets them.

    Intel Caffe's MKL layers (``engine: MKL2017 | MKLDNN`` here or in the layer's engine
    string) with ``use_weight_bias`` (true) hold a scale (``filler``, default 1) and, with
    ``bias_term`` (true), a bias (``bias_filler``, default 0) after Caffe's three statistics
    blobs, learned with the layer's own ``param`` settings; ``relu`` applies a ReLU after
    (the MKLDNN engine only: the fork's CAFFE and MKL2017 layers do not read it).
    Intel Caffe's ``stats_batch_size`` (set on every BatchNorm by the net's
    ``bn_stats_batch_size``) splits a training batch into sub-batches of that many items, in
    order: each is normalised with its own statistics, which are folded into the running sums
    one sub-batch after another (m = the sub-batch's values per channel); the batch must
    divide into them.
    """

    exact_num_bottom_blobs = 1
    exact_num_top_blobs = 1

    def setup(self, bottom, top):
        p = self.layer_param.batch_norm_param
        x = bottom[0]
        self.moving_average_fraction = p.moving_average_fraction
        self.use_global_stats = self.phase == caffe_pb2.TEST
        if p.HasField("use_global_stats"):
            self.use_global_stats = p.use_global_stats
        if x.num_axes == 0:
            raise self.error("needs a bottom with at least one axis, got shape %s" % (x.shape,))
        self.channels = 1 if x.num_axes == 1 else x.shape[1]
        self.eps = p.eps
        self.scale_bias, self.affine_blobs, self.relu = self._affine_mode(p)
        self.iter = 0
        count = 3 + self.affine_blobs
        if self.scale_bias:
            self.eps = max(self.eps, 1e-5)
        if len(self.blobs) > 0:
            expected = [(self.channels,), (self.channels,), (1,)] + [(self.channels,)] * 2
            if len(self.blobs) != count:
                what = ", ".join(["mean", "variance", "scale factor", "scale", "bias"][:count])
                raise self.error("expected %d parameter blobs (%s), got %d"
                                 % (count, what, len(self.blobs)))
            for i, (blob, shape) in enumerate(zip(self.blobs, expected)):
                if blob.count != shape[0]:
                    raise self.error("parameter blob %d has shape %s, expected %s"
                                     % (i, blob.shape, shape))
                if blob.shape != shape:
                    blob.reshape(shape)
        else:
            # NVCaffe's variance correction starts at 1 (and stays there)
            for shape, value in (((self.channels,), 0), ((self.channels,), 0),
                                 ((1,), 1 if self.scale_bias else 0)):
                self.blobs.add_blob(*shape).write_data()[...] = value
            scale_filler = "scale_filler" if self.scale_bias else "filler"
            for name, default in ((scale_filler, 1.0), ("bias_filler", 0.0))[:self.affine_blobs]:
                blob = self.blobs.add_blob(self.channels)
                if p.HasField(name):
                    fill(blob, getattr(p, name))
                else:
                    blob.write_data()[...] = default
        # The statistics are not parameters to learn: give each blob lr_mult 0 (adding the
        # ParamSpec where the prototxt has none) and never compute their gradients.
        for i in range(3):
            if len(self.layer_param.param) == i:
                self.layer_param.param.add().lr_mult = 0.0
            elif self.layer_param.param[i].lr_mult != 0:
                raise self.error("Cannot configure batch normalization statistics as layer "
                                 "parameters: param %d has lr_mult %g, expected 0"
                                 % (i, self.layer_param.param[i].lr_mult))
            self.set_param_propagate_down(i, False)
        for i in range(3, len(self.blobs) if self.scale_bias else 3):  # NVCaffe's: learned
            while len(self.layer_param.param) <= i:
                self.layer_param.param.add()
            self.layer_param.param[i].lr_mult = 1.0
            self.layer_param.param[i].decay_mult = 1.0

    def _affine_mode(self, p):
        """(NVCaffe's scale_bias, how many scale/bias blobs, Intel's relu). Intel Caffe's MKL
        layers (an MKL engine here, or in the layer's engine string where this one is
        DEFAULT, as Intel's layer factory chooses) with use_weight_bias hold a scale and,
        with bias_term, a bias; only its MKLDNN layer applies ``relu`` (its CAFFE and MKL2017
        layers leave it unread); NVCaffe's scale_bias (or either of its fillers) both."""
        engine = self.layer_param.engine.split(":", 1)[0].strip().upper()
        PB = caffe_pb2.BatchNormParameter
        kind = p.engine
        if kind == PB.DEFAULT and engine.startswith("MKL"):
            kind = PB.MKLDNN if engine.startswith("MKLDNN") else PB.MKL2017
        relu = p.relu and kind == PB.MKLDNN
        if p.relu and not relu:
            log.warning("BatchNorm layer '%s': relu is applied by Intel Caffe's MKLDNN engine "
                        "only; with this layer's engine the fork leaves it unread, and so does "
                        "this one", self.layer_param.name)
        if kind in (PB.MKL2017, PB.MKLDNN):
            if not p.use_weight_bias:
                return False, 0, relu
            return False, 2 if p.bias_term else 1, relu
        intel = any(p.HasField(f) for f in ("use_weight_bias", "bias_term", "filler",
                                            "stats_batch_size", "relu"))
        if p.scale_bias or p.HasField("scale_filler") or (p.HasField("bias_filler") and
                                                          not intel):
            return True, 2, False
        return False, 0, relu

    def reshape(self, bottom, top):
        x = bottom[0]
        if x.num_axes == 0 or (x.num_axes > 1 and x.shape[1] != self.channels):
            raise self.error("bottom of shape %s does not have the %d channels (axis 1) the "
                             "layer was set up with" % (x.shape, self.channels))
        if x.num_axes == 1 and self.channels != 1:
            raise self.error("a 1-axis bottom (shape %s) has 1 channel, the layer was set up "
                             "with %d" % (x.shape, self.channels))
        top[0].reshape(x.shape)
        self.num = x.shape[0]
        self.spatial = x.count // (self.num * self.channels) if self.num * self.channels else 0
        size = self.layer_param.batch_norm_param.stats_batch_size
        self.sub_batches = 1
        if size and not self.use_global_stats and self.num:
            if self.num % size:
                raise self.error("a batch of %d does not divide into sub-batches of "
                                 "stats_batch_size %d (Intel Caffe's statistics per sub-batch)"
                                 % (self.num, size))
            self.sub_batches = self.num // size

    def _view(self, arr):
        return arr.reshape(self.num, self.channels, self.spatial)

    def _on_gpu(self, x):
        """The GPU kernels (ops/gpu/channels.py) take Caffe's plain BatchNorm on CuPy arrays."""
        return not (self.affine_blobs or self.relu or self.scale_bias) and on_gpu(x) and \
            kernel_dtype(x) is not None and x.size > 0 and self.sub_batches == 1

    def _forward_gpu(self, x, y):
        xp = get_array_module(x)
        mean = xp.empty(self.channels, dtype=x.dtype)
        std = xp.empty(self.channels, dtype=x.dtype)
        if self.use_global_stats:
            gpu_channels.bn_global(self.blobs[0].read_data(), self.blobs[1].read_data(),
                                   self.blobs[2].read_data(), self.eps, mean, std)
        else:
            var = xp.empty(self.channels, dtype=x.dtype)
            gpu_channels.bn_statistics(x, mean, var)
            m = self.num * self.spatial
            gpu_channels.bn_running(mean, var, self.blobs[0].write_data(),
                                    self.blobs[1].write_data(), self.blobs[2].write_data(),
                                    self.moving_average_fraction, m / (m - 1) if m > 1 else 1,
                                    self.eps, std)
        x_norm = getattr(self, "x_norm", None)
        if x_norm is None or x_norm.shape != x.shape or x_norm.dtype != x.dtype or \
                get_array_module(x_norm) is not xp:
            x_norm = xp.empty_like(x)
        gpu_channels.bn_apply(x, mean, std, x_norm, y)
        self.x_norm, self.std = x_norm, std

    def forward(self, bottom, top):
        self._forward(bottom, top)
        data = top[0].synced_data
        self._written = (data, data.version)

    def normalized_top(self, blob):
        """The array this layer keeps for its backward (``x_norm``) when it equals ``blob``'s
        data: Caffe's plain BatchNorm (no scale, bias or ReLU of its own: its top is
        ``x_norm``), ``blob`` its top, not written since this layer's last forward. Else None.
        An in-place Scale after it keeps this array instead of a copy of the same values."""
        written = getattr(self, "_written", None)
        if written is None or self.affine_blobs or self.relu or self.scale_bias:
            return None
        data, version = written
        x_norm = getattr(self, "x_norm", None)
        if blob.synced_data is not data or data.version != version or x_norm is None or \
                x_norm.size != blob.count or x_norm.dtype != blob.dtype:
            return None
        return x_norm

    def _forward(self, bottom, top):
        x = self._view(bottom[0].read_data())
        if self._on_gpu(x):
            return self._forward_gpu(x, self._view(top[0].write_data()))
        if self.use_global_stats:
            mean, var = self.global_stats()
        elif self.sub_batches > 1:
            return self._forward_sub_batches(x, top)
        else:
            mean = x.mean(axis=(0, 2))
            centred = x - mean[:, None]
            var = (centred * centred).mean(axis=(0, 2))
            self.update_running(mean, var)
        std = (var + self.eps) ** 0.5
        x_norm = (x - mean[:, None]) / std[:, None]
        self._finish_forward(x_norm, std, top)

    def _sub_view(self, arr):
        """(sub-batches, items of one, C, spatial) view of an (N, C, spatial) array."""
        return arr.reshape(self.sub_batches, -1, self.channels, self.spatial)

    def _forward_sub_batches(self, x, top):
        """Intel Caffe's stats_batch_size: each sub-batch normalised with its own statistics,
        folded into the running sums in order; std has shape (sub-batches, C)."""
        xs = self._sub_view(x)
        mean = xs.mean(axis=(1, 3))
        centred = xs - mean[:, None, :, None]
        var = (centred * centred).mean(axis=(1, 3))
        m = xs.shape[1] * self.spatial
        for i in range(self.sub_batches):
            self.update_running(mean[i], var[i], m)
        std = (var + self.eps) ** 0.5
        x_norm = (centred / std[:, None, :, None]).reshape(x.shape)
        self._finish_forward(x_norm, std, top)

    def _finish_forward(self, x_norm, std, top):
        # Kept for backward: a later in-place layer may overwrite the top.
        self.x_norm = x_norm
        self.std = std
        if self.affine_blobs:
            x_norm = x_norm * self.blobs[3].read_data()[:, None]
        if self.affine_blobs > 1:
            x_norm = x_norm + self.blobs[4].read_data()[:, None]
        if self.relu:
            self.positive = x_norm > 0
            x_norm = x_norm.clip(min=0)
        self._view(top[0].write_data())[...] = x_norm

    def global_stats(self):
        """(mean, variance) of the stored statistics, as global mode uses them."""
        # 1 / s, or 0 when s is 0, without reading s on the host
        s = self.blobs[2].read_data()[:1]
        xp = get_array_module(s)
        factor = xp.where(s != 0, 1 / xp.where(s != 0, s, 1), 0).astype(s.dtype)
        return self.blobs[0].read_data() * factor, self.blobs[1].read_data() * factor

    def update_running(self, mean, var, m=None):
        """Fold a training batch's mean and (biased) variance into the stored statistics
        (``m`` values per channel: the batch's unless given)."""
        if self.scale_bias:
            return self._nvcaffe_update(mean, var)
        f = self.moving_average_fraction
        m = self.num * self.spatial if m is None else m
        correction = m / (m - 1) if m > 1 else 1
        scale = self.blobs[2].write_data()
        scale *= f
        scale += 1
        mean_sum = self.blobs[0].write_data()
        mean_sum *= f
        mean_sum += mean
        var_sum = self.blobs[1].write_data()
        var_sum *= f
        var_sum += correction * var

    def _nvcaffe_update(self, mean, var):
        """NVCaffe's moving statistics: the batch's own for the first two, then averaged."""
        f = self.moving_average_fraction
        for blob, batch in ((self.blobs[0], mean), (self.blobs[1], var)):
            stored = blob.write_data()
            if self.iter > 1:
                stored *= f
                stored += (1 - f) * batch
            else:
                stored[...] = batch
        self.iter += 1

    def backward(self, top, propagate_down, bottom):
        dy = self._view(top[0].read_diff())
        if self._on_gpu(dy):
            if propagate_down[0]:
                gpu_channels.bn_backward(dy, self.x_norm, self.std, self.use_global_stats,
                                         self._view(bottom[0].write_diff()))
            return
        if self.relu:
            dy = dy * self.positive
        if self.affine_blobs:
            if self.param_propagate_down[3]:
                self.blobs[3].write_diff()[...] += (dy * self.x_norm).sum(axis=(0, 2))
            if self.affine_blobs > 1 and self.param_propagate_down[4]:
                self.blobs[4].write_diff()[...] += dy.sum(axis=(0, 2))
            dy = dy * self.blobs[3].read_data()[:, None]
        if not propagate_down[0]:
            return
        if self.use_global_stats:
            dx = dy / self.std[:, None]
        else:  # per sub-batch (one: the whole batch)
            k = self.std.size // self.channels
            dys, y = dy.reshape(k, -1, self.channels, self.spatial), \
                self.x_norm.reshape(k, -1, self.channels, self.spatial)
            mean_dy = dys.mean(axis=(1, 3), keepdims=True)
            mean_dy_y = (dys * y).mean(axis=(1, 3), keepdims=True)
            dx = (dys - mean_dy - mean_dy_y * y) / self.std.reshape(k, 1, self.channels, 1)
        self._view(bottom[0].write_diff())[...] = dx.reshape(dy.shape)

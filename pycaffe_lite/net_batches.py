"""pycaffe's calls over many items at once (``python/caffe/pycaffe.py``'s ``forward_all``,
``forward_backward_all``, ``set_input_arrays``), a base of :class:`pycaffe_lite.net.Net`: they
cut the items into batches of the net's batch size and use only the net's public calls."""

import itertools

import numpy as np

from .errors import NetError


class BatchedCalls:
    """Mixin of :class:`~pycaffe_lite.net.Net` (needs ``forward``, ``backward``,
    ``forward_from_to``, ``backward_from_to``, ``blobs``, ``inputs``, ``outputs``, ``layers``
    and ``name``)."""

    def forward_all(self, blobs=None, **kwargs):
        """Forward any number of items in batches of the net's batch size (pycaffe's); the
        last batch is padded and the padding dropped from the outputs."""
        self._need_arrays(kwargs, "forward_all")
        outputs = list(dict.fromkeys(self.outputs + list(blobs or ())))
        collected = {name: [] for name in outputs}
        for batch in self._batches(kwargs):
            out = self.forward(blobs=blobs, **batch)
            for name in outputs:
                collected[name].append(out[name].copy())
        return self._unpad(collected, kwargs)

    def forward_backward_all(self, blobs=None, diffs=None, **kwargs):
        """forward_all and backward over batches; returns (outputs, input diffs). Inputs
        and top diffs are batched apart, as pycaffe's: a net fed by its data layers takes
        top diffs alone (each batch's forward then reads its data layers), and the side
        with fewer batches runs the others without arrays of its own."""
        self._need_arrays(kwargs, "forward_backward_all")
        outputs = list(dict.fromkeys(self.outputs + list(blobs or ())))
        grads = list(dict.fromkeys(self.inputs + list(diffs or ())))
        fwd_in = {k: v for k, v in kwargs.items() if k in self.inputs}
        bwd_in = {k: v for k, v in kwargs.items() if k not in self.inputs}
        all_out = {n: [] for n in outputs}
        all_diff = {n: [] for n in grads}
        for fb, bb in itertools.zip_longest(self._batches(fwd_in), self._batches(bwd_in),
                                            fillvalue={}):
            out = self.forward(blobs=blobs, **fb)
            diff = self.backward(diffs=diffs, **bb)
            for n in outputs:
                all_out[n].append(out[n].copy())
            for n in grads:
                all_diff[n].append(diff[n].copy())
        counted = fwd_in or bwd_in
        return self._unpad(all_out, counted), self._unpad(all_diff, counted)

    def _need_arrays(self, kwargs, what):
        if not kwargs:
            raise NetError("%s() needs arrays to batch, as name=array (net inputs: %s; "
                           "outputs: %s); a net fed by its data layers runs with forward()"
                           % (what, ", ".join(self.inputs) or "none",
                              ", ".join(self.outputs) or "none"))

    def _batches(self, arrays):
        if not arrays:
            return
        first = next(iter(arrays))
        total = len(arrays[first])
        size = self.blobs[first].shape[0]
        for start in range(0, total, size):
            batch = {}
            for name, value in arrays.items():
                chunk = np.asarray(value[start:start + size])
                if len(chunk) < size:
                    pad = np.zeros((size - len(chunk),) + chunk.shape[1:], chunk.dtype)
                    chunk = np.concatenate([chunk, pad])
                batch[name] = chunk
            yield batch

    @staticmethod
    def _unpad(collected, inputs):
        """Join per-batch outputs; items are cut back to the input count, while scalars
        (losses) stay one value per batch."""
        total = len(next(iter(inputs.values()))) if inputs else None
        result = {}
        for name, parts in collected.items():
            if parts and parts[0].ndim == 0:
                result[name] = np.stack(parts)
            else:
                joined = np.concatenate(parts) if parts else np.zeros(0)
                result[name] = joined[:total] if total is not None else joined
        return result

    # pycaffe's underscored names, which scripts call too: ``_forward(start, end)`` and
    # ``_backward(start, end)`` take layer indices (the forward returns the loss), ``_batch``
    # cuts {name: items} into padded batches
    def _forward(self, start, end):
        if self.folding is not None and self.folding.cuts(start, end):
            from . import net_fold  # a range that cuts a folded chain runs the layers unfolded
            with net_fold.unfused(self):
                return self.forward_from_to(start, end)
        return self.forward_from_to(start, end)

    def _backward(self, start, end):
        self.backward_from_to(start, end)

    def _check_range(self, step, start, end, first, last):
        """Caffe's checks of ForwardFromTo (``first`` = start >= 0, ``last`` = end < the
        number of layers) and BackwardFromTo (end >= 0, start < the number of layers); a
        start past the end runs no layer."""
        count = len(self.layers)
        if not all(isinstance(i, (int, np.integer)) and not isinstance(i, bool)
                   for i in (start, end)):
            raise NetError("%s from layer %r to %r: layer indices must be integers"
                           % (step, start, end))
        if first < 0 or last >= count:
            name = "'%s'" % self.name if self.name else "(unnamed)"
            raise NetError("%s from layer %d to %d: net %s has layers 0 to %d"
                           % (step, start, end, name, count - 1))

    def _batch(self, blobs):
        return self._batches(blobs)

    def _set_input_arrays(self, data, labels):
        return self.set_input_arrays(data, labels)

    def set_input_arrays(self, data, labels, layer_index=0):
        """Point a MemoryData layer at arrays (pycaffe's set_input_arrays)."""
        layer = self.records[layer_index].layer
        if layer.type != "MemoryData":
            raise NetError("set_input_arrays needs a MemoryData layer at index %d, found %s "
                           "layer '%s'" % (layer_index, layer.type, layer.name))
        layer.reset(data, labels)

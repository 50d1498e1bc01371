"""MatWrite: each bottom written to a MATLAB .mat file (DeepLab v2)."""

import numpy as np

from ...data.datum import read_file
from ...layer import Layer
from ...registry import register_layer


@register_layer("MatWrite")
class MatWriteLayer(Layer):
    """Writes its bottoms to .mat files, as DeepLab v2's test files save the scores.

    At every ``period``-th forward (the first included), bottom ``i`` goes to
    ``<prefix><name>_blob_<i>.mat``, where ``name`` is the first word of line ``k`` of
    ``source`` (less its last ``strip`` characters) at the ``k``-th forward, or ``iter_<k>``
    without a source. Each file holds one single-precision variable ``data`` of MATLAB size
    ``W x H x C x N`` (the blob's memory read in MATLAB's column-major order, as the fork's
    matio writes it; a blob of fewer axes counts the missing ones as 1). Running more
    forwards than ``source`` has lines is an error, as in the fork.

    Bottoms: one or more. Tops: none.
    Params: ``mat_write_param { prefix (required), source, strip (0), period (1) }``.
    Needs SciPy (``scipy.io.savemat``): without it the net is refused when built.
    """

    min_num_bottom_blobs = 1
    exact_num_top_blobs = 0
    host_only = True

    def setup(self, bottom, top):
        p = self.layer_param.mat_write_param
        if not p.prefix:
            raise self.error("mat_write_param.prefix is required (the fork's required field): "
                             "the path the file names are appended to")
        if p.period <= 0:
            raise self.error("mat_write_param.period must be positive, got %d" % p.period)
        if p.strip < 0:
            raise self.error("mat_write_param.strip cannot be negative, got %d" % p.strip)
        try:
            import scipy.io
        except ImportError:
            raise self.error("the MatWrite layer '%s' needs the optional SciPy package to write "
                             ".mat files: pip install scipy" % self.name) from None
        self.sio = scipy.io
        self.prefix, self.period = p.prefix, int(p.period)
        self.iter = 0
        self.names = None
        if p.HasField("source"):
            text = read_file(p.source, "mat_write_param.source list file")
            self.names = []
            for number, line in enumerate(text.decode("utf-8", "surrogateescape").splitlines(),
                                          1):
                words = line.split()
                if not words:
                    continue
                if len(words[0]) <= p.strip:
                    raise self.error("'%s' line %d: '%s' is not longer than strip (%d)"
                                     % (p.source, number, words[0], p.strip))
                self.names.append(words[0][:len(words[0]) - p.strip])

    def reshape(self, bottom, top):
        pass

    def forward(self, bottom, top):
        if self.iter % self.period == 0:
            if self.names is not None and self.iter >= len(self.names):
                raise self.error("forward %d, but mat_write_param.source names %d files: the "
                                 "test ran for more iterations than the list has lines"
                                 % (self.iter + 1, len(self.names)))
            name = self.names[self.iter] if self.names is not None else "iter_%d" % self.iter
            for i, blob in enumerate(bottom):
                shape = tuple(blob.shape)
                legacy = (shape + (1,) * 4)[:4] if len(shape) <= 4 else None
                if legacy is None:
                    raise self.error("bottom %d has %d axes; the .mat layout is N x C x H x W"
                                     % (i, len(shape)))
                arr = np.asarray(blob.cpu_data(), np.float32).reshape(legacy)
                path = "%s%s_blob_%d.mat" % (self.prefix, name, i)
                try:
                    self.sio.savemat(path, {"data": arr.transpose(3, 2, 1, 0)})
                except OSError as exc:
                    raise self.error("cannot write '%s': %s" % (path, exc.strerror or exc)) \
                        from None
        self.iter += 1

    def backward(self, top, propagate_down, bottom):
        pass

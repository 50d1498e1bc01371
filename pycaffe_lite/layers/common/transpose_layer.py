"""Transpose: the bottom's axes permuted (CTPN's fork)."""

from ...layer import Layer
from ...registry import register_layer


@register_layer("Transpose")
class TransposeLayer(Layer):
    """Axis ``i`` of the top is axis ``dim[i]`` of the bottom, as CTPN's Caffe defines it
    (``transpose_param { dim: 3 dim: 0 dim: 2 dim: 1 }`` turns N x C x H x W into
    W x N x H x C).

    Backward: the top gradient with the inverse permutation.
    Bottoms: x with as many axes as ``dim`` lists. Tops: the permuted x (not in place).
    Params: ``transpose_param { dim (repeated: a permutation of 0 .. axes - 1) }``.
    """

    exact_num_bottom_blobs = 1
    exact_num_top_blobs = 1

    def setup(self, bottom, top):
        self.dims = [int(d) for d in self.layer_param.transpose_param.dim]
        if sorted(self.dims) != list(range(len(self.dims))):
            raise self.error("transpose_param dim %s is not a permutation of 0..%d"
                             % (self.dims, len(self.dims) - 1))
        self.inverse = [self.dims.index(i) for i in range(len(self.dims))]

    def reshape(self, bottom, top):
        x = bottom[0]
        if top[0] is x:
            raise self.error("Transpose cannot run in place (its top must be a new blob)")
        if x.num_axes != len(self.dims):
            raise self.error("transpose_param lists %d axes but the bottom has %d (shape %s)"
                             % (len(self.dims), x.num_axes, x.shape))
        top[0].reshape([x.shape[d] for d in self.dims])

    def forward(self, bottom, top):
        top[0].write_data()[...] = bottom[0].read_data().transpose(self.dims)

    def backward(self, top, propagate_down, bottom):
        if propagate_down[0]:
            bottom[0].write_diff()[...] = top[0].read_diff().transpose(self.inverse)

"""DenseCRF: DeepLab v2's fully connected CRF, refused with a message saying what to do."""

from ...layer import Layer
from ...registry import register_layer


@register_layer("DenseCRF")
class DenseCRFLayer(Layer):
    """DeepLab v2's mean-field inference of a fully connected CRF (``dense_crf_param``) is not
    computed here: a net with this layer is refused when it is built, with a message that
    names the layer. Its parameters read (``dense_crf_param { max_iter pos_xy_std pos_w
    bi_xy_std bi_rgb_std bi_w output_probability }``), so the rest of such a file is checked
    first. Remove the layer (and the layers that read its top, such as its MatWrite) and
    apply a dense CRF to the scores the net writes."""

    def setup(self, bottom, top):
        raise self.error(
            "DenseCRF (DeepLab v2's fully connected CRF) is not supported: remove this layer "
            "and the layers that read its top '%s', and apply a dense CRF to the scores "
            "afterwards (for example to the .mat files a MatWrite layer writes)"
            % "', '".join(self.layer_param.top))

    def reshape(self, bottom, top):
        pass

    def forward(self, bottom, top):
        pass

    def backward(self, top, propagate_down, bottom):
        pass

"""PyTorch code for Caffe's element-wise (neuron) layers and Dropout."""

from .codegen import Module, helper, literal, register_generator


@register_generator("ReLU")
def relu(layer):
    slope = float(layer.param.relu_param.negative_slope)
    if slope:
        return Module("nn.LeakyReLU(%s)" % literal(slope))
    return Module("nn.ReLU()")


@register_generator("PReLU")
def prelu(layer):
    slope = layer.blobs[0].reshape(-1)
    return Module("nn.PReLU(%d)" % slope.size, {"weight": slope})


@register_generator("ELU")
def elu(layer):
    return Module("nn.ELU(%s)" % literal(float(layer.param.elu_param.alpha)))


@register_generator("Sigmoid", "TanH", "BNLL", "Mish", "ReLU6")
def simple(layer):
    cls = {"Sigmoid": "Sigmoid", "TanH": "Tanh", "BNLL": "Softplus", "Mish": "Mish",
           "ReLU6": "ReLU6"}[layer.type]
    comment = "BNLL: log(1 + exp(x))" if layer.type == "BNLL" else None
    return Module("nn.%s()" % cls, comment=comment)


ABS_VAL = helper("AbsVal", '''
class AbsVal(nn.Module):
    """Caffe's AbsVal: |x|."""

    def forward(self, x):
        return torch.abs(x)
''')


@register_generator("AbsVal")
def absval(layer):
    return Module("AbsVal()", helpers=[ABS_VAL])


POWER = helper("Power", '''
class Power(nn.Module):
    """Caffe's Power: (shift + scale * x) ** power."""

    def __init__(self, power, scale, shift):
        super().__init__()
        self.power, self.scale, self.shift = power, scale, shift

    def forward(self, x):
        y = x * self.scale + self.shift if self.scale != 1.0 or self.shift != 0.0 else x
        return y if self.power == 1.0 else torch.pow(y, self.power)
''')


EXP = helper("Exp", '''
class Exp(nn.Module):
    """Caffe's Exp: base ** (shift + scale * x), as base ** shift * exp(ln(base) * scale * x)
    (base -1: e)."""

    def __init__(self, base, scale, shift):
        super().__init__()
        ln_base = 1.0 if base == -1.0 else math.log(base)
        self.inner = ln_base * scale
        self.outer = 1.0 if shift == 0.0 else math.exp(ln_base * shift)

    def forward(self, x):
        y = torch.exp(x * self.inner) if self.inner != 1.0 else torch.exp(x)
        return y * self.outer if self.outer != 1.0 else y
''')


LOG = helper("Log", '''
class Log(nn.Module):
    """Caffe's Log: log_base(shift + scale * x) (base -1: e)."""

    def __init__(self, base, scale, shift):
        super().__init__()
        self.scale, self.shift = scale, shift
        self.inv_ln_base = 1.0 if base == -1.0 else 1.0 / math.log(base)

    def forward(self, x):
        y = x * self.scale + self.shift if self.scale != 1.0 or self.shift != 0.0 else x
        y = torch.log(y)
        return y * self.inv_ln_base if self.inv_ln_base != 1.0 else y
''')


@register_generator("Power", "Exp", "Log")
def power_exp_log(layer):
    """``Power(power, scale, shift)``, ``Exp(base, scale, shift)``, ``Log(base, scale,
    shift)``: the helper of the type's name, with its parameter's three fields."""
    p = getattr(layer.param, layer.type.lower() + "_param")
    first = p.power if layer.type == "Power" else p.base
    values = (literal(float(v)) for v in (first, p.scale, p.shift))
    return Module("%s(%s)" % (layer.type, ", ".join(values)), helpers=[layer.type])


THRESHOLD = helper("Threshold", '''
class Threshold(nn.Module):
    """Caffe's Threshold: 1 where x > threshold, else 0."""

    def __init__(self, threshold):
        super().__init__()
        self.threshold = threshold

    def forward(self, x):
        return (x > self.threshold).to(x.dtype)
''')


@register_generator("Threshold")
def threshold(layer):
    t = float(layer.param.threshold_param.threshold)
    return Module("Threshold(%s)" % literal(t), helpers=[THRESHOLD])


@register_generator("Clip")
def clip(layer):
    p = layer.param.clip_param
    return Module("nn.Hardtanh(%s, %s)" % (literal(float(p.min)), literal(float(p.max))),
                  comment="Clip: min(max(x, min), max)")


SWISH = helper("Swish", '''
class Swish(nn.Module):
    """Caffe's Swish: x * sigmoid(beta * x)."""

    def __init__(self, beta):
        super().__init__()
        self.beta = beta

    def forward(self, x):
        return x * torch.sigmoid(x * self.beta if self.beta != 1.0 else x)
''')


@register_generator("Swish")
def swish(layer):
    beta = float(layer.param.swish_param.beta)
    if beta == 1.0:
        return Module("nn.SiLU()", comment="Swish with beta 1")
    return Module("Swish(%s)" % literal(beta), helpers=[SWISH])


CAFFE_DROPOUT = helper("CaffeDropout", '''
class CaffeDropout(nn.Module):
    """Caffe's Dropout where PyTorch's differs. scale_train False (the Fast R-CNN fork): in
    training the kept values are not scaled up, at inference all are scaled by 1 - ratio.
    sample (Bayesian SegNet's sample_weights_test): a new mask at inference too."""

    def __init__(self, ratio, scale_train, sample, trainable):
        super().__init__()
        self.ratio, self.scale_train = ratio, scale_train
        self.sample, self.trainable = sample, trainable

    def forward(self, x):
        if self.sample or (self.training and self.trainable):
            mask = (torch.rand_like(x) >= self.ratio).to(x.dtype)
            return x * mask / (1 - self.ratio) if self.scale_train else x * mask
        return x if self.scale_train else x * (1 - self.ratio)
''')


@register_generator("Dropout")
def dropout(layer):
    p = layer.param.dropout_param
    ratio = float(p.dropout_ratio)
    if p.sample_weights_test or not p.scale_train:
        return Module("CaffeDropout(%s, %s, %s, %s)" % (
            literal(ratio), literal(bool(p.scale_train)), literal(bool(p.sample_weights_test)),
            literal(bool(layer.train))), helpers=[CAFFE_DROPOUT])
    if layer.train:
        return Module("nn.Dropout(%s)" % literal(ratio))
    return Module("nn.Identity()", comment="Dropout (ratio %g): identity at inference" % ratio)


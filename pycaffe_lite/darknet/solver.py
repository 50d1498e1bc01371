"""Darknet's ``[net]`` training settings as a Caffe SolverParameter (and the colour
augmentation as a TransformationParameter)."""

from google.protobuf import text_format

from ..proto import caffe_pb2
from .cfg import warn

_NET_INPUT_KEYS = {"width", "height", "channels", "inputs"}
# [net] keys Darknet reads that have no Caffe solver or transformation equivalent.
_NET_KNOWN_KEYS = {
    "batch", "subdivisions", "learning_rate", "momentum", "decay", "max_batches", "policy",
    "steps", "scales", "step", "scale", "gamma", "power", "burn_in", "adam", "B1", "B2", "eps",
    "hue", "saturation", "exposure", "angle", "jitter", "aspect", "flip", "learning_rate_min",
    "sgdr_cycle", "sgdr_mult", "seq_scales", "time_steps", "track", "augment_speed",
    "sequential_subdivisions", "try_fix_nan", "loss_scale", "dynamic_minibatch",
    "optimized_memory", "workspace_size_limit_MB", "max_crop", "min_crop", "blur", "mixup",
    "cutmix", "mosaic", "letter_box", "label_smooth_eps", "resize_step", "gaussian_noise",
    "mosaic_bound", "contrastive", "contrastive_jit_flip", "contrastive_color",
    "unsupervised", "attention", "adversarial_lr", "max_chart_loss", "center", "notruth",
    "random", "rotate", "num_boxes", "ema_alpha", "train_only_bn", "batches_per_cycle",
    "cudnn_half", "max_batches_alpha",
}


def solver_from_cfg(cfg, net_path=None):
    """The training settings of ``cfg``'s ``[net]`` section as Caffe settings.

    Returns ``(solver_param, transform_param, comments)``: a SolverParameter (base_lr,
    momentum, weight_decay, max_iter, iter_size, lr_policy and its fields, burn_in and
    burn_in_power, the Adam settings), a TransformationParameter with the colour augmentation
    (hue, saturation, exposure) for the training data layer, and comment lines that give the
    mini-batch size and list every [net] key with no equivalent (with its line).
    """
    net = cfg.net
    sp = caffe_pb2.SolverParameter()
    tp = caffe_pb2.TransformationParameter()
    comments = []
    mapped = []
    unmapped = []

    mapped_keys = set()

    def used(key, target):
        if net.has(key):
            mapped_keys.add(key)
            mapped.append("%s=%s -> %s" % (key, net.options[key].value, target))

    if net_path:
        sp.net = net_path
    batch = net.get_int("batch", 1)
    subdivisions = net.get_int("subdivisions", 1)
    if batch < 1 or subdivisions < 1:
        raise net.error("batch and subdivisions must be positive (got batch=%d, "
                        "subdivisions=%d)" % (batch, subdivisions))
    mini = max(batch // subdivisions, 1)
    sp.iter_size = subdivisions
    used("batch", "batch_size: %d in the training data layer (batch / subdivisions)" % mini)
    used("subdivisions", "iter_size: %d" % subdivisions)
    sp.base_lr = net.get_float("learning_rate", 0.001)
    used("learning_rate", "base_lr")
    adam = net.get_int("adam", 0)
    sp.momentum = net.get_float("momentum", 0.9)
    used("momentum", "momentum")
    sp.weight_decay = net.get_float("decay", 0.0001)
    used("decay", "weight_decay")
    sp.max_iter = net.get_int("max_batches", 0)
    used("max_batches", "max_iter")
    if adam:
        sp.type = "Adam"
        sp.momentum = net.get_float("B1", 0.9)
        sp.momentum2 = net.get_float("B2", 0.999)
        sp.delta = net.get_float("eps", 0.000001)
        used("adam", 'type: "Adam"')
        used("B1", "momentum (Adam's beta1)")
        used("B2", "momentum2")
        used("eps", "delta")
    power = net.get_float("power", 4.0)
    burn_in = net.get_int("burn_in", 0)
    if burn_in:
        sp.burn_in = burn_in
        sp.burn_in_power = power
        used("burn_in", "burn_in")
    policy = net.get_str("policy", "constant")
    if policy == "constant":
        sp.lr_policy = "fixed"
    elif policy == "steps":
        steps = net.get_ints("steps")
        scales = net.get_floats("scales")
        if steps is None or scales is None:
            raise net.error("policy=steps needs steps and scales (as Darknet requires)",
                            "policy")
        if len(scales) < len(steps):
            # Darknet multiplies by 1 where scales runs out (it reads past the list's end).
            raise net.error("policy=steps: %d steps but %d scales; give one scale per step"
                            % (len(steps), len(scales)), "scales")
        if steps != sorted(steps):
            raise net.error("policy=steps: steps %s must increase (Darknet stops at the first "
                            "step not yet reached)" % steps, "steps")
        sp.lr_policy = "steps"
        sp.steps.extend(steps)
        sp.scales.extend(scales[:len(steps)])
        used("steps", "steps")
        used("scales", "scales")
    elif policy == "step":
        sp.lr_policy = "step"
        sp.stepsize = net.get_int("step", 1)
        sp.gamma = net.get_float("scale", 1.0)
        used("step", "stepsize")
        used("scale", "gamma")
    elif policy == "exp":
        sp.lr_policy = "exp"
        sp.gamma = net.get_float("gamma", 1.0)
        used("gamma", "gamma")
    elif policy == "poly":
        sp.lr_policy = "poly"
        sp.power = power
    elif policy == "sigmoid" and net.get_float("gamma", 1.0) <= 0:
        # Darknet: lr / (1 + exp(gamma * (it - step))); Caffe: exp(-gamma * (it - stepsize)),
        # with gamma >= 0 (a rising rate): only Darknet's gamma <= 0 has an equivalent.
        sp.lr_policy = "sigmoid"
        sp.gamma = -net.get_float("gamma", 1.0)
        sp.stepsize = net.get_int("step", 1)
        used("gamma", "gamma (negated: Caffe's sigmoid has the opposite sign)")
        used("step", "stepsize")
    elif policy == "sigmoid":
        sp.lr_policy = "fixed"
        unmapped.append("%s:%d: policy=sigmoid with gamma > 0 (a falling rate) has no Caffe "
                        "equivalent (Caffe's sigmoid needs gamma >= 0, a rising rate); "
                        "lr_policy \"fixed\" is used" % (net.path, net.options["policy"].line))
        mapped_keys.add("policy")
    else:
        sp.lr_policy = "fixed"
        unmapped.append("%s:%d: policy=%s has no Caffe equivalent; lr_policy \"fixed\" is used"
                        % (net.path, net.options["policy"].line, policy))
        mapped_keys.add("policy")
    if net.has("policy") and "policy" not in mapped_keys:
        used("policy", 'lr_policy: "%s"' % sp.lr_policy)
    if net.has("power") and (burn_in or policy == "poly"):
        used("power", ("burn_in_power" if burn_in else "") +
             (" and " if burn_in and policy == "poly" else "") +
             ("power" if policy == "poly" else ""))
    hue = net.get_float("hue", 0.0)
    saturation = net.get_float("saturation", 1.0)
    exposure = net.get_float("exposure", 1.0)
    if hue:
        tp.hue = hue
    if saturation != 1:
        tp.saturation = saturation
    if exposure != 1:
        tp.exposure = exposure
    for key in ("hue", "saturation", "exposure"):
        used(key, "transform_param %s" % key)
    for opt in net.options.values():
        if opt.key in _NET_INPUT_KEYS or opt.key in mapped_keys:
            continue
        unmapped.append("%s:%d: %s=%s" % (net.path, opt.line, opt.key, opt.value))
        if opt.key not in _NET_KNOWN_KEYS:
            warn("%s:%d: [net]: unknown key %s=%s is ignored (Darknet ignores keys it does "
                 "not read, too)" % (net.path, opt.line, opt.key, opt.value))
    comments.append("Caffe solver converted from %s by pycaffe-lite darknet2caffe." % net.path)
    comments.append("")
    comments.append("Mapped [net] settings:")
    comments.extend("  " + m for m in mapped)
    if tp.ListFields():
        comments.append("The training data layer takes Darknet's colour augmentation as:")
        comments.append("  transform_param { %s }"
                        % text_format.MessageToString(tp, as_one_line=True))
    comments.append("Darknet's update divides the summed gradient by batch; Caffe's solvers "
                    "take")
    comments.append("the gradient of the mean loss, so base_lr carries over as it is when "
                    "the loss")
    comments.append("is normalised per image.")
    comments.append("")
    if unmapped:
        comments.append("[net] settings with no equivalent (not converted):")
        comments.extend("  " + u for u in unmapped)
    else:
        comments.append("Every [net] setting has an equivalent.")
    if net_path:
        comments.append("")
        comments.append("net: the converted (deploy) net; for training, replace it with a net "
                        "that has")
        comments.append("a data layer (batch_size %d) and a loss." % mini)
    return sp, tp, comments

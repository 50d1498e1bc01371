"""The PyTorch twin of a pycaffe-lite Net, for the side-by-side training benchmarks: the same
layers in the same order, each as PyTorch's own module (Conv2d, BatchNorm2d, MaxPool2d, ...),
run in the net's order over a dict of tensors.

A BatchNorm followed by a Scale on the same blob (Caffe's way of writing an affine batch norm)
becomes one ``BatchNorm2d(affine=True)``, as a PyTorch user writes it; a ReLU in place stays in
place. Every top's shape is checked against the net's blob of that name, so the twin computes
the same function shape for shape. Layer types outside this list raise ``ValueError``.
"""


def _pool(torch, p, shape):
    nn = torch.nn
    if p.global_pooling:
        k, s, pad = shape[2:], 1, 0
    else:
        k = p.kernel_size or (p.kernel_h, p.kernel_w)
        s = p.stride or (p.stride_h or 1, p.stride_w or 1)
        pad = p.pad or (p.pad_h, p.pad_w)
    if p.pool == 0:  # MAX
        return nn.MaxPool2d(k, s, pad, ceil_mode=True)
    return nn.AvgPool2d(k, s, pad, ceil_mode=True, count_include_pad=True)


def _conv(torch, layer, p):
    w = layer.blobs[0]
    k = tuple(w.shape[2:])
    stride = tuple(p.stride) * 2 if len(p.stride) == 1 else (tuple(p.stride) or 1)
    pad = tuple(p.pad) * 2 if len(p.pad) == 1 else (tuple(p.pad) or 0)
    dilation = tuple(p.dilation) * 2 if len(p.dilation) == 1 else (tuple(p.dilation) or 1)
    return torch.nn.Conv2d(w.shape[1] * p.group, w.shape[0], k, stride=stride, padding=pad,
                           dilation=dilation, groups=p.group, bias=p.bias_term)


def build(torch, net):
    """An ``nn.Module`` computing ``net``'s forward (input: the net's first input blob;
    output: its first output blob)."""
    nn = torch.nn
    names = list(net.layer_names)
    steps, modules, skip = [], nn.ModuleDict(), set()
    for i, layer in enumerate(net.layers):
        bottoms = [net._blob_names[b] for b in net.records[i].bottom_ids]
        tops = [net._blob_names[t] for t in net.records[i].top_ids]
        shape = net.records[i].bottoms[0].shape if bottoms else None
        kind, lp, key = layer.type, layer.layer_param, "m%d" % i
        if i in skip or kind in ("Input", "Split", "Silence"):
            if kind == "Split":
                steps.append(("split", None, bottoms, tops))
            continue
        if kind == "Convolution":
            modules[key] = _conv(torch, layer, lp.convolution_param)
        elif kind == "BatchNorm":
            nxt = net.records[i + 1].layer if i + 1 < len(net.records) else None
            affine = (nxt is not None and nxt.type == "Scale"
                      and net.records[i + 1].bottom_ids == net.records[i].top_ids)
            if affine:
                skip.add(i + 1)
            modules[key] = nn.BatchNorm2d(shape[1], eps=lp.batch_norm_param.eps,
                                          affine=affine)
        elif kind == "ReLU":
            modules[key] = nn.ReLU(inplace=bottoms == tops)
        elif kind == "Pooling":
            modules[key] = _pool(torch, lp.pooling_param, shape)
        elif kind == "InnerProduct":
            w = layer.blobs[0]
            modules[key] = nn.Sequential(nn.Flatten(), nn.Linear(
                w.shape[1], w.shape[0], bias=lp.inner_product_param.bias_term))
        elif kind == "Softmax":
            modules[key] = nn.Softmax(dim=1)
        elif kind == "Dropout":
            modules[key] = nn.Dropout(lp.dropout_param.dropout_ratio)
        elif kind == "LRN":
            q = lp.lrn_param
            modules[key] = nn.LocalResponseNorm(q.local_size, q.alpha, q.beta, q.k)
        elif kind == "Eltwise":
            steps.append(("sum", None, bottoms, tops))
            continue
        elif kind == "Concat":
            steps.append(("concat", None, bottoms, tops))
            continue
        else:
            raise ValueError("layer '%s': type %s has no PyTorch twin here" % (names[i], kind))
        steps.append(("module", key, bottoms, tops))
    shapes = {n: tuple(net.blobs[n].shape) for n in net.blobs}
    twin = _Twin(torch, modules, steps, net.inputs[0], net.outputs[0], shapes)
    copy_weights(torch, twin, net)
    return twin


def copy_weights(torch, twin, net):
    """Give the twin the net's parameters (a BatchNorm's affine part from the Scale after
    it), so that both compute the same values."""
    with torch.no_grad():
        for key, module in twin.layers.items():
            i = int(key[1:])
            blobs = [torch.from_numpy(b.data.copy()) for b in net.records[i].layer.blobs]
            if isinstance(module, torch.nn.Sequential):  # Flatten + Linear
                module = module[1]
            if isinstance(module, (torch.nn.Conv2d, torch.nn.Linear)):
                module.weight.copy_(blobs[0].reshape(module.weight.shape))
                if module.bias is not None:
                    module.bias.copy_(blobs[1])
            elif isinstance(module, torch.nn.BatchNorm2d) and module.affine:
                scale = [torch.from_numpy(b.data.copy()) for b in net.records[i + 1].layer.blobs]
                module.weight.copy_(scale[0])
                if len(scale) > 1:
                    module.bias.copy_(scale[1])
                else:
                    module.bias.zero_()


def _Twin(torch, modules, steps, data, output, shapes):
    class Twin(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = modules
            self.checked = False

        def forward(self, x):
            blobs = {data: x}
            for kind, key, bottoms, tops in steps:
                if kind == "module":
                    out = self.layers[key](blobs[bottoms[0]])
                elif kind == "sum":
                    out = blobs[bottoms[0]] + blobs[bottoms[1]]
                    for b in bottoms[2:]:
                        out = out + blobs[b]
                elif kind == "concat":
                    out = torch.cat([blobs[b] for b in bottoms], 1)
                else:  # split
                    for t in tops:
                        blobs[t] = blobs[bottoms[0]]
                    continue
                blobs[tops[0]] = out
                if not self.checked and tuple(out.shape)[1:] != shapes[tops[0]][1:]:
                    raise ValueError("top '%s': PyTorch shape %s, the net's %s"
                                     % (tops[0], tuple(out.shape), shapes[tops[0]]))
            self.checked = True
            return blobs[output]
    return Twin()

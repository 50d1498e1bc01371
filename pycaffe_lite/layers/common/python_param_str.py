"""The param_str of the Python layers that published nets name and that are built in here."""

import ast


def parse_param_str(layer, text):
    """``param_str`` as a dict. py-faster-rcnn reads it as YAML and ENet's layer with ``eval``;
    their nets write a mapping of numbers, strings and number lists (``'feat_stride': 16``,
    ``{'phase': 'TEST', 'p': '0.01'}``), read here as a Python literal, braces optional."""
    text = (text or "").strip()
    if not text:
        return {}
    if not text.startswith("{"):
        text = "{%s}" % text
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError) as exc:
        raise layer.error("python_param param_str %r is not a mapping such as \"'feat_stride': "
                          "16\": %s" % (text, exc)) from exc
    if not isinstance(value, dict):
        raise layer.error("python_param param_str %r is not a mapping" % text)
    return value


def feat_stride_params(layer):
    """The layer's param_str as a dict that names ``feat_stride`` (the proposal layers)."""
    params = parse_param_str(layer, getattr(layer, "param_str", "") or
                             layer.layer_param.python_param.param_str)
    if "feat_stride" not in params:
        raise layer.error("python_param param_str needs 'feat_stride' (e.g. \"'feat_stride': "
                          "16\")")
    return params

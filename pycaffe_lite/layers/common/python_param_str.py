"""The param_str of the Python layers that published nets name and that are built in here."""

import ast

# py-faster-rcnn's COCO nets write a tuple the YAML way: 'scales': !!python/tuple [4, 8, 16, 32]
_YAML_TUPLE_TAG = "!!python/tuple"


def _block_mapping_entries(text):
    """The entries of a YAML block mapping (one ``key: value`` a line; a newline inside
    brackets or quotes continues the entry), as one comma-separated line."""
    entries, current, depth, quote = [], [], 0, None
    for ch in text:
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
        elif ch == "\n" and depth == 0:
            entries.append("".join(current))
            current = []
            continue
        current.append(ch)
    entries.append("".join(current))
    return ", ".join(e.strip().rstrip(",") for e in entries if e.strip())


def parse_param_str(layer, text):
    """``param_str`` as a dict. py-faster-rcnn reads it as YAML and ENet's layer with ``eval``;
    their nets write a mapping of numbers, strings and number lists (``'feat_stride': 16``,
    ``{'phase': 'TEST', 'p': '0.01'}``), one entry a line in YAML's block style
    (``"'feat_stride': 16 \\n'scales': !!python/tuple [4, 8, 16, 32]"``, the COCO nets), read
    here as a Python literal, braces optional (a tagged tuple reads as a list)."""
    original = text = (text or "").strip()
    text = text.replace(_YAML_TUPLE_TAG, "")
    if not text:
        return {}
    if not text.startswith("{"):
        text = "{%s}" % _block_mapping_entries(text)
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError) as exc:
        raise layer.error("python_param param_str %r is not a mapping such as \"'feat_stride': "
                          "16\": %s" % (original, exc)) from exc
    if not isinstance(value, dict):
        raise layer.error("python_param param_str %r is not a mapping" % original)
    return value


def feat_stride_params(layer):
    """The layer's param_str as a dict that names ``feat_stride`` (the proposal layers)."""
    params = parse_param_str(layer, getattr(layer, "param_str", "") or
                             layer.layer_param.python_param.param_str)
    if "feat_stride" not in params:
        raise layer.error("python_param param_str needs 'feat_stride' (e.g. \"'feat_stride': "
                          "16\")")
    return params

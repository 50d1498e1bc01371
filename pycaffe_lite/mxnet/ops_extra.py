"""Converters of MXNet ops without a Caffe layer of their own (Embedding),
each built from BVLC Caffe's layers that compute the same values."""

from .context import converter


@converter("Embedding")
def embedding(c, node):
    """Caffe's Embed without a bias: the same table, (input_dim, output_dim). MXNet clips an
    index outside [0, input_dim) to the table and truncates a fraction; Caffe's Embed refuses
    such an index when the net runs, naming it."""
    a = c.attrs()
    x = c.bottom(0)
    weight = c.param(1)
    input_dim, output_dim = a.int("input_dim"), a.int("output_dim")
    if input_dim is None or output_dim is None:
        raise c.error("it needs input_dim and output_dim")
    if weight.shape != (input_dim, output_dim):
        raise c.error("its weight has shape %s; input_dim=%d, output_dim=%d make (%d, %d)"
                      % (weight.shape, input_dim, output_dim, input_dim, output_dim))
    lp = c.layer("Embed", node.name, [x], [c.out()], [weight])
    lp.embed_param.input_dim = input_dim
    lp.embed_param.num_output = output_dim
    lp.embed_param.bias_term = False
    c.configure(lp)
    c.produce(c.out())

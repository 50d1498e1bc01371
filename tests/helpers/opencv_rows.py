"""A net run here beside OpenCV's dnn module reading the same weights: the outputs as rows,
for the detection nets whose OpenCV outputs are padded to a fixed number of rows."""


def rows_beside_opencv(net, prototxt, weights, inputs, outputs):
    """OpenCV's net of ``prototxt`` and ``weights`` on ``inputs`` (name -> array, the ones
    ``net`` has just run on); for each blob -> OpenCV layer of ``outputs``, in order, the
    pair (our blob as rows of its first axis, OpenCV's output as rows of the same width, as
    many as ours)."""
    import cv2

    cvnet = cv2.dnn.readNetFromCaffe(str(prototxt), str(weights))
    for name, value in inputs.items():
        cvnet.setInput(value, name)
    theirs = cvnet.forward(list(outputs.values()))
    pairs = []
    for blob, cv_out in zip(outputs, theirs):
        mine = net.blobs[blob].data.reshape(net.blobs[blob].shape[0], -1).copy()
        pairs.append((mine, cv_out.reshape(-1, mine.shape[1])[:len(mine)]))
    return pairs

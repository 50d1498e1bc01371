"""Detection layers: Darknet's [yolo] and [region] output layers (pycaffe-lite additions) and
the SSD fork's layers (weiliu89/caffe): Normalize, Permute, PriorBox, DetectionOutput,
MultiBoxLoss and DetectionEvaluate, with their box utilities."""

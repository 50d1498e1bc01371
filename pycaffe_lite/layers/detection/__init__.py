"""Detection heads (pycaffe-lite additions): Darknet's [yolo] and [region] output layers."""

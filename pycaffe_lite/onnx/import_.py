def to_caffe(*a, **k):
    raise NotImplementedError

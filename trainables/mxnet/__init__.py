"""MXNet Gluon trainables: one context per device, split_and_load, a kvstore."""
import numpy as _np

# mxnet 1.9.1 still uses np.bool, removed in numpy 1.24; alias it before mxnet is imported.
if "bool" not in vars(_np):  # vars(): hasattr would trip numpy's FutureWarning
    _np.bool = bool

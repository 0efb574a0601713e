"""PyTorch trainables: DistributedDataParallel, one process per device."""

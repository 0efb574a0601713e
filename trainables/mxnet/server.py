"""An MXNet parameter-server role, run as `python -m trainables.mxnet.server` with DMLC_ROLE set.

MXNet starts the scheduler or server loop when it is imported with DMLC_ROLE=scheduler|server and
returns once every worker has finished; sweep/workers.py runs this in the trial's placement group.
"""
import trainables.mxnet  # noqa: F401  (the numpy alias mxnet 1.9.1 needs)
import mxnet  # noqa: F401, E402  (importing it runs the role)

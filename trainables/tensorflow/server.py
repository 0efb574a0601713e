"""A TensorFlow worker or parameter server for ParameterServerStrategy: `python -m trainables.tensorflow.server`.

TF_CONFIG names the cluster and this task; SWEEP_EMULATED_DEVICES=n gives a worker n logical CPU
devices in place of GPUs. The server runs until sweep/workers.py stops it.
"""
import json
import os

import tensorflow as tf


def main() -> None:
    config = json.loads(os.environ["TF_CONFIG"])
    emulated = int(os.environ.get("SWEEP_EMULATED_DEVICES", "0"))
    if emulated:
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * emulated)
    task = config["task"]
    server = tf.distribute.Server(tf.train.ClusterSpec(config["cluster"]), job_name=task["type"],
                                  task_index=task["index"], protocol="grpc", start=True)
    server.join()


if __name__ == "__main__":
    main()

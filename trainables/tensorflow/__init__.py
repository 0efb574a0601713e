"""TensorFlow trainables: tf.distribute.MirroredStrategy over the trial's devices."""

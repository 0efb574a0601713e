"""A network of your own for TensorFlow trials: `model: keras_net:build` (docs/models.md).

The engine calls build(num_classes=..., image_size=...) in each trial's process, under the trial's
tf.distribute strategy, and trains what it returns: a Keras 3 model (keras.Model) that maps a batch of images
(N, image_size, image_size, 3), float32, to logits (N, num_classes): no softmax at the end.
"""
import keras
from keras import layers


def build(num_classes: int, image_size: int) -> keras.Model:
    inputs = keras.Input((image_size, image_size, 3))
    x = layers.ReLU()(layers.BatchNormalization()(layers.Conv2D(16, 3, padding="same", use_bias=False)(inputs)))
    x = layers.MaxPooling2D(2)(x)
    x = layers.ReLU()(layers.BatchNormalization()(layers.Conv2D(32, 3, padding="same", use_bias=False)(x)))
    x = layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, layers.Dense(num_classes)(x))

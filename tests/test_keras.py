"""framework: keras (issue 43), step 1: the zoo's networks built from backend-agnostic Keras 3 layers
(trainables/keras/models.py), the same definitions trainables/tensorflow/models.py builds on TensorFlow's fused
batch norm. Parameter counts as the other frameworks' (tests/test_models.py: CASES), on each Keras backend here."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from test_models import BATCH, CASES

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Run in a fresh interpreter: KERAS_BACKEND is read once, when keras is first imported.
COUNT = """
import json, sys
import keras
from trainables.keras import models
out = {}
for name, size in json.loads(sys.argv[1]).items():
    model = models.build(name, size)
    x = keras.random.uniform((2, size, size, 3))
    logits = model(x, training=True)  # a training-mode forward pass: the batch norm's moments on this backend
    out[name] = [models.count_params(model), list(logits.shape), keras.backend.backend()]
print(json.dumps(out))
"""


def _counts(backend: str, cases: dict[str, tuple[int, int]]) -> dict[str, list]:
    env = dict(os.environ, KERAS_BACKEND=backend, PYTHONPATH=ROOT)
    sizes = {name: size for name, (size, _) in cases.items()}
    done = subprocess.run([sys.executable, "-c", COUNT, json.dumps(sizes)], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["tensorflow", "torch", "jax"])
def test_parameter_counts_match_the_other_frameworks(backend: str) -> None:
    if importlib.util.find_spec({"torch": "torch"}.get(backend, backend)) is None:
        pytest.skip(f"{backend} is not installed in this environment (framework: keras on {backend} needs it)")
    counts = _counts(backend, CASES)
    for name, (_, expected) in CASES.items():
        count, shape, ran_on = counts[name]
        assert ran_on == backend
        assert count == expected, name
        assert shape == [2, 10], name


def test_agnostic_layers_compute_as_the_fused_ones() -> None:
    """The backend-agnostic batch norm and shortcut give the TensorFlow-fused model's outputs, in training mode
    (batch moments) and after it (moving statistics): one network, the two parts swapped."""
    import keras

    from trainables.keras import models as keras_models
    from trainables.tensorflow import models as tf_models

    name, (size, expected) = "resnet8_cifar", CASES["resnet8_cifar"]
    keras.utils.set_random_seed(0)
    fused, plain = tf_models.build(name, size), keras_models.build(name, size)
    assert int(fused.count_params()) == keras_models.count_params(plain) == expected
    plain.set_weights(fused.get_weights())  # same layers made in the same order: the weights line up
    x = np.random.default_rng(0).random((BATCH, size, size, 3), dtype=np.float32)
    np.testing.assert_allclose(np.asarray(plain(x, training=True)), np.asarray(fused(x, training=True)), atol=1e-4)
    for a, b in zip(plain.get_weights(), fused.get_weights()):  # moving statistics updated alike
        np.testing.assert_allclose(a, b, atol=1e-5)
    np.testing.assert_allclose(np.asarray(plain(x, training=False)), np.asarray(fused(x, training=False)), atol=1e-4)

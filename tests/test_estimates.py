"""The estimator's arithmetic on given measurements (the store's side, with runs the engine made: test_plan.py)."""
from __future__ import annotations

import statistics

import pytest

from sweep.estimates import CostFit, Estimator, Hardware, History, Measurement, model_cost
from trainables.config import TrialConfig

CPU = Hardware("cpu-emulated", "Intel(R) Xeon(R) Processor")
H100 = Hardware("gpu", "NVIDIA H100 80GB HBM3")


def config(gpus: int = 1, batch: int = 32, framework: str = "mxnet", **more) -> TrialConfig:
    return TrialConfig(framework, "resnet20_cifar", num_gpus=gpus, batch_per_gpu=batch, epochs=2, lr=0.1,
                       steps_per_epoch=10, **more)


def measured(c: TrialConfig, wall: float, train: float | None, hardware: Hardware = CPU, run: str = "r1") -> Measurement:
    return Measurement(c, "s", run, 0.0, hardware, wall, train)


def test_hardware_names_agree_word_for_word() -> None:
    assert Hardware("gpu", "H100").matches(H100) and H100.matches(Hardware("gpu", "H100"))
    assert not Hardware("gpu", "A10").matches(Hardware("gpu", "NVIDIA A100-SXM4-80GB"))  # not a prefix match
    assert not H100.matches(CPU) and Hardware("cpu-emulated", None).matches(CPU)


def test_a_measured_trial_is_its_median_and_its_spread() -> None:
    c = config()
    estimator = Estimator(History([measured(c, w, None, run=f"r{i}") for i, w in enumerate([9.0, 10.0, 12.0])], []), CPU)
    guess = estimator.guess(c)
    assert (guess.seconds, guess.source, guess.runs) == (10.0, "measured", 3)
    assert guess.uncertainty == pytest.approx(0.2)  # max |x - median| / median
    # Another hardware's runs count for nothing here.
    assert Estimator(History([measured(c, 10.0, 8.0, H100)], []), CPU).guess(c).source == "none"


def test_an_unmeasured_trial_is_the_model_at_the_measured_rate_plus_its_frameworks_overhead() -> None:
    small, big = config(batch=16), config(batch=64)
    rate = 4.0 / model_cost(small)  # 4 s of training, 2 s beyond it (start-up, validation)
    found = [measured(small, 6.0, 4.0), measured(big, 2.0 + rate * model_cost(big), rate * model_cost(big))]
    fit = CostFit.of(found)
    assert fit.rate(small) == (pytest.approx(rate), ("mxnet", "tf32", False)) and fit.overhead == {"mxnet": pytest.approx(2.0)}
    estimator = Estimator(History(found, []), CPU)
    middle = config(batch=32)
    guess = estimator.guess(middle)
    assert guess.source == "model" and guess.seconds == pytest.approx(2.0 + rate * model_cost(middle))
    assert guess.uncertainty == pytest.approx(0.0)  # each of the two predicted from the other: exact here
    # A framework never measured here: its start-up is unknown, and so is the error.
    other = estimator.guess(config(batch=32, framework="tensorflow"))
    assert other.source == "model" and other.uncertainty is None and "none of them tensorflow" in other.basis


def test_the_models_error_is_measured_leaving_each_trial_out() -> None:
    a, b, c = config(batch=16), config(batch=32), config(batch=64)
    # Training time proportional to the cost, but the middle trial took twice as long as the others say.
    rate = 1.0 / model_cost(a)
    found = [measured(t, 1.0 + rate * model_cost(t) * k, rate * model_cost(t) * k) for t, k in ((a, 1), (b, 2), (c, 1))]
    estimator = Estimator(History(found, []), CPU)
    assert estimator.model_error is not None and estimator.model_error > 0.2


def test_precisions_and_compilers_are_timed_at_their_own_rates() -> None:
    # On one GPU an fp16 trial trained 2.5x as fast as its tf32 twin, and tf32 compiled 1.5x: an unmeasured trial
    # (another batch, so another id) of each is timed at its own rate, not at the rate of all trials.
    tf = dict(framework="tensorflow")
    base = 10.0 / model_cost(config(batch=16, **tf))  # 10 s of training, 3 s beyond it
    rates = {config(batch=16, **tf): base, config(batch=32, **tf): base, config(batch=16, precision="fp16", **tf): base / 2.5,
             config(batch=16, compile=True, **tf): base / 1.5, config(batch=16, framework="pytorch"): base * 0.8}
    found = [measured(c, 3.0 + r * model_cost(c), r * model_cost(c), H100) for c, r in rates.items()]
    estimator = Estimator(History(found, []), H100)
    for twin, rate in ((dict(), base), (dict(precision="fp16"), base / 2.5), (dict(compile=True), base / 1.5)):
        trial = config(batch=64, **tf, **twin)
        guess = estimator.guess(trial)
        assert guess.source == "model" and guess.seconds == pytest.approx(3.0 + rate * model_cost(trial)), twin
        assert "none of them" not in guess.basis and guess.uncertainty == pytest.approx(0.0)
    # The model's error is measured on the tf32 pair alone, each predicted from the other at tf32's rate: an
    # fp16 trial left out would be predicted at another arithmetic's rate, an error no estimate above makes.
    assert estimator.model_error == pytest.approx(0.0)
    assert Estimator(History([m for m in found if m.config.batch_per_gpu == 16], []), H100).model_error is None
    # fp16 measured in TensorFlow only: a PyTorch fp16 trial at fp16's rate, said so, its error unknown.
    torch_fp16 = config(batch=64, framework="pytorch", precision="fp16")
    guess = estimator.guess(torch_fp16)
    assert guess.seconds == pytest.approx(3.0 + base / 2.5 * model_cost(torch_fp16)) and guess.uncertainty is None
    assert "none of them pytorch fp16: at the rate of fp16" in guess.basis
    # bf16 never measured here: the rate of every trial (the median of the four), said so.
    bf16 = config(batch=64, precision="bf16", **tf)
    guess = estimator.guess(bf16)
    every = statistics.median(rates.values())
    assert guess.seconds == pytest.approx(3.0 + every * model_cost(bf16)) and guess.uncertainty is None
    assert "none of them tensorflow bf16: at the rate of every trial" in guess.basis

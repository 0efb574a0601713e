"""The model zoo's names and shapes, known without importing a framework.

Both framework folders build every model listed here, layer for layer the same, so one name means
one architecture (and one parameter count) whichever framework trains it.
"""
from __future__ import annotations

import importlib
import re
from dataclasses import dataclass

from trainables.failure import first_line

# name -> default input side (pixels). CIFAR ResNets are written resnet<depth>_cifar (v1, as
# tf_cnn_benchmarks' resnet<depth>) or resnet<depth>_cifar_v2 (pre-activation, as MXNet's
# train_cifar10.py --network resnet, seed 001), depth = 6n+2 (v2: below 164, where MXNet's symbol
# switches to bottleneck units).
FIXED_MODELS: dict[str, int] = {
    "resnet50_v1": 224,   # ImageNet-style ResNet-50 v1 (seeds 000, 004)
    "inception_v3": 299,  # seeds 000 (CIFAR-10 resized to 299x299), 004
    "cifar10_conv": 32,   # Neon's examples/cifar10_conv.py convnet (seed 002)
    "alexnet": 224,       # seed 003
}
# Models whose source initialises every weight Uniform(-a, a): name -> a. The others start from He
# et al.'s gaussian (std sqrt(2 / fan_in)), as MXNet's and tf_cnn_benchmarks' scripts do. Neon's
# cifar10_conv example uses Uniform(-0.1, 0.1) (with lr 0.01, momentum 0.9 at batch 128); this bias-free
# ReLU net under He's init at the seed's lr 0.05-0.1 dies (every ReLU off: loss ln 10, uniform
# predictions; benchmarks/cifar10_conv_collapse.py measures it).
UNIFORM_INIT: dict[str, float] = {"cifar10_conv": 0.1}
CIFAR_RESNET = re.compile(r"^resnet(\d+)_cifar(_v2)?$")

NUM_CLASSES = 10


def cifar_resnet_units(name: str) -> int | None:
    """Residual units per stage of resnet<depth>_cifar[_v2] (depth = 6n+2), None if not such a name."""
    match = CIFAR_RESNET.match(name)
    if not match:
        return None
    depth = int(match.group(1))
    if depth < 8 or (depth - 2) % 6 or (match.group(2) and depth >= 164):
        return None
    return (depth - 2) // 6


def is_preact(name: str) -> bool:
    """A pre-activation (v2) CIFAR ResNet."""
    return cifar_resnet_units(name) is not None and name.endswith("_v2")


def is_model(name: str) -> bool:
    return name in FIXED_MODELS or cifar_resnet_units(name) is not None


def default_image_size(name: str) -> int:
    """The input side a trial of this model trains at where image_size is unset: the engine's zoo's own, a zoo
    model's own (ZOO_SIZES, else ZOO_SIZE), and 32 (CIFAR-10's) for the rest (a network of the user's own)."""
    found = named(name)
    if found is not None and found.zoo:
        return ZOO_SIZES.get(name, ZOO_SIZE)
    return FIXED_MODELS.get(name, 32)


def model_names_help() -> str:
    return (", ".join(sorted(FIXED_MODELS)) + ", resnet<6n+2>_cifar (resnet20_cifar, resnet110_cifar, ...), "
            "resnet<6n+2>_cifar_v2 (depth < 164), a zoo's (torchvision:NAME, timm:NAME, keras:NAME, gluon:NAME) "
            "or your own network, MODULE:FUNCTION (docs/models.md)")


# Models named outside the engine's zoo (docs/models.md): a zoo of a framework's ecosystem by its prefix,
# or a network of the user's own as MODULE:FUNCTION. zoo prefix -> the framework whose trials can train it.
ZOOS: dict[str, str] = {"torchvision": "pytorch", "timm": "pytorch", "keras": "tensorflow", "gluon": "mxnet"}
ZOO_PACKAGES = {"torchvision": "torchvision.models", "timm": "timm", "keras": "keras.applications",
                "gluon": "mxnet.gluon.model_zoo.vision"}  # what each zoo's name is looked up in
ZOO_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")  # gluon's names have dots (mobilenet1.0)
MODULE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
FUNCTION = re.compile(r"^[A-Za-z_]\w*$")
# Default input sides of zoo models whose own is not 224 (the input size each was designed for).
ZOO_SIZES = {"keras:InceptionV3": 299, "keras:InceptionResNetV2": 299, "keras:Xception": 299, "keras:NASNetLarge": 331,
             **{f"keras:EfficientNetB{i}": s for i, s in enumerate((224, 240, 260, 300, 380, 456, 528, 600))},
             "keras:EfficientNetV2B1": 240, "keras:EfficientNetV2B2": 260, "keras:EfficientNetV2B3": 300,
             "keras:EfficientNetV2S": 384, "keras:EfficientNetV2M": 480, "keras:EfficientNetV2L": 480,
             "gluon:inceptionv3": 299, "torchvision:inception_v3": 299}
ZOO_SIZE = 224  # every other zoo model's (ImageNet's crop); timm's models that need another are refused at the check


@dataclass(frozen=True)
class Named:
    """A model named outside the engine's zoo: `zoo:NAME` (source a key of ZOOS) or `MODULE:FUNCTION` (code)."""

    source: str  # the zoo, or the module to import
    name: str  # the zoo's model name, or the function in the module
    zoo: bool  # a zoo of ZOOS, else the user's own code

    @property
    def text(self) -> str:
        return f"{self.source}:{self.name}"


class ModelError(Exception):
    """A named model that the loop cannot train, said in one line (the framework check refuses it, before any
    trial). known: for an unknown zoo name, the zoo's names, from which the driver picks the close ones."""

    def __init__(self, message: str, known: list[str] | None = None) -> None:
        super().__init__(message)
        self.known = known


def named(name: str) -> Named | None:
    """The model `name` as a zoo's or the user's own; None for the engine's zoo's names and for what is neither."""
    if is_model(name) or name.count(":") != 1:
        return None
    source, _, function = name.partition(":")
    if source in ZOOS:
        return Named(source, function, True) if ZOO_NAME.match(function) else None
    return Named(source, function, False) if MODULE.match(source) and FUNCTION.match(function) else None


def is_known_form(name: str) -> bool:
    """A name the model setting takes: the engine's zoo's, `zoo:NAME`, or `MODULE:FUNCTION`."""
    return is_model(name) or named(name) is not None


def model_framework_problem(name: str, framework: str) -> str | None:
    """Why a zoo model cannot be a trial of this framework (torchvision's are PyTorch modules), or None."""
    found = named(name)
    if found and found.zoo and ZOOS[found.source] != framework:
        return (f"{name} is from {found.source}'s zoo ({ZOO_PACKAGES[found.source]}), which {ZOOS[found.source]} "
                f"trains, not {framework}")
    return None


def user_builder(found: Named):
    """The function a `MODULE:FUNCTION` model names, imported (which runs the module); ModelError if it is not there."""
    try:
        module = importlib.import_module(found.source)
    except ModuleNotFoundError as e:
        if e.name and (found.source == e.name or found.source.startswith(e.name + ".")):  # the module or its package
            raise ModelError(f"model {found.text}: no module named {e.name} on the trial's path "
                             "(PYTHONPATH, or a folder given with --code DIR)") from None
        # A module that the user's module imports is missing: its own words say which.
        raise ModelError(f"model {found.text}: importing {found.source} failed: {type(e).__name__}: {e}") from None
    except Exception as e:  # noqa: BLE001 - the user's module, whatever it raised, in one line
        raise ModelError(f"model {found.text}: importing {found.source} failed: {type(e).__name__}: "
                         f"{first_line(str(e))}") from None
    function = getattr(module, found.name, None)
    if not callable(function):
        known = [n for n, v in vars(module).items() if callable(v) and not n.startswith("_")]
        raise ModelError(f"model {found.text}: {found.source} has no function {found.name}", known)
    return function


def call_builder(found: Named, function, **kwargs):
    """function(**kwargs): the model; whatever it raises is a ModelError of one line."""
    try:
        return function(**kwargs)
    except Exception as e:  # noqa: BLE001
        raise ModelError(f"model {found.text}: building it raised {type(e).__name__}: {first_line(str(e))[:300]}") from None


def not_a_model(found: Named, got: object, expected: str) -> ModelError:
    return ModelError(f"model {found.text}: {found.name} returned {type(got).__module__}.{type(got).__qualname__}, "
                      f"not {expected}")


def check_logits(found: Named, shape: tuple[int, ...], batch: int, num_classes: int, image_size: int) -> None:
    """A model's output for `batch` images must be (batch, num_classes) logits."""
    if tuple(shape) != (batch, num_classes):
        raise ModelError(f"model {found.text}: its output for {batch} images of {image_size}x{image_size} has shape "
                         f"{tuple(shape)}; the loop needs ({batch}, {num_classes}): one logit per class")

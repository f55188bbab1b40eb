"""Model registry. Every classifier's ``forward`` returns ``(features, logits)`` and has a
``feature_dim`` attribute; generators (kind :data:`GENERATOR`) map noise and labels to samples.

Register an architecture with :func:`register_model`; build it with :func:`build_model`, which
initialises its weights from a named RNG stream so two builds with the same seed are identical.
:func:`assign_architectures` draws heterogeneous clients' architectures; :mod:`bench.models.inventory`
describes every model (parameters, FLOPs) for ``bench models``.
"""
from bench.models.registry import (CLASSIFIER, GENERATOR, ExampleInput, ModelEntry, assign_architectures, build_model,
                                   count_parameters, get_model_entry, model_names, register_model)
from bench.models import (baselines, convnets, discriminators, generators, multitask_resnet, resnet_cifar,  # noqa: F401
                          small, torchvision_backbones, wide_resnet)  # (registers them)

__all__ = ["register_model", "build_model", "model_names", "get_model_entry", "count_parameters",
           "assign_architectures", "ModelEntry", "ExampleInput", "CLASSIFIER", "GENERATOR"]

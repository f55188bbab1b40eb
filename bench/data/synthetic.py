"""Fabricated datasets for runs at real shapes where the real datasets cannot be had.

``synthetic32``: 3x32x32 images in 10 classes, the shape of SVHN and CIFAR-10 (smoke runs of the
paper pipelines at their real shapes and models); ``synthetic28s``: 600 / 200 such 1x28x28 images (the
FedAKD pipeline's smoke runs at FashionMNIST's shape). ``synthetic28``: 1x28x28 images in 10 classes, the
shape of MNIST, sized for the workload shared with PFLlib and FL-bench (20 clients x 600 train images,
a 25 % test split: ``benchmarks/test_shared_workload.py``). ``synthetic84``: 3x84x84 images in 2 classes,
the shape of LEAF CelebA (FedAL's CNN; ``bench suite cost`` measures CelebA's steps on it).

Each class is a fixed random pattern plus per-image noise, drawn from a fixed seed (the stream named
after the dataset), so the data are identical everywhere and learnable but not trivial.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from bench.data.registry import DatasetSpec, register_dataset
from bench.data.prepared import PreparedDataset
from bench.rng import numpy_stream

SEED = 0
NUM_TRAIN, NUM_TEST, NUM_CLASSES = 400, 200, 10
NUM_TRAIN_28, NUM_TEST_28 = 12_000, 4_000
NUM_TRAIN_84, NUM_TEST_84 = 200, 100
NUM_TRAIN_28S, NUM_TEST_28S = 600, 200


def fabricate(name: str, shape: tuple[int, int, int], num_train: int, num_test: int,
              num_classes: int = NUM_CLASSES) -> PreparedDataset:
    """``num_train`` / ``num_test`` images of ``shape`` (labels cycling through the classes): a class's
    pattern U(40, 215) per pixel plus N(0, 60) noise per image, rounded and clipped to uint8."""
    rng = numpy_stream(SEED, name)
    patterns = rng.uniform(40, 215, size=(num_classes, *shape))

    def split(n: int) -> tuple[np.ndarray, np.ndarray]:
        labels = np.arange(n, dtype=np.int64) % num_classes
        images = patterns[labels] + rng.normal(0, 60, size=(n, *shape))
        return np.clip(np.rint(images), 0, 255).astype(np.uint8), labels

    train_x, train_y = split(num_train)
    test_x, test_y = split(num_test)
    mean = tuple(round(float(m), 6) for m in train_x.mean(axis=(0, 2, 3)) / 255)
    std = tuple(round(float(s), 6) for s in train_x.std(axis=(0, 2, 3)) / 255)
    return PreparedDataset(name=name, train_x=train_x, train_y=train_y, test_x=test_x, test_y=test_y,
                           num_classes=num_classes, mean=mean, std=std, source={"origin": "fabricated", "seed": SEED})


def prepare_synthetic32(data_dir: Path) -> PreparedDataset:
    return fabricate("synthetic32", (3, 32, 32), NUM_TRAIN, NUM_TEST)


def prepare_synthetic28(data_dir: Path) -> PreparedDataset:
    return fabricate("synthetic28", (1, 28, 28), NUM_TRAIN_28, NUM_TEST_28)


def prepare_synthetic84(data_dir: Path) -> PreparedDataset:
    return fabricate("synthetic84", (3, 84, 84), NUM_TRAIN_84, NUM_TEST_84, num_classes=2)


SYNTHETIC32 = register_dataset(DatasetSpec(
    name="synthetic32", num_classes=NUM_CLASSES, image_shape=(3, 32, 32), num_train=NUM_TRAIN, num_test=NUM_TEST,
    prepare=prepare_synthetic32, embedded=True,
    description="fabricated 3x32x32 images, 10 classes (smoke runs at SVHN/CIFAR shapes), embedded"))

def prepare_synthetic28s(data_dir: Path) -> PreparedDataset:
    return fabricate("synthetic28s", (1, 28, 28), NUM_TRAIN_28S, NUM_TEST_28S)


SYNTHETIC28S = register_dataset(DatasetSpec(
    name="synthetic28s", num_classes=NUM_CLASSES, image_shape=(1, 28, 28), num_train=NUM_TRAIN_28S,
    num_test=NUM_TEST_28S, prepare=prepare_synthetic28s, embedded=True,
    description="fabricated 1x28x28 images, 10 classes, small (smoke runs at FashionMNIST's shape), embedded"))

SYNTHETIC28 = register_dataset(DatasetSpec(
    name="synthetic28", num_classes=NUM_CLASSES, image_shape=(1, 28, 28), num_train=NUM_TRAIN_28,
    num_test=NUM_TEST_28, prepare=prepare_synthetic28, embedded=True,
    description="fabricated 1x28x28 images, 10 classes (the MNIST-shaped workload shared with PFLlib and "
                "FL-bench), embedded"))

SYNTHETIC84 = register_dataset(DatasetSpec(
    name="synthetic84", num_classes=2, image_shape=(3, 84, 84), num_train=NUM_TRAIN_84, num_test=NUM_TEST_84,
    prepare=prepare_synthetic84, embedded=True,
    description="fabricated 3x84x84 images, 2 classes (the shape of LEAF CelebA), embedded"))

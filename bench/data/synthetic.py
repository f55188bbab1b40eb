"""``synthetic32``: fabricated 3x32x32 images in 10 classes, the shape of SVHN and CIFAR-10.

For smoke runs of the paper pipelines at their real shapes and models where the real datasets
cannot be had. Each class is a fixed random colour pattern plus per-image noise, drawn from a
fixed seed, so the data are identical everywhere and learnable but not trivial.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from bench.data.registry import DatasetSpec, register_dataset
from bench.data.prepared import PreparedDataset
from bench.rng import numpy_stream

SEED = 0
NUM_TRAIN, NUM_TEST, NUM_CLASSES = 400, 200, 10


def prepare_synthetic32(data_dir: Path) -> PreparedDataset:
    rng = numpy_stream(SEED, "synthetic32")
    patterns = rng.uniform(40, 215, size=(NUM_CLASSES, 3, 32, 32))

    def split(n: int) -> tuple[np.ndarray, np.ndarray]:
        labels = np.arange(n, dtype=np.int64) % NUM_CLASSES
        images = patterns[labels] + rng.normal(0, 60, size=(n, 3, 32, 32))
        return np.clip(np.rint(images), 0, 255).astype(np.uint8), labels

    train_x, train_y = split(NUM_TRAIN)
    test_x, test_y = split(NUM_TEST)
    mean = tuple(round(float(m), 6) for m in train_x.mean(axis=(0, 2, 3)) / 255)
    std = tuple(round(float(s), 6) for s in train_x.std(axis=(0, 2, 3)) / 255)
    return PreparedDataset(name="synthetic32", train_x=train_x, train_y=train_y, test_x=test_x, test_y=test_y,
                           num_classes=NUM_CLASSES, mean=mean, std=std,
                           source={"origin": "fabricated", "seed": SEED})


SYNTHETIC32 = register_dataset(DatasetSpec(
    name="synthetic32", num_classes=NUM_CLASSES, image_shape=(3, 32, 32), num_train=NUM_TRAIN, num_test=NUM_TEST,
    prepare=prepare_synthetic32, embedded=True,
    description="fabricated 3x32x32 images, 10 classes (smoke runs at SVHN/CIFAR shapes), embedded"))

"""The embedded dataset: scikit-learn's bundled handwritten digits (1,797 8x8 images, 10 classes).

Pixels (0..16) are rescaled to uint8 0..255; a fixed stratified 75/25 train/test split
(``random_state=0``) gives 1,347 train and 450 test images.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from bench.data.registry import DatasetSpec, register_dataset
from bench.data.prepared import PreparedDataset

SPLIT_SEED = 0
TEST_FRACTION = 0.25


def prepare_digits(data_dir: Path) -> PreparedDataset:
    import sklearn
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    bunch = load_digits()
    images = np.rint(bunch.images * (255.0 / 16.0)).astype(np.uint8)[:, None]  # N x 1 x 8 x 8
    labels = bunch.target.astype(np.int64)
    train_idx, test_idx = train_test_split(np.arange(len(labels)), test_size=TEST_FRACTION,
                                           stratify=labels, random_state=SPLIT_SEED)
    train_idx, test_idx = np.sort(train_idx), np.sort(test_idx)
    train_x = images[train_idx]
    mean = float(train_x.mean() / 255.0)
    std = float(train_x.std() / 255.0)
    return PreparedDataset(name="digits", train_x=train_x, train_y=labels[train_idx],
                           test_x=images[test_idx], test_y=labels[test_idx], num_classes=10,
                           mean=(round(mean, 6),), std=(round(std, 6),),
                           source={"origin": "sklearn.datasets.load_digits", "sklearn": sklearn.__version__,
                                   "split_seed": SPLIT_SEED, "test_fraction": TEST_FRACTION})


DIGITS = register_dataset(DatasetSpec(
    name="digits", num_classes=10, image_shape=(1, 8, 8), num_train=1347, num_test=450,
    prepare=prepare_digits, embedded=True,
    description="scikit-learn handwritten digits, 8x8 grey, embedded (no download)"))

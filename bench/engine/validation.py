"""The server's validation set, assembled from the clients' data: what the collaborative-fairness methods
(CFFL, CGSV, FedAVE, FedSAC) score contributions and neurons on (pipelines/fedakd/NOTES.md §2.5). The server holds it
from the start, as a method's public set: it is not sent in any round (``Context.server_validation``)."""
from __future__ import annotations

from typing import Literal

import torch

from bench.engine.state import ClientData
from bench.errors import BenchError

ValidationSource = Literal["split", "head", "stored"]


def server_validation(clients: list[ClientData], source: ValidationSource,
                      fraction: float = 0.1) -> tuple[torch.Tensor, torch.Tensor]:
    """The union, in the given (client-id) order, of every client's validation split (``split``: held out of training,
    ``partition.validation_fraction``), or of the first ``⌊fraction·n_k⌋`` samples of each client's train
    split (``head``: the clients also train on it), or of the first ``⌊fraction·n_k⌋`` of all each client's local
    data, train and local test splits together in the order its partition stores them (``stored``: the released
    code's "public validation set" ``data[:int(0.1·n_k)]`` taken before the 80/20 split, so it holds some of the
    client's test images: leakage, §2.5 [C], D18)."""
    xs, ys = [], []
    for data in clients:
        if source == "split":
            if data.val_x is None or data.val_y is None:
                raise BenchError("this method scores clients on the validation splits; set "
                                 "partition.validation_fraction > 0 (e.g. 0.1), or use its released-code "
                                 "validation (validation: head)")
            xs.append(data.val_x)
            ys.append(data.val_y)
        elif source == "head":
            count = int(fraction * data.num_samples)
            xs.append(data.x[:count])
            ys.append(data.y[:count])
        else:
            if data.stored_order is None:
                raise BenchError("validation: stored takes each client's stored data, train and local test together, "
                                 "so its local test split must come from the train split; use validation: head")
            x, y = data.with_test
            chosen = data.stored_order[: int(fraction * len(y))]
            xs.append(x[chosen])
            ys.append(y[chosen])
    return torch.cat(xs), torch.cat(ys)

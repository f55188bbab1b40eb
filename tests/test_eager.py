"""The engine's optimiser step is ``optimizer.step()`` bit for bit, and a run never imports torch's
compiler (``torch._dynamo``, 0.5-1 s of every process; bench/engine/eager.py)."""
from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable

import pytest
import torch

from bench.engine import eager

OPTIMIZERS: dict[str, Callable[[list[torch.nn.Parameter]], torch.optim.Optimizer]] = {
    "sgd": lambda p: torch.optim.SGD(p, lr=0.05),
    "sgd momentum, weight decay": lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=1e-3),
    "sgd nesterov": lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, nesterov=True),
    "adam": lambda p: torch.optim.Adam(p, lr=1e-3),
    "adam weight decay, amsgrad": lambda p: torch.optim.Adam(p, lr=1e-3, weight_decay=1e-2, amsgrad=True),
}


def _train(make: Callable[[list[torch.nn.Parameter]], torch.optim.Optimizer],
           step: Callable[[torch.optim.Optimizer], None]) -> tuple[list[torch.Tensor], dict]:
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3))
    model.load_state_dict({k: torch.linspace(-1, 1, v.numel()).reshape(v.shape) for k, v in model.state_dict().items()})
    optimizer = make(list(model.parameters()))
    gen = torch.Generator().manual_seed(3)
    for _ in range(7):
        x, y = torch.randn(8, 6, generator=gen), torch.randint(0, 3, (8,), generator=gen)
        for p in model.parameters():
            p.grad = None
        torch.nn.functional.cross_entropy(model(x), y).backward()
        step(optimizer)
    return [p.detach().clone() for p in model.parameters()], optimizer.state_dict()


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_eager_step_is_optimizer_step_bit_for_bit(name: str) -> None:
    params, state = _train(OPTIMIZERS[name], eager.step)
    reference, reference_state = _train(OPTIMIZERS[name], lambda o: o.step())
    assert all(torch.equal(a, b) for a, b in zip(params, reference))
    flat = [v for s in state["state"].values() for v in s.values()]  # momentum, Adam's moments and step
    reference_flat = [v for s in reference_state["state"].values() for v in s.values()]
    assert len(flat) == len(reference_flat)
    assert all(torch.equal(a, b) for a, b in zip(flat, reference_flat))


def test_a_registered_step_hook_is_still_called() -> None:
    calls = []
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    optimizer.register_step_post_hook(lambda *_: calls.append(1))
    model(torch.ones(1, 2)).sum().backward()
    eager.step(optimizer)
    assert calls == [1]


RUN_WITHOUT_COMPILER = """
import sys
from bench.experiment import build_config
from bench.runner.checkpoint import EVERY_ROUND
from bench.runner.executor import RunRequest, run_experiment
for optimizer in ("sgd", "adam"):
    config = build_config({"training": {"rounds": 2, "optimizer": {"name": optimizer, "momentum": 0.0},
                                        "grad_clip": 1.0}, "tracking": {"mlflow": False}})
    run_experiment(RunRequest(config, sys.argv[1] + optimizer, sys.argv[2], checkpoint=EVERY_ROUND))
print("torch._dynamo" in sys.modules)
import torch._dynamo  # once imported (something compiles), the optimisers are torch's own again
torch.optim.SGD(torch.nn.Linear(2, 1).parameters(), lr=0.1)
print(torch.optim.Optimizer.add_param_group.__wrapped__.__dynamo_disable.__module__)
"""


def test_a_run_never_imports_the_compiler_and_torch_takes_over_once_it_is_imported(data_dir, tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = subprocess.run([sys.executable, "-c", RUN_WITHOUT_COMPILER, str(tmp_path / "run-"), str(data_dir)],
                         capture_output=True, text=True, check=True).stdout.split()
    assert out[0] == "False"
    assert out[1].startswith("torch._dynamo")  # torch's disabled function, no longer bench's stand-in

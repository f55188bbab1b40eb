"""MOON and FedAlign (pipelines/fedhkd/NOTES.md §4): the loss pieces against hand computations, the width-sliced
final block, and short digits runs that learn and repeat bitwise."""
from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from bench.algorithms.fedalign import (FedAlign, FedAlignParams, fedalign_backward, lipschitz, sqrt_top_eigenvalue,
                                       transmitting_matrix)
from bench.algorithms.moon import Moon, contrastive_loss
from bench.data import load_dataset
from bench.engine.context import Context
from bench.engine.loop import Step
from bench.runner.federation import run_federation, to_tensor
from bench.engine.state import Client, ClientData
from bench.errors import BenchError
from bench.models import build_model
from bench.models.slimmable import BNStats, capture_block_io, final_block, slim_forward
from tests.conftest import small_config


def _state_equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# --------------------------------------------------------------------------- MOON

def test_contrastive_loss_by_hand() -> None:
    z = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    z_glob = torch.tensor([[1.0, 1.0], [0.0, 1.0]])
    z_prev = torch.tensor([[0.0, 3.0], [1.0, 1.0]])
    tau = 0.5
    # sample 1: cos(z, glob) = 1/√2, cos(z, prev) = 0; sample 2: cos(z, glob) = 1, cos(z, prev) = 1/√2
    pairs = [(1 / math.sqrt(2), 0.0), (1.0, 1 / math.sqrt(2))]
    expected = sum(-math.log(math.exp(p / tau) / (math.exp(p / tau) + math.exp(n / tau))) for p, n in pairs) / 2
    assert contrastive_loss(z, z_glob, z_prev, tau).item() == pytest.approx(expected, rel=1e-6)


def test_moon_previous_model_is_global_at_round_one_then_the_last_local_model(data_dir: Path) -> None:
    cfg = small_config(algorithm={"name": "moon"})
    data = load_dataset("digits", data_dir)
    ctx = Context(cfg, data.image_shape, data.num_classes, torch.device("cpu"))
    moon = Moon(Moon.Params(), ctx)
    server = moon.init_server()
    x, y = to_tensor(data.train_x[:64], data, ctx.device), torch.from_numpy(data.train_y[:64])
    client = Client(0, ClientData(x, y, x, y), moon.init_client_model(0, server), moon.init_client_state(0))

    moon.receive_broadcast(client, moon.broadcast(1, server, 0))
    prev, glob = client.state.prev_model, client.state.global_model
    assert _state_equal(prev.state_dict(), glob.state_dict())
    assert not prev.training and not any(p.requires_grad for p in prev.parameters())
    # prev = glob, so the two similarities are equal and ℓ_con = log 2 whatever z is
    client.model.train()
    ce = nn.functional.cross_entropy(client.model(x)[1], y)
    assert (moon.local_loss(Step(1, 0), client, x, y) - ce).item() == pytest.approx(math.log(2), rel=1e-6)

    moon.local_update(1, client)
    assert client.state.prev_model is None  # the frozen copies live only during local training
    trained = {k: v.clone() for k, v in client.model.state_dict().items()}
    server.model = ctx.build_model("other")
    moon.receive_broadcast(client, moon.broadcast(2, server, 0))
    assert _state_equal(client.state.prev_model.state_dict(), trained)
    assert _state_equal(client.state.global_model.state_dict(), server.model.state_dict())


@pytest.mark.parametrize("frozen_mode", ["eval", "train"])
def test_moon_frozen_copies_run_in_the_frozen_mode(data_dir: Path, frozen_mode: str) -> None:
    """``eval``: the frozen global and previous copies normalise with BN running statistics (MOON's code); ``train``:
    with the batch's (FedAlign's port)."""
    cfg = small_config(algorithm={"name": "moon", "frozen_mode": frozen_mode})
    data = load_dataset("digits", data_dir)
    ctx = Context(cfg, data.image_shape, data.num_classes, torch.device("cpu"))
    moon = Moon(Moon.Params(frozen_mode=frozen_mode), ctx)
    server = moon.init_server()
    client = Client(0, ClientData(*(2 * (torch.zeros(1, *data.image_shape), torch.zeros(1, dtype=torch.long)))),
                    moon.init_client_model(0, server), moon.init_client_state(0))
    moon.receive_broadcast(client, moon.broadcast(1, server, 0))
    for copy_ in (client.state.prev_model, client.state.global_model):
        assert all(m.training == (frozen_mode == "train") for m in copy_.modules())


# --------------------------------------------------------------------------- FedAlign pieces

def test_power_iteration_matches_eigvalsh() -> None:
    gen = torch.Generator().manual_seed(0)
    q, _ = torch.linalg.qr(torch.randn(3, 5, 5, generator=gen, dtype=torch.float64))
    eig = torch.tensor([[9.0, 2.0, 1.0, 0.5, 0.1], [4.0, 1.0, 0.3, 0.2, 0.0], [1.0, 0.1, 0.1, 0.0, 0.0]],
                       dtype=torch.float64)
    k = q @ torch.diag_embed(eig) @ q.transpose(1, 2)
    expected = torch.linalg.eigvalsh(k)[:, -1].sqrt()
    assert torch.allclose(sqrt_top_eigenvalue(k, 10).flatten(), expected, rtol=1e-6)


def test_transmitting_matrix_shape_and_value() -> None:
    f_in, f_out = torch.randn(2, 256, 2, 2), torch.randn(2, 512, 1, 1)  # ResNet-18 layer4 on 32x32
    tm = transmitting_matrix(f_in, f_out)
    assert tm.shape == (2, 256, 512)
    assert torch.allclose(tm[1], f_in[1].mean((1, 2))[:, None] * f_out[1, :, 0, 0][None, :], atol=1e-6)
    assert transmitting_matrix(torch.randn(3, 4, 8, 8), torch.randn(3, 8, 8, 8)).shape == (3, 4, 8)


def test_transmitting_matrix_pools_each_axis_to_the_output_map() -> None:
    """A 4×2 input map pooled to the 2×1 output map: the window means are (1+2+3+4)/4 = 2.5 and (5+6+7+8)/4 = 6.5,
    so TM = (2.5·1 + 6.5·2)/(H·W = 2) = 7.75."""
    f_in = torch.arange(1.0, 9.0).reshape(1, 1, 4, 2)
    f_out = torch.tensor([1.0, 2.0]).reshape(1, 1, 2, 1)
    assert transmitting_matrix(f_in, f_out).item() == pytest.approx(7.75)


def test_lipschitz_runs_the_given_power_iterations() -> None:
    """One sample, 2 channels at 1×2 positions: TM = f_in·f_outᵀ/2 = diag(1, 1/2), K = diag(1, 1/4). One power step
    from the ones vector: K·1 = (1, 1/4), so the estimate is √‖K·1‖ = (1 + 1/16)^(1/4); ten steps reach TM's
    largest singular value, 1."""
    f_in = torch.tensor([[[[1.0, 0.0]], [[0.0, 1.0]]]])
    f_out = torch.tensor([[[[2.0, 0.0]], [[0.0, 1.0]]]])
    torch.testing.assert_close(transmitting_matrix(f_in, f_out)[0], torch.tensor([[1.0, 0.0], [0.0, 0.5]]))
    assert lipschitz(f_in, f_out, 1).item() == pytest.approx((17 / 16) ** 0.25, rel=1e-6)
    assert lipschitz(f_in, f_out, 10).item() == pytest.approx(1.0, abs=1e-6)

MODELS = [("cnn", (1, 8, 8)), ("fedhkd_resnet18", (3, 32, 32)), ("fedhkd_shufflenetv2", (3, 32, 32))]


def _block_input(name: str, shape: tuple[int, ...]) -> tuple[nn.Module, nn.Module, torch.Tensor]:
    model = build_model(name, shape, 10)
    block = final_block(model, name)
    with capture_block_io(block) as io, torch.no_grad():
        model(torch.randn(4, *shape, generator=torch.Generator().manual_seed(1)))
    return model, block, io["input"]


@pytest.mark.parametrize("name,shape", MODELS)
def test_full_width_slice_is_the_block(name: str, shape: tuple[int, ...]) -> None:
    model, block, f_in = _block_input(name, shape)
    with torch.no_grad():
        for m in block.modules():  # non-trivial running statistics
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-1, 1)
                m.running_var.uniform_(0.5, 2)
        model.eval()
        assert torch.allclose(slim_forward(block, f_in, 1.0, "running"), block(f_in), atol=1e-5)
        model.train()
        assert torch.allclose(slim_forward(block, f_in, 1.0, "batch"), block(f_in), atol=1e-5)


@pytest.mark.parametrize("name,shape", MODELS)
def test_sub_network_pass_keeps_bn_statistics(name: str, shape: tuple[int, ...]) -> None:
    model, block, f_in = _block_input(name, shape)
    model.train()
    before = {k: v.clone() for k, v in block.state_dict().items()}
    out = slim_forward(block, f_in[:, :math.ceil(0.25 * f_in.shape[1])], 0.25, "batch")
    assert _state_equal(block.state_dict(), before)
    with torch.no_grad():
        assert out.shape[1] == math.ceil(0.25 * block(f_in).shape[1])


def _digits_cnn_batch() -> tuple[nn.Module, nn.Module, torch.Tensor, torch.Tensor]:
    model = build_model("cnn", (1, 8, 8), 10)
    model.train()
    gen = torch.Generator().manual_seed(2)
    return model, final_block(model, "cnn"), torch.randn(8, 1, 8, 8, generator=gen), torch.arange(8)


def _ce_gradients(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
    _, logits = model(x)
    return list(torch.autograd.grad(F.cross_entropy(logits, y), list(model.parameters())))


def test_fedalign_at_full_width_adds_no_alignment_term() -> None:
    """At w = 1 with batch statistics the sub-network is the block itself (bitwise), so L_lip = 0: the batch adds
    no alignment term (not FedAlign's 0/0): the values are (L_CE, 0) and the gradients are CE's alone."""
    model, block, x, y = _digits_cnn_batch()
    reference = copy.deepcopy(model)
    ce, align = fedalign_backward(model, block, x, y, FedAlignParams(width=1.0, sub_bn="batch"))
    with capture_block_io(final_block(reference, "cnn")) as io:
        expected = _ce_gradients(reference, x, y)
    assert torch.equal(slim_forward(final_block(reference, "cnn"), io["input"], 1.0, "batch"), io["output"])
    assert align == 0.0 and ce == pytest.approx(F.cross_entropy(reference(x)[1], y).item())
    assert all(p.grad is not None and torch.equal(p.grad, g) for p, g in zip(model.parameters(), expected))


@pytest.mark.parametrize("sub_bn", ["batch", "running"])
def test_fedalign_gradient_is_ce_plus_mu_ce_over_lip_times_the_alignment_gradient(sub_bn: BNStats) -> None:
    """Step 4: ∇L_CE + μ·(L_CE/L_lip)·∇L_lip, L_lip = MSE(√λ_max at width w through the final block with the chosen
    BN statistics, √λ_max at full width, held fixed), both from the detached block input; μ = 0.45, w = 0.25
    (the digits cnn's final block: 4 of its 16 input channels)."""
    model, block, x, y = _digits_cnn_batch()
    reference = copy.deepcopy(model)
    params = FedAlignParams(sub_bn=sub_bn)
    ce, align = fedalign_backward(model, block, x, y, params)

    ref_block = final_block(reference, "cnn")
    with capture_block_io(ref_block) as io:
        g_ce = _ce_gradients(reference, x, y)
    f_in, f_out = io["input"].detach(), io["output"].detach()
    sub_out = slim_forward(ref_block, f_in[:, :4], 0.25, sub_bn)
    lip = F.mse_loss(lipschitz(f_in[:, :4], sub_out, 10), lipschitz(f_in, f_out, 10))
    g_lip = torch.autograd.grad(lip, list(reference.parameters()), allow_unused=True)
    scale = 0.45 * ce / lip.item()
    assert align == pytest.approx(0.45 * ce)
    for p, gc, gl in zip(model.parameters(), g_ce, g_lip):
        expected = gc if gl is None else gc + scale * gl
        torch.testing.assert_close(p.grad, expected, rtol=1e-4, atol=1e-6)
    assert any(gl is not None and gl.abs().sum() > 0 for gl in g_lip)  # the alignment term does move the block


def test_fedalign_rejects_a_model_without_final_block() -> None:
    with pytest.raises(BenchError, match="'mlp'"):
        final_block(build_model("mlp", (1, 8, 8), 10), "mlp")
    cfg = small_config(algorithm={"name": "fedalign"}, model={"name": "mlp"})
    with pytest.raises(BenchError, match="model 'mlp' defines no final_block"):  # before any training
        FedAlign(FedAlignParams(), Context(cfg, (1, 8, 8), 10, torch.device("cpu"))).init_server()


@pytest.mark.parametrize("name", ["fedhkd_resnet18", "fedhkd_shufflenetv2"])
def test_fedalign_step_on_paper_models(name: str) -> None:
    model = build_model(name, (3, 32, 32), 10)
    model.train()
    block = final_block(model, name)
    gen = torch.Generator().manual_seed(0)
    x, y = torch.randn(2, 3, 32, 32, generator=gen), torch.tensor([0, 1])
    params = FedAlignParams()
    ce, align = fedalign_backward(model, block, x, y, params)
    assert math.isfinite(ce) and align == pytest.approx(params.mu * ce, rel=1e-5)
    grads = [p.grad for p in block.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    before = [p.detach().clone() for p in model.parameters()]
    torch.nn.utils.clip_grad_norm_(model.parameters(), params.grad_clip)
    torch.optim.Adam(model.parameters(), lr=1e-3).step()
    assert any(not torch.equal(b, p) for b, p in zip(before, model.parameters()))


def test_fedalign_step_is_clipped_at_its_own_grad_clip_at_the_rounds_learning_rate(data_dir: Path) -> None:
    """One plain-SGD step of round 2 with lr 0.1 halved every round: the parameters move by lr·clip = 0.05 · 0.1 in
    norm, FedAlign's clip replacing ``training.grad_clip`` (5, which would not clip here)."""
    cfg = small_config(algorithm={"name": "fedalign", "grad_clip": 0.1},
                       training={"local_epochs": None, "local_steps": 1, "batch_size": 32, "grad_clip": 5.0,
                                 "optimizer": {"name": "sgd", "lr": 0.1}, "lr_decay": {"every": 1, "factor": 0.5}})
    data = load_dataset("digits", data_dir)
    ctx = Context(cfg, data.image_shape, data.num_classes, torch.device("cpu"))
    fedalign = FedAlign(FedAlignParams(grad_clip=0.1), ctx)
    server = fedalign.init_server()
    x, y = to_tensor(data.train_x[:32], data, ctx.device), torch.from_numpy(data.train_y[:32])
    client = Client(0, ClientData(x, y, x, y), fedalign.init_client_model(0, server), fedalign.init_client_state(0))
    before = torch.cat([p.detach().flatten().clone() for p in client.model.parameters()])
    fedalign.local_update(2, client)
    after = torch.cat([p.detach().flatten() for p in client.model.parameters()])
    assert (after - before).double().norm().item() == pytest.approx(0.05 * 0.1, rel=1e-3)


# --------------------------------------------------------------------------- runs

@pytest.mark.parametrize("method", ["moon", "fedalign"])
def test_digits_run_learns_and_repeats_bitwise(data_dir: Path, method: str) -> None:
    cfg = small_config(algorithm={"name": method})  # iid digits, 3 rounds
    first, second = run_federation(cfg, data_dir), run_federation(cfg, data_dir)
    assert first.curves[-1]["global_acc"] > 0.5  # chance is 0.1
    assert first.curves == second.curves
    assert _state_equal(first.state.server.model.state_dict(), second.state.server.model.state_dict())

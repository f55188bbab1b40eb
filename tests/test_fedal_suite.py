"""The FedAL paper module and pipeline: transcribed values, table columns and rows per profile, the
protocol of the paper profile, the claims on the paper's own tables, and the pipeline end to end at the
smoke profile with `dvc repro`."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from bench.suites import load_suite
from bench.suites.paper import Results
from bench.suites.plugins import import_paper_module
from tests.conftest import copy_pipeline, run_dvc

ROOT = Path(__file__).resolve().parents[1]
PARAMS = ROOT / "pipelines" / "fedal" / "params.yaml"
fedal = import_paper_module(PARAMS.with_name("paper.py"))
DEFINITION = fedal.PAPER.definition
PAPER_SETTINGS = ["svhn-a5", "svhn-a2", "svhn-a1", "svhn-a2-p200", "svhn-a2-p400", "svhn-a2-p600", "svhn-a2-p800",
                  "cifar10-a5", "cifar10-a2", "cifar10-a1", "cinic10-a5", "cinic10-a2", "cinic10-a1", "celeba-n20",
                  "celeba-n50", "celeba-n100", "wrn-svhn-a5", "wrn-svhn-a2", "wrn-svhn-a1", "mnist-a5", "mnist-a2",
                  "mnist-a1"]


def test_transcribed_tables_give_the_notes_derived_gaps() -> None:
    """§5.1 notes: FedAL − FedMD = +0.02/+0.02/+0.04 (SVHN, CINIC-10 at α = 5/2/1), +0.02/+0.04/+0.06 (CIFAR-10),
    +0.05/+0.05/+0.04 (CelebA N = 20/50/100); the three SVHN α = 2 entries of FedMD 0.73/0.722/0.70."""
    def gaps(columns: list[str]) -> list[float]:
        return [round(DEFINITION.value("fedal", c, "acc") - DEFINITION.value("fedmd_fedal", c, "acc"), 3)
                for c in columns]

    assert gaps(["svhn-a5", "svhn-a2", "svhn-a1"]) == [0.02, 0.02, 0.04]
    assert gaps(["cinic10-a5", "cinic10-a2", "cinic10-a1"]) == [0.02, 0.02, 0.04]
    assert gaps(["cifar10-a5", "cifar10-a2", "cifar10-a1"]) == [0.02, 0.04, 0.06]
    assert gaps(["celeba-n20", "celeba-n50", "celeba-n100"]) == [0.05, 0.05, 0.04]
    assert [DEFINITION.value("fedmd_fedal", c, "acc") for c in ("svhn-a2", "ablation-svhn-a2", "p1000")] == \
        [0.73, 0.722, 0.70]
    assert DEFINITION.value("cfd", "celeba-n100", "spread") == 0.17 and DEFINITION.value("fedal", "p200", "acc") == 0.43


def test_every_printed_cell_names_its_run_and_statistic() -> None:
    """Tables IV-IX: 6×3 + 6×3 + 3×3 + 4×3 + 3×1 + 2×5 = 70 cells of accuracy and 70 of ± (the figures' end
    points print none); each names (method, setting, statistic); Table VIII and IX's |P| = 1000 reuse svhn-a2."""
    printed = fedal.PAPER.printed()
    assert len([k for k, v in printed.values.items() if k[2] == "acc"]) == 70
    assert len([k for k in printed.values if k[2] == "spread"]) == 70
    column = printed.column("p1000")
    assert (column.table, column.setting, column.statistics["acc"].name) == ("table9", "svhn-a2",
                                                                             "final_client_global_acc")
    assert printed.column("ablation-svhn-a2").setting == "svhn-a2"
    assert column.statistics["spread"].name == "final_clientstd_client_global_acc"
    assert DEFINITION.rows("table8") == ["fedmd_fedal", "fedmd_lf", "fedal"]


def test_claims_on_the_papers_own_tables() -> None:
    """Every claim holds on the printed tables; the three on figures the paper prints no numbers for are not
    measured there."""
    claims = fedal.PAPER.claims(fedal.PAPER.printed())
    assert [c.holds for c in claims] == [True] * 10 + [None] * 5
    assert [c.evidence for c in claims[:10]] == ["12/12", "12/12", "3/3", "15/15", "2/2", "8/8", "5/5", "4/4", "3/3",
                                                 "4/4"]


def test_claims_fail_when_the_numbers_say_so() -> None:
    """The ablation ordering and the |P| trend as ours could contradict them."""
    printed = fedal.PAPER.printed()
    ours = Results(DEFINITION, list(DEFINITION.methods), printed.columns, dict(printed.values))
    ours.values["fedmd_lf", "ablation-svhn-a2", "acc"] = 0.80  # above FedAL
    ours.values["fedal", "p600", "acc"] = 0.50  # below |P| = 400
    outcome = {c.text.split(" (")[0]: (c.holds, c.evidence) for c in fedal.PAPER.claims(ours)}
    assert outcome["Ablation ordering: FedAL > FedMD-LF > FedMD"] == (
        False, "1/2; not held: FedAL @ SVHN α=2 (ablation) 0.7440 vs FedMD-LF @ SVHN α=2 (ablation) 0.8000")
    assert outcome["Accuracy rises with the public-set size: FedMD's and FedAL's, at every step of Table IX"] == \
        (False, "7/8; not held: FedAL @ public set 600 0.5000 vs FedAL @ public set 400 0.5700")


def test_ranks_are_among_the_rows_of_each_table() -> None:
    """Table VIII ranks FedAL among its three rows; the ± over clients is not ranked."""
    printed = fedal.PAPER.printed()
    assert printed.rank("fedal", printed.column("ablation-svhn-a2"), "acc") == 1
    assert printed.rank("fedmd_fedal", printed.column("ablation-svhn-a2"), "acc") == 3
    assert printed.rank("fedal", printed.column("svhn-a2"), "spread") is None
    assert printed.rank("fedal", printed.column("cinic10-a1"), "acc") == 1


@pytest.mark.parametrize("profile, settings", [
    ("paper", PAPER_SETTINGS),
    ("proxy", ["het-a5", "het-a2", "het-a1", "het-a2-p50", "het-a2-p100", "het-a2-p150", "hom-a2"]),
    ("smoke", ["het-a2", "hom-a2"]),
])
def test_every_setting_is_a_column_and_every_run_validates(profile: str, settings: list[str]) -> None:
    suite = load_suite(PARAMS, overrides=[f"profile={profile}"])
    assert list(suite.params.settings) == settings
    assert {c.setting for c in DEFINITION.columns_for(settings)} == set(settings)
    for method in suite.methods:
        assert suite.settings_of(method), method  # every method runs somewhere
        for setting in suite.settings_of(method):
            suite.config(method, setting, 0)


def test_methods_run_only_where_the_paper_runs_them() -> None:
    """FedProto needs one feature dimension (not SVHN's WRN mix), FedAvg one architecture (Figs. 7, 11 only),
    FD runs on Tables VI-VII, FedDF/FedDF-AL on SVHN's shareable setting, FedMD-LF on the ablation's column."""
    suite = load_suite(PARAMS, overrides=["profile=paper"])
    assert suite.settings_of("fedavg") == ["wrn-svhn-a5", "wrn-svhn-a2", "wrn-svhn-a1", "mnist-a5", "mnist-a2",
                                           "mnist-a1"]
    assert not [s for s in suite.settings_of("fedproto_fedal") if s.startswith("svhn")]
    assert suite.settings_of("fd") == ["svhn-a5", "svhn-a2", "svhn-a1", "cifar10-a5", "cifar10-a2", "cifar10-a1"]
    assert suite.settings_of("feddf") == suite.settings_of("feddf_al") == ["svhn-a5", "svhn-a2", "svhn-a1"]
    assert suite.settings_of("fedmd_lf") == ["svhn-a2"]
    for setting in suite.settings_of("fedavg"):
        assert not suite.config("fedavg", setting, 0).model.candidates
    assert len(suite.requests("fedal")) == 22 * 3  # FedAL runs on every column


def test_paper_profile_follows_the_protocol() -> None:
    """§2.5, §4: τ per method, iterations = rounds × τ (A11), Adam 1e-3 persistent, batch 32, |P| = 1000 of the
    clients' images (A12), curves every 100 iterations, CelebA at lr 1e-4 with 𝒫 from users who are not clients."""
    suite = load_suite(PARAMS, overrides=["profile=paper"])
    cfg = suite.config("fedal", "svhn-a2", 1)
    assert (cfg.dataset.name, cfg.model.candidates, cfg.partition.num_clients) == (
        "svhn", ["wrn10_1", "wrn10_2", "wrn16_1"], 20)
    assert (cfg.partition.scheme, cfg.partition.scheme_params["mode"], cfg.partition.scheme_params["alpha"]) == (
        "dirichlet", "per_client", 2.0)
    t = cfg.training
    assert (t.rounds, t.local_steps, t.batch_size, t.optimizer.name, t.optimizer.lr, t.optimizer.persistent) == (
        1000, 5, 32, "adam", 0.001, True)
    assert (cfg.public.size, cfg.public.source, cfg.evaluation.every, cfg.evaluation.clients_on_global_test) == (
        1000, "overlap", 20, True)
    params = cfg.algorithm.params
    assert (params["adv_temperature"], params["disc_lr"], params["kd_temperature"], params["teacher"]) == (
        2.0, 0.0001, 1.0, "others")
    assert suite.config("fedmd_fedal", "svhn-a1", 0).training.rounds == 7000
    assert suite.config("feddf_al", "svhn-a2", 0).training.rounds == 333  # τ = 15: 4995 iterations
    celeba = suite.config("fedal", "celeba-n100", 0)
    assert (celeba.partition.scheme, celeba.training.optimizer.lr, celeba.public.source, celeba.training.rounds,
            celeba.evaluation.every) == ("leaf", 0.0001, "unused", 2000, 100)
    assert suite.config("cfd", "cinic10-a1", 0).model.name == "resnet18_cifar"  # CFD's server model
    rounds = load_suite(PARAMS, overrides=["profile=paper_rounds"]).config("fedal", "svhn-a2", 0)
    assert rounds.training.rounds == 5000  # A11's alternative: an iteration is a round


def test_smoke_profile_end_to_end_withrun_dvc(tmp_path: Path) -> None:
    """`dvc repro` of pipelines/fedal/dvc.yaml at the smoke profile in a scratch project: partitions, the Fig. 4
    bubbles, every method, the paper report with its figures; then pin, and the compare stage passes."""
    project = tmp_path / "project"
    copy_pipeline("fedal", project)
    shutil.copytree(ROOT / "bench", project / "bench", ignore=shutil.ignore_patterns("__pycache__"))
    params = yaml.safe_load(PARAMS.read_text())
    params["profile"] = "smoke"
    params["profiles"]["smoke"]["suite"]["base"]["tracking"] = {"mlflow": False}
    (project / "pipelines" / "fedal" / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    assert run_dvc(project, "init", "--no-scm", "-q").returncode == 0
    shutil.copytree(ROOT / ".dvc" / "plots", project / ".dvc" / "plots")

    done = run_dvc(project, "repro", "pipelines/fedal/dvc.yaml:report", "pipelines/fedal/dvc.yaml:figures")
    assert done.returncode == 0, done.stderr[-3000:]
    folder = project / "pipelines" / "fedal"
    report = folder / "reports" / "fedal-smoke"
    paper = (report / "paper.md").read_text()
    assert (report / "paper-figures" / "figure4-a2.png").stat().st_size > 0
    for name in ("fig7-iterations", "fig7-time", "fig8", "fig9", "fig10", "fig11"):
        assert (report / "figures" / f"paper_{name}.png").stat().st_size > 0 and f"![{name}]" in paper
    suite = load_suite(folder / "params.yaml", root=folder)
    for method in suite.methods:
        assert f"| {DEFINITION.label(method)} |" in paper
    assert "### α=2 (paper SVHN α=2 ablation)" in paper and "`synthetic32`" in paper
    assert "## The paper's claims" in paper and "The band check does not apply" in paper
    # The mechanism table on runs that recorded the diagnostics: FedAL's discriminator and adversarial gradient,
    # each seed's mean beside its inert value, and a status read from them (never "not recorded" on fresh runs)
    assert "## Is the mechanism active on this profile?" in paper and "## What this profile can detect" in paper
    rows = re.findall(r"^\| FedAL \| het-a2 \| (the [a-z ]+) \| `[^`]+` \| ([^|]+) \| ([^|]+) \|$", paper, re.M)
    assert [r[0] for r in rows] == ["the discriminator tells the clients apart",
                                    "the adversarial gradient moves the clients"], rows
    for _, values, status in rows:
        assert re.fullmatch(r"[0-9.e-]+ \([0-9.e-]+\)(; [0-9.e-]+ \([0-9.e-]+\))*", values.strip()), values
        assert status.strip().strip("*") in ("active", "inert", "mixed"), status
    records = (folder / "results" / "fedal-smoke" / "fedal" / "het-a2" / "seed0" / "records.csv").read_text()
    assert "upload_bytes" in records and ",client_global_acc,2," in records  # per client, and the communication

    pin = subprocess.run([sys.executable, "-m", "bench.cli", "pin", "--params", "params.yaml"], cwd=folder,
                         capture_output=True, text=True)
    assert pin.returncode == 0, pin.stderr
    pinned = json.loads((folder / "reports" / "pinned" / "fedal-smoke.json").read_text())
    assert set(pinned["values"]["fedavg"]) == {"hom-a2"}  # only where it runs
    compared = run_dvc(project, "repro", "pipelines/fedal/dvc.yaml")
    assert compared.returncode == 0, compared.stderr[-3000:]
    assert "0 CHANGED, 0 DRIFT, 0 MISSING" in (report / "drift.md").read_text()


def test_celebas_steps_are_costed_on_a_fabricated_dataset_of_its_shape(tmp_path: Path) -> None:
    """`bench suite cost` measures a method on an embedded dataset of the run's image shape: CelebA's 3×84×84
    has synthetic84; LEAF's per-user split is estimated by an iid split of the same sizes."""
    from bench.report.cost import _paper_sizes, stand_in

    cfg = load_suite(PARAMS, overrides=["profile=paper"]).config("fedal", "celeba-n20", 0)
    assert stand_in(cfg, tmp_path) == "synthetic84"
    train, _ = _paper_sizes(cfg)
    assert len(train) == 20

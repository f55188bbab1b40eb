"""A fifth paper is one folder: a plug-in written into a temporary folder (its tables in paper.yaml; a claim, an own
figure and a model configuration in paper.py, which imports a helper module of its folder; params.yaml naming
paper.py) is found from its params file and reported, and `bench models` lists its configuration, with nothing of
bench changed; a copy of the folder elsewhere is a paper of its own. A paper shipped in a package joins through the
``fkd_bench.papers`` entry points. A plug-in that registers no paper, or two, is refused in one line."""
from __future__ import annotations

from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

from bench.cli import main
from bench.errors import BenchError
from bench.models import build_model, count_parameters
from bench.suites import load_suite
from bench.suites import plugins
from tests.fabricated import fabricate_run

PAPER_YAML = """
name: fifth
title: Fifth (a paper in one folder)
source: tests/test_paper_plugin.py
proposed: fedprox
methods: {fedavg: FedAvg, fedprox: FedProx}
tables:
  table1:
    title: Table 1
    measures:
      acc: {label: Acc, statistic: final_global_acc, scale: 100, digits: 1}
    columns:
      iid: {label: IID}
    printed:
      - columns: [iid]
        measures: [acc]
        rows:
          fedavg: [60.0]
          fedprox: [70.0]
"""
PAPER_PY = """
from pathlib import Path

from bench.models.paper_configs import CLIENT_MODEL, PaperConfig, printed
from bench.suites.paper import Paper, PaperDefinition, claim
from bench.suites.plugins import register_paper

from .drawing import bars


class Fifth(Paper):
    def claims(self, results):
        column = results.column("iid")
        return [claim("FedProx beats FedAvg", results, [results.beats("fedprox", "fedavg", column, "acc")])]

    def own_figures(self, suite, runs, folder, data_dir):
        return [bars({m: runs[m, "iid", 0].seconds_per_round for m in suite.methods}, folder / "fifth_seconds.png")]


PAPER = register_paper(Fifth(PaperDefinition.load(Path(__file__).with_name("paper.yaml")), (
    PaperConfig("Fifth", CLIENT_MODEL, "cnn", ("digits",), (1, 8, 8), 10, printed("{count}"), "its Table 0"),)))
"""
DRAWING_PY = """
from bench.fileio import atomic_write


def bars(values, path):
    from matplotlib.figure import Figure

    fig = Figure()
    fig.subplots().bar(list(values), list(values.values()))
    return atomic_write(path, lambda handle: fig.savefig(handle, format="png"))
"""
PARAMS = """
suite:
  name: {name}
  paper: {paper}
  seeds: [0]
  base: {{partition: {{num_clients: 2}}, training: {{rounds: 2}}, evaluation: {{every: 1}}, tracking: {{mlflow: false}}}}
settings:
  iid: {{partition: {{scheme: iid}}}}
methods:
  fedavg: {{}}
  fedprox: {{mu: 0.1}}
"""
ACCURACY = {"fedavg": 0.6, "fedprox": 0.8}  # the final global accuracy of every run


@pytest.fixture(autouse=True)
def registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """The papers these tests register by name are forgotten after each."""
    monkeypatch.setattr(plugins, "PAPERS", dict(plugins.PAPERS))


def write_folder(folder: Path) -> Path:
    """A paper folder: its tables, its module and the module's helper, a params file naming the module; returns
    the params file."""
    folder.mkdir(parents=True)
    cnn = f"{count_parameters(build_model('cnn', (1, 8, 8), 10)):,}"
    (folder / "paper.yaml").write_text(PAPER_YAML)
    (folder / "paper.py").write_text(PAPER_PY.replace("{count}", cnn))
    (folder / "drawing.py").write_text(DRAWING_PY)
    (folder / "params.yaml").write_text(PARAMS.format(name="fifth", paper="paper.py"))
    return folder / "params.yaml"


def write_paper(folder: Path) -> Path:
    """A paper folder with every run fabricated; returns its params file."""
    suite = load_suite(write_folder(folder))
    for method, accuracy in ACCURACY.items():
        fabricate_run(suite.run_dir(method, "iid", 0), suite.config(method, "iid", 0), {},
                      {"global_acc": {1: 0.5, 2: accuracy}, "train_loss": {1: 1.0, 2: 0.5}})
    return folder / "params.yaml"


def test_a_fifth_paper_is_one_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    params = write_paper(tmp_path / "papers" / "fifth")
    assert main(["suite", "report", "--params", str(params)]) == 0
    report = params.parent / "reports" / "fifth"
    paper = (report / "paper.md").read_text()
    assert paper.startswith("# Fifth (a paper in one folder) — paper tables, suite `fifth`")
    assert "| FedProx | 80.0 | — | 70.0 | 10.0 | 1 (1) |" in paper  # one seed: no spread
    # the printed tables hold it; one seed of ours can only be inconclusive (docs/verdicts.md)
    assert "| FedProx beats FedAvg | **holds** (1/1) | inconclusive | FedProx @ iid vs FedAvg @ iid: +20.0; paired t, 1 pair, untestable |" in paper
    assert (report / "figures" / "fifth_seconds.png").read_bytes().startswith(b"\x89PNG")

    capsys.readouterr()
    assert main(["models", "--papers", str(tmp_path / "papers")]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("Fifth"))
    assert row.split()[:3] == ["Fifth", "client", "model"] and " yes " in row and "its Table 0" in row


def test_a_suite_elsewhere_names_the_plug_in_relative_to_its_params_file(tmp_path: Path) -> None:
    write_paper(tmp_path / "fifth")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "params.yaml").write_text(PARAMS.format(name="other", paper="../fifth/paper.py"))
    paper = load_suite(tmp_path / "other" / "params.yaml").paper
    assert paper is load_suite(tmp_path / "fifth" / "params.yaml").paper  # imported once
    assert paper is not None and paper.definition.name == "fifth"


def test_a_paper_of_a_package_joins_through_the_entry_points(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "sixth_paper").mkdir()
    (tmp_path / "sixth_paper" / "paper.yaml").write_text(PAPER_YAML.replace("name: fifth", "name: sixth"))
    (tmp_path / "sixth_paper" / "drawing.py").write_text(DRAWING_PY)
    (tmp_path / "sixth_paper" / "__init__.py").write_text(PAPER_PY.replace("{count}", "1"))
    monkeypatch.syspath_prepend(str(tmp_path))
    points = [EntryPoint("sixth", "sixth_paper", plugins.ENTRY_POINTS)]
    monkeypatch.setattr(plugins, "entry_points", lambda group, name=None: [
        p for p in points if p.group == group and name in (None, p.name)])
    (tmp_path / "params.yaml").write_text(PARAMS.format(name="sixth", paper="sixth"))
    paper = load_suite(tmp_path / "params.yaml").paper
    assert paper is not None and type(paper).__module__ == "sixth_paper" and paper.definition.name == "sixth"
    assert paper in plugins.known_papers(tmp_path / "no papers here")


def test_a_copy_of_a_paper_folder_is_a_paper_of_its_own(tmp_path: Path) -> None:
    """A scratch copy of a pipeline (as the smoke tests make) reports with its own module, beside the original."""
    original = load_suite(write_folder(tmp_path / "fifth")).paper
    copy = load_suite(write_folder(tmp_path / "copy")).paper
    assert original is not None and copy is not None and original is not copy
    assert type(copy).__module__ != type(original).__module__ and copy.definition.name == "fifth"
    assert load_suite(tmp_path / "fifth" / "params.yaml").paper is original


@pytest.mark.parametrize("module, count", [("", 0), (PAPER_PY + "\nregister_paper(Fifth(PAPER.definition))\n", 2)])
def test_a_plug_in_registers_exactly_one_paper(tmp_path: Path, module: str, count: int) -> None:
    params = write_folder(tmp_path / "fifth")
    (tmp_path / "fifth" / "paper.py").write_text(module.replace("{count}", "1"))
    with pytest.raises(BenchError, match=rf"suite fifth: .*fifth/paper.py registers {count} papers; a paper module "
                                         "registers exactly one"):
        load_suite(params)
    assert "fifth" not in plugins.PAPERS  # nor is what it registered kept

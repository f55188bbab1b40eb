from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from bench.errors import BenchError
from bench.suites import load_suite

PARAMS = """
suite:
  name: demo
  seeds: [0, 1]
  base:
    partition: {num_clients: 5}
    training: {rounds: 40}
settings:
  a: {partition: {scheme: iid}}
  b: {partition: {scheme: dirichlet, alpha: 0.3}, model: {name: mlp}}
methods:
  fedavg: {name: fedavg}
  prox: {name: fedprox, mu: 0.2}
profiles:
  small:
    suite: {seeds: [0], base: {training: {rounds: 2}}}
    settings: {only: {partition: {scheme: shards}}}
"""


@pytest.fixture
def params_file(tmp_path: Path) -> Path:
    path = tmp_path / "params.yaml"
    path.write_text(PARAMS)
    return path


def test_run_config_merges_base_setting_method_and_seed(params_file: Path) -> None:
    suite = load_suite(params_file)
    cfg = suite.config("prox", "b", 1)
    assert (cfg.partition.scheme, cfg.partition.scheme_params["alpha"], cfg.partition.num_clients) == ("dirichlet", 0.3, 5)
    assert cfg.model.name == "mlp" and cfg.training.rounds == 40 and cfg.seed == 1
    assert cfg.algorithm.name == "fedprox" and cfg.algorithm.params["mu"] == 0.2
    assert suite.config("fedavg", "a", 0).model.name == "cnn"  # a setting overlays only what it names
    assert suite.run_dir("prox", "b", 1) == params_file.parent / "results" / "demo" / "prox" / "b" / "seed1"
    assert len(suite.requests("prox")) == 4


def test_profile_overlays_suite_and_replaces_settings(params_file: Path) -> None:
    suite = load_suite(params_file, overrides=["profile=small"])
    assert suite.name == "demo-small" and suite.params.suite.seeds == [0]
    assert list(suite.params.settings) == ["only"] and list(suite.params.methods) == ["fedavg", "prox"]
    cfg = suite.config("fedavg", "only", 0)
    assert cfg.training.rounds == 2 and cfg.partition.num_clients == 5 and cfg.partition.scheme == "shards"


@pytest.mark.parametrize("overrides, message", [
    (["profile=large"], "profile 'large' is not one of: small"),
    (["suite.seeds=[]"], "suite.seeds"),
    (["settingz={}"], "settingz: unknown key"),
])
def test_bad_suite_params(params_file: Path, overrides: list[str], message: str) -> None:
    with pytest.raises(BenchError, match=message):
        load_suite(params_file, overrides=overrides)


def test_bad_run_config_names_method_and_setting(params_file: Path) -> None:
    suite = load_suite(params_file, overrides=["methods.prox.mu=-1"])
    with pytest.raises(BenchError, match="method prox, setting a: invalid config: algorithm.mu"):
        suite.config("prox", "a", 0)


OVERLAYS = """
suite:
  name: budgets
  seeds: [0]
  base:
    training: {rounds: 40, local_epochs: null, local_steps: 1}
    budget: {rounds: 30}
settings:
  plain: {}
  a5: {budget: {iterations: 3000}}            # FedAL-style: an iteration budget per column
methods:
  fedavg: {}
  tau5:                                        # any config section, per method
    name: fedprox
    mu: 0.1
    config: {training: {local_steps: 5, optimizer: {name: adam, lr: 0.001}}}
  short: {name: fedavg, config: {budget: {rounds: 7}}, needs: [tau5]}
"""


@pytest.fixture
def overlays(tmp_path: Path) -> Path:
    path = tmp_path / "params.yaml"
    path.write_text(OVERLAYS)
    return path


def test_method_overlay_changes_any_config_section(overlays: Path) -> None:
    suite = load_suite(overlays)
    tau5, fedavg = suite.config("tau5", "plain", 0), suite.config("fedavg", "plain", 0)
    assert (tau5.training.local_steps, tau5.training.optimizer.name, tau5.training.optimizer.lr) == (5, "adam", 0.001)
    assert (tau5.algorithm.name, tau5.algorithm.params["mu"]) == ("fedprox", 0.1)
    assert (fedavg.training.local_steps, fedavg.training.optimizer.name, fedavg.algorithm.name) == (1, "sgd", "fedavg")


def test_budgets_in_rounds_or_iterations(overlays: Path) -> None:
    """budget.rounds replaces training.rounds; budget.iterations I gives I / local_steps rounds
    (pipelines/fedal/NOTES.md A11: τ steps per round); the last layer naming a budget (base, setting, method) wins."""
    suite = load_suite(overlays)
    rounds = {(m, s): suite.config(m, s, 0).training.rounds
              for m in suite.params.methods for s in suite.params.settings}
    assert rounds == {("fedavg", "plain"): 30, ("fedavg", "a5"): 3000, ("tau5", "plain"): 30, ("tau5", "a5"): 600,
                      ("short", "plain"): 7, ("short", "a5"): 7}


@pytest.mark.parametrize("overrides, message", [
    (["settings.a5.budget.iterations=3001"], "budget.iterations=3001 is not a multiple of training.local_steps=5"),
    (["suite.base.training.local_steps=null", "suite.base.training.local_epochs=1"],
     "budget.iterations=3000 needs training.local_steps"),
    (["settings.a5.budget.rounds=3"], "give exactly one of budget.rounds and budget.iterations"),
])
def test_bad_budget_names_the_run_and_the_fix(overlays: Path, overrides: list[str], message: str) -> None:
    suite = load_suite(overlays, overrides=overrides)
    with pytest.raises(BenchError, match=f"method (tau5|fedavg), setting a5: .*{message}"):
        for method in ("tau5", "fedavg"):
            suite.config(method, "a5", 0)


def test_dependencies_come_first_and_must_be_methods(overlays: Path) -> None:
    suite = load_suite(overlays)
    assert suite.dependencies("short") == ["tau5"] and suite.dependencies("tau5") == []
    assert suite.train_order(["short", "fedavg", "tau5"]) == ["tau5", "short", "fedavg"]
    assert suite.train_order(["short"]) == ["short"]  # orders what it is given; adds nothing
    with pytest.raises(BenchError, match="method short needs the runs of 'fedmd'.*add it to methods"):
        load_suite(overlays, overrides=["methods.short.needs=[fedmd]"])
    with pytest.raises(BenchError, match="in a circle .*tau5 -> short -> tau5"):
        load_suite(overlays, overrides=["methods.tau5.needs=[short]"]).train_order(["tau5", "short"])


@pytest.mark.parametrize("overrides, message", [
    (["methods.tau5.config.algorithm={mu: 1}"], "config.algorithm: put the algorithm's keys beside `name`"),
    (["suite.statistics=[best_global_acc]"], "suite.statistics.0: .*is not a statistic name"),
    (["suite.paper=fedxyz"], "paper 'fedxyz' is neither a module file .* nor a registered paper"),
    (["suite.paper=nowhere/paper.py"], r"paper module .*nowhere/paper.py not found"),
])
def test_bad_method_statistic_or_paper(overlays: Path, overrides: list[str], message: str) -> None:
    with pytest.raises(BenchError, match=message):
        load_suite(overlays, overrides=overrides)


@pytest.mark.parametrize("params, pinned", [
    ("params.yaml", "reports/pinned/default.json"),
    ("pipelines/fedhkd/params.yaml", "pipelines/fedhkd/reports/pinned/fedhkd-proxy.json"),
])
def test_committed_suites_make_the_pinned_configs(params: str, pinned: str) -> None:
    """Every pinned run's config hash is what the suite makes today: the suite syntax (overlays,
    budgets, statistics) leaves existing params files' runs unchanged. Every pinned method is pinned
    on every setting and seed; a method added since (not pinned yet: `bench compare` says so) is not."""
    root = Path(__file__).resolve().parents[1]
    suite = load_suite(root / params)
    data = json.loads((root / pinned).read_text())
    hashes = {(m, s, int(seed)): entry["config_sha256"] for m, cells in data["values"].items()
              for s, cell in cells.items() for seed, entry in cell["seeds"].items()}
    assert set(data["values"]) <= set(suite.params.methods)
    assert len(hashes) == len(data["values"]) * len(suite.params.settings) * len(suite.params.suite.seeds)
    assert all(suite.config(*key).sha256 == sha for key, sha in hashes.items())


def _runtime_imports(path: Path, root: Path) -> set[str]:
    """The bench modules a module imports when it runs (anywhere in it, but not under TYPE_CHECKING)."""
    tree = ast.parse(path.read_text())
    skipped = {id(n) for node in ast.walk(tree)
               if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
               for child in node.body for n in ast.walk(child)}
    out: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("bench"):
            for alias in node.names:  # `from bench.suites import fedhkd` imports a module, `... import Suite` not
                module = f"{node.module}.{alias.name}"
                out.add(module if (root / module.replace(".", "/")).with_suffix(".py").exists() else node.module)
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("bench")}
    return out


def test_suites_and_report_import_without_circles() -> None:
    """report imports suites, never the reverse, and neither room has an import circle (no import_module)."""
    root = Path(__file__).resolve().parents[1]
    modules = {".".join(p.relative_to(root).with_suffix("").parts).removesuffix(".__init__"): p
               for room in ("suites", "report") for p in (root / "bench" / room).glob("*.py")}
    graph = {m: {t for t in _runtime_imports(p, root) if t in modules} for m, p in modules.items()}
    assert not any(t.startswith("bench.report") for m, targets in graph.items() if m.startswith("bench.suites")
                   for t in targets)
    assert not any("import_module" in p.read_text() for p in modules.values())

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        return any(t == goal or (t not in seen and reaches(t, goal, seen | {t})) for t in graph[start])

    assert [m for m in graph if reaches(m, m, {m})] == []


def test_a_method_may_run_on_some_settings_with_values_of_its_own_there(params_file: Path) -> None:
    """``settings``: the columns a method runs on (a sensitivity study, an ablation); ``per_setting``: its
    hyperparameters and config overlay on one setting (FedGen's EMNIST values, FedDF's public set)."""
    raw = PARAMS.replace("  prox: {name: fedprox, mu: 0.2}",
                         "  prox: {name: fedprox, mu: 0.2, settings: [b],\n"
                         "         per_setting: {b: {mu: 0.5, config: {training: {rounds: 3}}}}}")
    params_file.write_text(raw)
    suite = load_suite(params_file)
    assert suite.settings_of("prox") == ["b"] and suite.settings_of("fedavg") == ["a", "b"]
    assert [r.config.partition.scheme for r in suite.requests("prox")] == ["dirichlet", "dirichlet"]
    cfg = suite.config("prox", "b", 0)
    assert (cfg.algorithm.params["mu"], cfg.training.rounds) == (0.5, 3)
    params_file.write_text(raw.replace("settings: [b]", "settings: [c]"))
    with pytest.raises(BenchError, match=r"method prox lists settings \['c'\] that are not settings"):
        load_suite(params_file)


def test_a_profile_overlays_some_settings_and_methods(params_file: Path) -> None:
    """``overlay``: deep-merged into the named entries (E counted in steps instead of epochs for some)."""
    params_file.write_text(PARAMS + "  steps:\n    overlay:\n      settings: {b: {training: {local_steps: 4}}}\n"
                                    "      methods: {prox: {mu: 0.7}}\n")
    suite = load_suite(params_file, overrides=["profile=steps"])
    cfg = suite.config("prox", "b", 0)
    assert (cfg.training.local_steps, cfg.model.name, cfg.algorithm.params["mu"]) == (4, "mlp", 0.7)
    assert suite.config("fedavg", "a", 0).training.local_steps is None
    params_file.write_text(PARAMS + "  steps:\n    overlay: {methods: {moon: {mu: 1}}}\n")
    with pytest.raises(BenchError, match=r"overlay.methods: \['moon'\] are not methods"):
        load_suite(params_file, overrides=["profile=steps"])


def test_a_fixed_participation_seed_gives_every_run_seed_the_same_clients() -> None:
    """pipelines/dafkd/NOTES.md A26: one client schedule for every method and run seed (``participation.seed``)."""
    from bench.runner.federation import sample_clients
    from tests.conftest import small_config

    def schedule(seed: int, fixed: int | None) -> list[list[int]]:
        cfg = small_config(seed=seed, participation={"fraction": 0.3, "seed": fixed})
        return [sample_clients(cfg, t) for t in range(1, 6)]

    assert schedule(0, 7) == schedule(1, 7) != schedule(0, 8)
    assert schedule(0, None) != schedule(1, None)
    assert "seed" not in small_config().to_dict()["participation"]  # left out at its default: hashes unchanged


def test_partition_seed_run_gives_each_run_seed_its_own_partition(params_file: Path, tmp_path: Path) -> None:
    """``suite.partition_seed: run``: run seed s trains on the partition of seed partition.seed + s, saved under
    partitions/<suite>/<setting>/seed<s>/ and checked there; the default keeps one partition a setting."""
    from bench.cli import main
    from bench.report.partition_check import check_partitions

    fixed = load_suite(params_file)
    assert {fixed.config("fedavg", "b", s).partition.seed for s in (0, 1)} == {0}
    assert fixed.partition_seeds() == [None] and fixed.partition_dir("b", 1) == fixed.partition_dir("b")
    params_file.write_text(PARAMS.replace("  seeds: [0, 1]\n", "  seeds: [0, 1]\n  partition_seed: run\n")
                           .replace("partition: {num_clients: 5}", "partition: {num_clients: 5, seed: 10}"))
    suite = load_suite(params_file)
    assert [suite.config("fedavg", "b", s).partition.seed for s in (0, 1)] == [10, 11]
    folders = [suite.partition_dir("b", s) for s in (0, 1)]
    assert folders == [tmp_path / "partitions" / "demo" / "b" / f"seed{s}" for s in (0, 1)]
    data = tmp_path / "data"
    assert main(["suite", "partition", "--params", str(params_file), "--data-dir", str(data), "--setting", "b"]) == 0
    hashes = [json.loads((f / "partition.json").read_text())["sha256"] for f in folders]
    assert hashes[0] != hashes[1]  # fresh draws, not one partition shared
    assert [r.partition_dir for r in suite.requests("fedavg") if r.out_dir.parent.name == "b"] == folders
    checks = check_partitions(suite, ["b"], data, {("b", 0): {hashes[0]}, ("b", 1): {hashes[0]}}, prepare=True)
    assert [(c.seed, c.verified, c.failed) for c in checks] == [(0, True, False), (1, False, True)]

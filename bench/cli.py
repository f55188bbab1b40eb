"""The ``bench`` command: parses arguments and calls the rooms; no logic of its own.

Bad input exits with status 2 and one line ``error: ...``; a failed (diverged) run exits 1.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from bench import exit_without_teardown
from bench.errors import BenchError, Diverged
from bench.fileio import write_text

if TYPE_CHECKING:
    from bench.suites import Suite
    from bench.tracking.background import BackgroundLogger


def _run(args: argparse.Namespace) -> int:
    from bench.config import apply_overrides, read_yaml_mapping
    from bench.tracking.background import BackgroundLogger

    # Read before torch is imported (the whole config is validated next): a run that logs starts the helper
    # that prepares MLflow on another core while this process imports torch and trains.
    tracking = apply_overrides(read_yaml_mapping(args.config), args.set or []).get("tracking")
    logger = BackgroundLogger(start=not (isinstance(tracking, dict) and tracking.get("mlflow") is False))
    try:
        return _run_logged(args, logger)
    finally:
        logger.close()


def _run_logged(args: argparse.Namespace, logger: BackgroundLogger) -> int:
    from bench.experiment import load_config
    from bench.runner.checkpoint import CheckpointPolicy
    from bench.runner.executor import RunRequest, run_experiment

    config = load_config(args.config, args.set)
    out = Path(args.out or f"runs/{config.name}-{config.sha256[:10]}")
    if out.exists() and not out.is_dir():
        raise BenchError(f"--out {out} is a file; give a folder (new or one of an earlier run)")
    request = RunRequest(config, out, args.data_dir, args.partition,
                         CheckpointPolicy(args.checkpoint_every, args.checkpoint_interval), args.keep_checkpoint)
    if args.no_progress:
        metrics = run_experiment(request, logger=logger.log)
    else:
        from tqdm import tqdm

        with tqdm(total=config.training.rounds, desc=config.name, unit="round") as bar:
            def progress(t: int, row: dict[str, float]) -> None:
                bar.update(t - bar.n)  # a resumed run starts past round 1
                bar.set_postfix({k: f"{v:.4f}" for k, v in row.items() if k.endswith(("acc", "loss"))})

            metrics = run_experiment(request, progress, logger=logger.log, say=lambda line: bar.write(line, sys.stderr))
    final = ", ".join(f"{k}={v:.4f}" for k, v in metrics["final"].items())
    print(f"{out}: final {final}")
    return 0


def _data_prepare(args: argparse.Namespace) -> int:
    from bench.data import describe_source, prepare_dataset, prepared_dir, prepared_source
    from bench.errors import DataUnavailable

    try:
        folder = prepare_dataset(args.name, args.data_dir, force=args.force)
    except DataUnavailable as exc:
        if not args.skip_unavailable:
            raise
        folder = prepared_dir(args.name, args.data_dir)
        write_text(folder / "UNAVAILABLE.txt", f"{exc}\n")
        print(f"skipped {args.name}: its raw files are not here and cannot be downloaded (reason in "
              f"{folder / 'UNAVAILABLE.txt'}); add them and run `bench data prepare {args.name}`")
        return 0
    (folder / "UNAVAILABLE.txt").unlink(missing_ok=True)
    print(f"prepared {args.name} in {folder}: {describe_source(prepared_source(args.name, args.data_dir) or {})}")
    return 0


def _data_list(args: argparse.Namespace) -> int:
    from bench.data import dataset_names, describe_source, get_dataset_spec, prepared_source

    for name in dataset_names():
        spec = get_dataset_spec(name)
        print(f"{name:16s} {spec.num_classes:4d} classes  {spec.num_train:7d} train  {spec.num_test:6d} test  "
              f"{spec.description}")
        if (source := prepared_source(name, args.data_dir)) is not None:
            print(f"{'':16s} prepared: {describe_source(source)}")
    return 0


def _partition(args: argparse.Namespace) -> int:
    from bench.experiment import build_config, load_config
    from bench.runner.federation import partition_for
    from bench.data import load_dataset

    config = load_config(args.config, args.set) if args.config else build_config({}, args.set)
    data = load_dataset(config.dataset.name, args.data_dir)
    partition = partition_for(config, data, None)
    out = Path(args.out)
    partition.save(out)
    if args.plot:
        from bench.report.partition_plots import plot_partition

        print(f"plot: {plot_partition(partition, out / 'partition.png')}")
    sizes = [len(a) for a in partition.train]
    print(f"{out}: {partition.num_clients} clients, sizes {min(sizes)}-{max(sizes)}, sha256 {partition.sha256[:16]}")
    return 0


def _models(args: argparse.Namespace) -> int:
    from bench.models.inventory import describe_paper_configs, format_models_table, format_paper_configs_table
    from bench.suites.plugins import known_papers

    print(format_models_table())
    configs = tuple(config for paper in known_papers(args.papers) for config in paper.model_configs)
    print("\nThe papers' configurations (parameters: the whole model built as configured; printed: the count the "
          "paper or its reading notes give, exact or rounded, of the model or the named part; source: where)")
    print(format_paper_configs_table(describe_paper_configs(configs)))
    return 0


def _algorithms(args: argparse.Namespace) -> int:
    from bench.algorithms import algorithm_names, get_algorithm

    for name in algorithm_names():
        cls = get_algorithm(name)
        doc = (sys.modules[cls.__module__].__doc__ or "").strip().splitlines()[0]
        print(f"{name:14s} {doc}")
    return 0


def _suite(args: argparse.Namespace) -> Suite:
    from bench.suites import load_suite

    return load_suite(args.params, args.root, args.set)


def _suite_partition(args: argparse.Namespace) -> int:
    from bench.data import load_dataset
    from bench.runner.federation import partition_for

    suite = _suite(args)
    for setting in args.setting or list(suite.params.settings):
        for seed in suite.partition_seeds():
            config = suite.partition_config(setting, seed)
            partition = partition_for(config, load_dataset(config.dataset.name, args.data_dir), None)
            partition.save(suite.partition_dir(setting, seed))
            print(f"{suite.partition_dir(setting, seed)}: sha256 {partition.sha256[:16]}")
    return 0


def _suite_figures(args: argparse.Namespace) -> int:
    from bench.data import load_dataset
    from bench.runner.federation import partition_for
    from bench.report.partition_plots import plot_class_bubbles, plot_class_heatmap

    suite = _suite(args)
    out = args.out or suite.root / "reports" / suite.name / "paper-figures"
    for figure in suite.params.figures:
        config = suite.figure_config(figure)
        partition = partition_for(config, load_dataset(config.dataset.name, args.data_dir), None)
        plot = plot_class_bubbles if suite.figure_plot(figure) == "bubbles" else plot_class_heatmap
        print(plot(partition, out / f"{figure}.png", title=f"{suite.name} {figure}: {config.dataset.name}, "
                   f"{partition.num_clients} clients, {'beta' if plot is plot_class_heatmap else 'alpha'}="
                   f"{partition.params.get('alpha')}"))
    return 0


def _suite_train(args: argparse.Namespace) -> int:
    from bench import CPU_KERNEL_VARIABLES
    from bench.report.pinned import default_pinned_path, pinned_kernels
    from bench.runner.executor import Executor, Failure
    from bench.runner.parallel import run_many

    suite = _suite(args)
    absent = [m for m in args.method or () if m not in suite.params.methods]
    if unknown := [m for m in absent if m not in suite.reload(["profile=null"]).params.methods]:
        raise BenchError(f"suite {suite.name} has no method {', '.join(unknown)}; methods: {', '.join(suite.methods)}")
    for method in absent:  # a dvc.yaml stage of every top-level method: one the profile leaves out trains nothing
        suite.results_dir(method).mkdir(parents=True, exist_ok=True)
        print(f"suite {suite.name}: profile {suite.params.profile} has no method {method}; nothing to train")
    methods = suite.train_order([m for m in args.method or suite.params.methods if m not in absent])  # dependencies first
    requests = [r for m in methods for r in suite.requests(m, args.data_dir)]
    from bench.runner.progress import SuiteProgress

    section = suite.params.suite
    # a pinned suite trains at the CPU kernels of its pins (so that `bench compare` can be exact), unless the
    # environment chooses kernels itself
    chosen = any(k in os.environ for k in ("BENCH_CPU_KERNELS", *CPU_KERNEL_VARIABLES))
    kernels = None if chosen else pinned_kernels(default_pinned_path(args.params, suite.name))
    executor = Executor(args.executor or section.executor, args.jobs or section.jobs,
                        args.ray_address or section.ray.address, section.ray.cpus_per_run, section.ray.gpus_per_run,
                        section.ray.max_retries, kernels)
    print(f"suite {suite.name}: {len(requests)} runs ({', '.join(methods)}) on {executor.describe()}", flush=True)
    with SuiteProgress(suite.name, [r.config.training.rounds for r in requests]) as progress:
        def done(index: int, outcome: dict | Failure) -> None:
            if isinstance(outcome, Failure):
                progress.write(f"  {'DIVERGED' if outcome.diverged else 'FAILED'} {outcome.message}")
                return
            final = ", ".join(f"{k}={v:.4f}" for k, v in outcome["final"].items() if k.endswith("acc"))
            progress.run_done(index, f"  {requests[index].out_dir}: {final}")

        run_many(requests, executor, progress.round_done, done)
    return 0


def _suite_report(args: argparse.Namespace) -> int:
    from bench.report.suite_report import write_report

    paths = write_report(_suite(args), args.out, args.data_dir)
    print(f"wrote {len(paths)} files to {paths[-1].parent}")
    return 0


def _suite_cost(args: argparse.Namespace) -> int:
    from bench.report.cost import MeasuredSteps, cost_table

    gpus = [MeasuredSteps.load(path) for path in args.gpu]
    print(cost_table(_suite(args), args.tflops, args.data_dir, gpus))
    return 0


def _suite_time(args: argparse.Namespace) -> int:
    from bench.suites.timing import write_timing

    suite = _suite(args)
    path = write_timing(suite, args.data_dir, args.rounds, args.repeats)
    print(f"wrote the per-round times of {len(suite.timed_settings())} timed setting(s) to {path}")
    return 0


def _pin(args: argparse.Namespace) -> int:
    from bench.report.pinned import default_pinned_path, pin, pin_warnings

    suite = _suite(args)
    path = pin(suite, args.out or default_pinned_path(args.params, suite.name), args.per_seed_tol, args.mean_tol)
    print(f"pinned suite {suite.name} to {path}")
    for warning in pin_warnings(path):
        print(f"warning: {warning}", file=sys.stderr)
    return 0


def _compare(args: argparse.Namespace) -> int:
    from bench.report.pinned import compare, default_pinned_path

    suite = _suite(args)
    result = compare(suite, args.pinned or default_pinned_path(args.params, suite.name), args.data_dir,
                     required=args.pinned is not None)
    if args.out:  # the whole table to the file, the summary and what failed to the log
        write_text(args.out, result.format() + "\n")
    print(result.summary(args.out) if args.out else result.format())
    return 1 if result.failed else 0


def _mlflow_sync(args: argparse.Namespace) -> int:
    from bench.experiment import build_config
    from bench.config import read_yaml_mapping
    from bench.tracking import log_mlflow, logged_run_dirs

    run_dirs = sorted({p.parent for folder in args.folders for p in Path(folder).rglob("config.yaml")
                       if (p.parent / "metrics.json").exists() or (p.parent / "failure.json").exists()})
    logged: dict[str, set[str]] = {}
    added = 0
    for run_dir in run_dirs:
        config = build_config(read_yaml_mapping(run_dir / "config.yaml", "run config"))
        experiment = config.tracking.experiment
        if experiment not in logged:
            logged[experiment] = logged_run_dirs(experiment)
        if str(run_dir.resolve()) not in logged[experiment]:
            log_mlflow(config, run_dir)
            added += 1
            print(f"logged {run_dir} to experiment {experiment}")
    print(f"{len(run_dirs)} finished or failed runs found, {added} logged, {len(run_dirs) - added} already in MLflow")
    return 0


def _audit(args: argparse.Namespace) -> int:
    from bench.report.audit import audit, rerun, rerun_lines
    from bench.runner.parallel import run_at_kernels

    if args.scratch is not None and not args.scratch.is_dir():
        raise BenchError(f"--scratch {args.scratch} is not a folder; create it, or leave --scratch out (the system's "
                         "temporary folder)")
    result = audit(args.report, args.cell, args.params)
    lines, problems = result.check(args.data_dir)
    print("\n".join(lines))
    if not args.rerun:
        return 1 if problems else 0
    seeds = [args.seed] if args.seed is not None else list(result.runs)
    checks = rerun(result, seeds, args.data_dir, args.scratch, run_at_kernels)
    print("\n".join(rerun_lines(checks)))
    return 0 if all(c.equal for c in checks) and not problems else 1


def _versus(args: argparse.Namespace) -> int:
    from bench.report.pinned import default_pinned_path, load_pinned
    from bench.report.versus import (compare_method, default_baselines, log_versus, parse_statistic, verified_partitions,
                                     versus_requests, write_versus)
    from bench.runner.parallel import run_many
    from bench.suites import load_suite

    probe = load_suite(args.params, args.root, args.set)
    added = [] if args.method in probe.params.methods else [f"methods.{args.method}.name={args.method}"]
    suite = load_suite(args.params, args.root, [*args.set, *added])
    pinned = None if args.from_runs else load_pinned(default_pinned_path(args.params, suite.name), suite)
    statistic = parse_statistic(args.statistic)
    baselines, skipped = (args.baseline, []) if args.baseline else default_baselines(suite, pinned, args.method, statistic)
    if args.method in baselines:
        raise BenchError(f"{args.method} is the method compared; leave it out of --baseline")
    out = args.out or Path("runs") / "versus" / suite.name / args.method
    requests = versus_requests(suite, args.method, out, args.data_dir, verified_partitions(suite, args.data_dir))
    if requests and args.no_train:
        raise BenchError(f"{len(requests)} run(s) of {args.method} missing in {out}; run without --no-train")
    if requests:
        print(f"training {args.method}: {len(requests)} runs on the pinned partitions of suite {suite.name}", flush=True)
        run_many(requests, args.jobs or suite.params.suite.jobs)
    result = compare_method(suite, args.method, out, statistic, baselines, pinned, skipped)
    files = write_versus(result, out)
    print(files[-1].read_text(), end="")
    if not args.no_mlflow:
        print(f"logged to MLflow: experiment versus-{suite.name}, run {log_versus(result, files)}")
    print(f"wrote {', '.join(map(str, files))}")
    return 0


def _sensitivity(args: argparse.Namespace) -> int:
    from bench.report.pinned import default_pinned_path, load_pinned
    from bench.report.versus import narrowed, parse_statistic, sensitivity_markdown, sensitivity_rows

    suite = _suite(args)
    pinned = load_pinned(args.pinned or default_pinned_path(args.params, suite.name), suite)
    statistics = [parse_statistic(name) for name in args.statistic or [s.name for s in suite.params.suite.statistics]]
    rows, left_out = sensitivity_rows(pinned, statistics, named=bool(args.statistic))
    print(sensitivity_markdown(suite.name, rows), end="")
    if notes := [n for statistic, _ in rows if (n := narrowed(pinned, statistic)) is not None]:
        print("\nJudged on the settings the methods share most:\n" + "\n".join(f"- {n}" for n in notes))
    if left_out:
        print(f"\nLeft out, no two pinned methods share a setting for them: {', '.join(f'`{n}`' for n in left_out)}.")
    return 0


class _Parser(argparse.ArgumentParser):
    """argparse with the project's bad-input contract: one line ``error: ...`` and exit status 2 (:func:`main`)."""

    def error(self, message: str) -> NoReturn:
        raise BenchError(f"{self.prog}: {message} (see {self.prog} --help)")


def _whole(text: str, least: int) -> int:
    try:
        value = int(text)
    except ValueError:
        value = least - 1
    if value < least:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= {least}")
    return value


def _count(text: str) -> int:
    """A whole number >= 0 (a command-line option)."""
    return _whole(text, 0)


def _positive(text: str) -> int:
    """A whole number >= 1 (a command-line option)."""
    return _whole(text, 1)


def _seconds(text: str) -> float:
    """A finite number of seconds >= 0 (a command-line option)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds >= 0")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="bench", description="fkd-bench: reproducible federated knowledge "
                                     "distillation benchmarks. Each subcommand has its own --help.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    data_dir: dict[str, Any] = dict(type=Path, default=None, help="data folder (default: $BENCH_DATA_DIR, else ./data)")
    overrides: dict[str, Any] = dict(action="append", default=[], metavar="KEY=VALUE",
                     help="override a config value, e.g. -S training.rounds=5 -S algorithm.mu=0.1 (repeatable)")

    run = sub.add_parser("run", help="run one experiment from a YAML config",
                         description="Run one experiment and write config.yaml, metrics.json, curves.csv, "
                                     "records.csv, timing.json and provenance.json to --out; log it to MLflow. "
                                     "A run killed part-way resumes from its last checkpoint in --out when the "
                                     "same command is run again.")
    run.add_argument("config", type=Path, help="experiment YAML (see examples/)")
    run.add_argument("-S", "--set", **overrides)
    run.add_argument("--out", type=Path, help="output folder (default: runs/<name>-<config hash>)")
    run.add_argument("--data-dir", **data_dir)
    run.add_argument("--partition", type=Path, help="use this saved partition (must match the config)")
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
    run.add_argument("--checkpoint-every", type=_count, default=1, metavar="K",
                     help="write a checkpoint after every K-th round (default 1; 0: never) ...")
    run.add_argument("--checkpoint-interval", type=_seconds, default=60.0, metavar="S",
                     help="... at least S seconds apart and 50 times as long as the last one took (at most 2 %% of "
                          "the run's time; default 60; 0: after every K-th round whatever it costs)")
    run.add_argument("--keep-checkpoint", action="store_true", help="keep the checkpoint after the run finishes")
    run.set_defaults(func=_run)

    data = sub.add_parser("data", help="prepare or list datasets").add_subparsers(dest="data_command", required=True)
    prep = data.add_parser("prepare", help="download (if needed), verify and cache a dataset as tensors")
    prep.add_argument("name", help="dataset name (see `bench data list`)")
    prep.add_argument("--data-dir", **data_dir)
    prep.add_argument("--force", action="store_true", help="prepare again even if a valid cache exists")
    prep.add_argument("--skip-unavailable", action="store_true",
                      help="raw files absent and not downloadable (offline): say so, record why in "
                           "prepared/NAME/UNAVAILABLE.txt and exit 0 instead of failing")
    prep.set_defaults(func=_data_prepare)
    listing = data.add_parser("list", help="list the registered datasets; under each one prepared in --data-dir, "
                              "where its raw files came from and how they were checked")
    listing.add_argument("--data-dir", **data_dir)
    listing.set_defaults(func=_data_list)

    part = sub.add_parser("partition", help="build a partition artifact from a config's dataset and partition",
                          description="Write train_indices.npy, local_test_indices.npy and partition.json "
                                      "(sizes, class counts, sha256) to --out.")
    part.add_argument("config", type=Path, nargs="?", help="experiment YAML (default: built-in defaults)")
    part.add_argument("-S", "--set", **overrides)
    part.add_argument("--out", type=Path, required=True, help="output folder")
    part.add_argument("--data-dir", **data_dir)
    part.add_argument("--plot", action="store_true", help="also draw the client x class heatmap")
    part.set_defaults(func=_partition)

    suite = sub.add_parser("suite", help="run a suite's stages (what dvc.yaml calls)").add_subparsers(
        dest="suite_command", required=True)

    def suite_command(name: str, help_text: str, func: object,
                      parent: argparse._SubParsersAction = suite) -> argparse.ArgumentParser:
        cmd = parent.add_parser(name, help=help_text)
        cmd.add_argument("--params", type=Path, default=Path("params.yaml"), help="suite params file")
        cmd.add_argument("--root", type=Path, default=None,
                         help="folder for results/ and partitions/ (default: the params file's folder)")
        cmd.add_argument("-S", "--set", **overrides)
        cmd.add_argument("--data-dir", **data_dir)
        cmd.set_defaults(func=func)
        return cmd

    suite_command("partition", "write every setting's partition artifact", _suite_partition).add_argument(
        "--setting", action="append", help="only this setting (repeatable)")
    suite_command("figures", "draw the suite's partition figures (client x class heatmaps)", _suite_figures
                  ).add_argument("--out", type=Path, help="folder (default: <root>/reports/<suite>/paper-figures)")
    train = suite_command("train", "run every setting x seed of the given methods (a diverged run is an outcome: "
                          "its failure.json records it and the report counts it)", _suite_train)
    train.add_argument("--method", action="append", help="only this method (repeatable; default: all)")
    train.add_argument("--jobs", type=_positive, default=None, help="parallel runs (default: suite.jobs)")
    train.add_argument("--executor", choices=["serial", "processes", "ray"], default=None,
                       help="where runs execute (default: suite.executor); results never depend on it")
    train.add_argument("--ray-address", default=None, help="a Ray cluster's address (default: suite.ray.address; "
                       "none: a local cluster of --jobs CPUs)")
    suite_command("report", "write summary tables (Markdown, CSV, metrics.json), learning curves (CSV, PNG)",
                  _suite_report).add_argument("--out", type=Path, help="folder (default: <root>/reports/<suite>)")
    cost = suite_command("cost", "estimate the FLOPs and GPU-hours of the suite's runs before running them "
                         "(methods' training FLOPs measured on a stand-in of each setting's data)", _suite_cost)
    cost.add_argument("--tflops", type=float, default=None, help="assumed sustained TFLOP/s of one GPU (default: "
                      "DEFAULT_TFLOPS of bench/report/cost.py, which states where it comes from)")
    cost.add_argument("--gpu", type=Path, action="append", default=[], help="a step-time file of benchmarks/gpu.py "
                      "measure (e.g. benchmarks/gpu/gpu-nvidia-h200.json): GPU-hours at the step times measured "
                      "there as well; repeat it for one column per GPU")
    timing = suite_command("time", "measure every method's seconds per round on the settings whose budget is time_of "
                           "(deliberately, like pinning: the runs' rounds derive from the file it writes)", _suite_time)
    timing.add_argument("--rounds", type=_positive, default=5, help="rounds per probe (the first and last are left out)")
    timing.add_argument("--repeats", type=_positive, default=3, help="turns every method takes (the median is kept)")
    pin = suite_command("pin", "rewrite the suite's pinned values from its runs (deliberately)", _pin, sub)
    pin.add_argument("--out", type=Path, help="pinned file (default: reports/pinned/<suite>.json beside --params)")
    pin.add_argument("--per-seed-tol", type=float, help="absolute tolerance per seed in another environment "
                     "(default: the policy in bench/report/pinned.py)")
    pin.add_argument("--mean-tol", type=float, help="absolute tolerance of the mean over seeds in another "
                     "environment (default: the policy in bench/report/pinned.py)")
    compare = suite_command("compare", "compare the suite's runs with its pinned values and verify its partitions; exit 1 "
                            "on a drifted, changed or missing value or a forged partition (a suite with no pinned "
                            "file is all 'not pinned')", _compare, sub)
    compare.add_argument("--pinned", type=Path, help="pinned file (default: as for `bench pin`)")
    compare.add_argument("--out", type=Path, help="write the drift table to this file and print only the summary "
                         "and what failed")

    audit = sub.add_parser("audit", help="trace one cell of a report to its runs, configs, data, code and "
                           "environment; --rerun checks that its runs reproduce bitwise",
                           description="CELL: <heading>/.../<row>/<column> as printed (headings: prefixes of the "
                                       "report's, innermost last, e.g. 'global/fedavg/iid final'), or the cell id "
                                       "<method>/<setting>/<statistic> (e.g. fedavg/iid/final_global_acc). The runs' "
                                       "records come from the suite's results folder (`dvc pull` fetches them). "
                                       "Exit 1 when a value differs from its pinned one, a run's file from what "
                                       "dvc.lock recorded, a config, dataset or partition from the one the runs "
                                       "used, or a re-run from the record.")
    audit.add_argument("report", type=Path, help="a suite's report: reports/<suite>/summary.md or paper.md")
    audit.add_argument("cell", help="the cell, as printed or by its id")
    audit.add_argument("--params", type=Path, help="the suite's params file (default: <report>/../../../params.yaml)")
    audit.add_argument("--data-dir", **data_dir)
    audit.add_argument("--rerun", action="store_true", help="re-execute the cell's runs in a scratch folder and "
                       "compare every recorded value bitwise")
    audit.add_argument("--seed", type=int, help="with --rerun: only this seed")
    audit.add_argument("--scratch", type=Path, help="with --rerun: folder for the re-runs (default: the system's "
                       "temporary folder)")
    audit.set_defaults(func=_audit)

    versus = suite_command("versus", "run a new method on a suite's pinned partitions and seeds and compare it with "
                           "each pinned baseline by paired statistics", _versus, sub)
    versus.add_argument("method", help="the new method: a key of the suite's methods, or an algorithm name (add its "
                        "hyperparameters with -S methods.<method>.<key>=<value>)")
    versus.add_argument("--statistic", default="final_global_acc", help="the statistic compared (default: "
                        "final_global_acc; any the pinned file holds)")
    versus.add_argument("--baseline", action="append", help="only this baseline (repeatable; default: every pinned method)")
    versus.add_argument("--from-runs", action="store_true", help="take the baselines' values from the suite's runs "
                        "(results/) instead of the pinned file")
    versus.add_argument("--out", type=Path, help="folder for the new runs and the comparison (default: "
                        "runs/versus/<suite>/<method>)")
    versus.add_argument("--jobs", type=_positive, default=None, help="parallel processes (default: suite.jobs)")
    versus.add_argument("--no-train", action="store_true", help="fail instead of training missing runs")
    versus.add_argument("--no-mlflow", action="store_true", help="do not log the comparison to MLflow")
    sensitivity = suite_command("sensitivity", "how well the suite's pinned seeds tell methods apart: seed spread, "
                                "method spread, the smallest difference the paired test detects", _sensitivity, sub)
    sensitivity.add_argument("--statistic", action="append", help="statistic (repeatable; default: the suite's)")
    sensitivity.add_argument("--pinned", type=Path, help="pinned file (default: as for `bench pin`)")

    tracking = sub.add_parser("mlflow", help="MLflow store maintenance").add_subparsers(dest="mlflow_command",
                                                                                         required=True)
    sync = tracking.add_parser("sync", help="log every finished or failed run under FOLDERs that MLflow lacks",
                               description="Walk FOLDERs for run records (config.yaml with metrics.json or "
                                           "failure.json) and log to MLflow ($MLFLOW_TRACKING_URI, else ./mlflow.db) "
                                           "each run no MLflow run points at (tag out_dir): runs killed while "
                                           "logging, or run with tracking.mlflow=false.")
    sync.add_argument("folders", nargs="+", type=Path, metavar="FOLDER")
    sync.set_defaults(func=_mlflow_sync)

    models = sub.add_parser("models", help="list models (parameters, FLOPs per image, feature dimension) and the "
                            "papers' (model, dataset) configurations with their exact parameter counts")
    models.add_argument("--papers", type=Path, default=Path("pipelines"),
                        help="the folder of paper plug-ins, each <folder>/*/paper.py (default: pipelines)")
    models.set_defaults(func=_models)
    sub.add_parser("algorithms", help="list the registered algorithms").set_defaults(func=_algorithms)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        _check_kernel_level()
        args = build_parser().parse_args(argv)
        return args.func(args)
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except Diverged as exc:
        print(f"error: run failed: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def _check_kernel_level() -> None:
    from bench import CPU_KERNELS

    level = os.environ.get("BENCH_CPU_KERNELS")
    if level is not None and level.strip().lower() not in CPU_KERNELS:
        raise BenchError(f"BENCH_CPU_KERNELS={level} is not a CPU-kernel level; set it to "
                         f"{' or '.join(CPU_KERNELS)}, or unset it (native)")


def entry() -> None:
    """The ``bench`` console script: :func:`main`, then exit without the interpreter's teardown
    (:func:`bench.exit_without_teardown`: 0.8-0.9 s of every ``bench`` process, measured)."""
    exit_without_teardown(main())


if __name__ == "__main__":
    entry()

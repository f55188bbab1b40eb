"""MLflow logging for one ``bench run``, prepared in a helper process while the run trains.

Importing MLflow and its SQL store (SQLAlchemy, Alembic) costs about 1.3 s of CPU in every process
that logs, measured (benchmarks/test_fixed_cost.py); logging the run itself takes about 0.1 s. A
:class:`BackgroundLogger` starts ``python -m bench.tracking.background`` before the run: the helper
imports MLflow and opens a SQLite store that exists (it creates none: the run may not log) on another
core while this process imports torch and trains, then waits for the run.
:meth:`BackgroundLogger.log` hands it the finished run (:class:`~bench.tracking.MlflowRun`, JSON on
its stdin) and waits until it is logged, so MLflow holds the run when ``bench run`` returns, as before.

Nothing is lost: if the helper fails (it could not start, died, or could not log), this process logs
the run itself (:func:`~bench.tracking.write_mlflow`), and an error there is raised as it always was.
A helper given no run (MLflow is off for the run, or the run failed on bad input) is stopped, and one
whose parent was killed reads the end of its input and exits without logging. It never imports torch.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench import exit_without_teardown
from bench.tracking import MlflowRun, mlflow_record, mlflow_uri, sqlite_file, store_lock, write_mlflow


class BackgroundLogger:
    """A helper process that logs one run to MLflow (see the module's docstring)."""

    def __init__(self, start: bool = True) -> None:
        """``start``: start the helper (False: a run that will not log; :meth:`log` logs in this process)."""
        self.process: subprocess.Popen[str] | None = None
        if start:
            with contextlib.suppress(OSError):  # no helper: log() logs in this process
                self.process = subprocess.Popen([sys.executable, "-m", "bench.tracking.background"],
                                                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                                stderr=subprocess.DEVNULL, text=True)

    def log(self, config: Any, out_dir: str | Path) -> None:
        """Log the run recorded in ``out_dir`` (as :func:`~bench.tracking.log_mlflow` does) through the
        helper, or in this process when the helper fails."""
        run = mlflow_record(config, Path(out_dir))
        process, self.process = self.process, None
        if process is not None:
            try:
                process.communicate(json.dumps(dataclasses.asdict(run)) + "\n")
                if process.returncode == 0:
                    return
            except OSError:  # the helper is gone (a broken pipe)
                process.kill()
                process.wait()
        write_mlflow(run)

    def close(self) -> None:
        """Stop a helper that was given no run (it has written nothing)."""
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None


def _serve() -> None:
    """The helper: prepare MLflow and its store, then log the one run read from stdin (none: exit)."""
    import mlflow

    uri = mlflow_uri()
    if (store := sqlite_file(uri)) is not None and store.exists():
        with store_lock():
            mlflow.MlflowClient(uri).search_experiments(max_results=1)  # imports and opens the SQL store
    line = sys.stdin.readline()
    if line.strip():
        fields = json.loads(line)
        write_mlflow(MlflowRun(**{**fields, "metrics": [tuple(m) for m in fields["metrics"]]}))


if __name__ == "__main__":
    _serve()
    exit_without_teardown(0)

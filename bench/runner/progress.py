"""Progress of many runs, for a terminal and for a log: a tqdm bar over all rounds of all runs when
stderr is a terminal; otherwise a plain status line every ``interval`` seconds (no carriage returns),
and one line per finished run in both cases."""
from __future__ import annotations

import sys
import time
from types import TracebackType

from tqdm import tqdm


class SuiteProgress:
    def __init__(self, name: str, rounds: list[int], interval: float = 30.0) -> None:
        self.name, self.rounds, self.interval = name, rounds, interval
        self.seen = [0] * len(rounds)
        self.finished = 0
        self.started = self.last_line = time.monotonic()
        self.bar = tqdm(total=sum(rounds), desc=f"suite {name}", unit="round", file=sys.stderr) \
            if sys.stderr.isatty() else None

    def round_done(self, index: int, round_index: int) -> None:
        step = round_index - self.seen[index]  # a resumed run starts past round 1
        self.seen[index] = round_index
        if self.bar is not None:
            self.bar.update(step)
        elif time.monotonic() - self.last_line >= self.interval:
            self.last_line = time.monotonic()
            self.write(self.status())

    def run_done(self, index: int, line: str) -> None:
        self.finished += 1
        self.round_done(index, self.rounds[index])
        self.write(line)

    def status(self) -> str:
        done, total = sum(self.seen), sum(self.rounds)
        return (f"suite {self.name}: " + tqdm.format_meter(done, total, time.monotonic() - self.started,
                                                          unit="round", ncols=0)
                + f", {self.finished}/{len(self.rounds)} runs finished")

    def write(self, line: str) -> None:
        if self.bar is not None:
            self.bar.write(line, file=sys.stdout)
        else:
            print(line, flush=True)

    def __enter__(self) -> SuiteProgress:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        if self.bar is not None:
            self.bar.close()
        elif kind is None:
            self.write(self.status())

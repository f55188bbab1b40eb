"""Errors the CLI turns into one clear line (exit status 2 for bad input, 1 for a failed run)."""


class BenchError(Exception):
    """Bad input: a config key, a name, a file. The message names the problem and the fix."""


class DataUnavailable(BenchError):
    """A dataset's raw files are neither on disk nor downloadable (offline): the message names them."""


class Diverged(RuntimeError):
    """A training loss became NaN, infinite or exploded, or a model's parameters became non-finite."""

    def __init__(self, round_index: int, client: int | str, reason: str = "the loss became NaN or inf") -> None:
        self.round_index = round_index
        self.client = client
        self.reason = reason
        super().__init__(f"diverged at round {round_index} (client {client}): {reason}; lower the learning rate "
                         "or check the data")

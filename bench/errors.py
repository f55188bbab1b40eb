"""Errors the CLI turns into one clear line (exit status 2 for bad input, 1 for a failed run)."""


class BenchError(Exception):
    """Bad input: a config key, a name, a file. The message names the problem and the fix."""


class Diverged(RuntimeError):
    """A local loss became NaN or infinite."""

    def __init__(self, round_index: int, client: int | str) -> None:
        self.round_index = round_index
        self.client = client
        super().__init__(f"diverged at round {round_index} (client {client}): the loss became NaN or inf; "
                         "lower the learning rate or check the data")

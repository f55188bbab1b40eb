"""The runner (above ``algorithms``): rounds, participation, the evaluation schedule, per-client
records, checkpoints and resume (:mod:`.federation`, :mod:`.checkpoint`), and executors that run one
experiment or many in parallel processes (:mod:`.executor`)."""

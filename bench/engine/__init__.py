"""The federation runtime: clients, server state, RNG streams, local training, evaluation, executors."""

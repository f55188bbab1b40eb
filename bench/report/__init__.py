"""Reports: tables and plots of a suite's runs, and comparison against pinned values."""

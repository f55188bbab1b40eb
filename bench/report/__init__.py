"""Reports: tables and plots of a suite's runs beside paper and pinned values, and drift checks."""

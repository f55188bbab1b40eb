"""Reports: tables and plots beside paper and pinned values."""

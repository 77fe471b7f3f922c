"""tq-triton sessions (filled in by the tq-triton work)."""

"""insitu solvers (placeholder package; see the open issues)."""

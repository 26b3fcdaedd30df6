"""insitu adaptors (placeholder package; see the open issues)."""

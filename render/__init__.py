"""insitu render (placeholder package; see the open issues)."""

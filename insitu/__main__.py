"""``python -m insitu``: the ``insitu`` command (:mod:`insitu.cli`)."""

import sys

from .cli import main

sys.exit(main())

"""``python -m es_rag.cli``: the ``es-rag`` command."""

import sys

from es_rag.cli import main

sys.exit(main())

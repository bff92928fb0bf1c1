"""The parts of ``scripts/pdf-eval-set.py``: Markdown rendered to PDF (``render``), spans mapped into it (``align``)."""

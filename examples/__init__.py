"""Example apps built on es_rag (see docs/apps.md); not part of the installed package."""

"""Tests of the strict cluster double itself (its rules, and its replay of Elasticsearch's REST YAML tests);
the double lives in tests/support/double."""

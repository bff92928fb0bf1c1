"""The strict Elasticsearch double (see :mod:`tests.double.cluster`)."""

"""The strict Elasticsearch double (see :mod:`tests.support.double.cluster`)."""

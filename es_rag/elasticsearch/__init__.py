"""The Elasticsearch side: request bodies and versioned assets (pure), the client and probe, setup and doctor,
response parsing, the version store and the backend."""

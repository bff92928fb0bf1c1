"""Source versions: the registry state machine and its request builders, and the version-store protocol."""

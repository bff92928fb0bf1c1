"""Shared test support: doubles, factories, transports (never a test module)."""

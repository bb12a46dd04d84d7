"""Engines: model backends, oracles, verification, sessions, events, traces (no Qt)."""

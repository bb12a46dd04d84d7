"""EAGLE-style heads: a small decoder layer drafting from the target's own features."""

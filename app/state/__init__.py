"""Plain state, no widgets: what the window remembers (settings, server keys) and what a run in
the window is made of (run_setup)."""

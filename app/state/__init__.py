"""Plain state, no widgets: the lanes model the board and graphs draw, what the window
remembers (settings, server keys) and what a run in the window is made of (run_setup)."""

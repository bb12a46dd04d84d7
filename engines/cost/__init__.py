"""What speculation costs here: the step cost model, the measured cost profile, auto K, and
why a lane did not win.
"""

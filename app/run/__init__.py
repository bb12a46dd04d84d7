"""The run's controllers: a live run (live), the window's replay mode and its trace player,
the checks before a run and the engine's other tasks, the link to an engine process (local,
or on another machine), fetching a model, and Ctrl-C for a window driven without a person."""

"""The application: main window, wiring, the engine process's client, settings, command
line."""

"""The application: main window, wiring, worker threads, settings, command line."""

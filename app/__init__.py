"""The application: the window and the command line, in rooms named for what they hold.

main_window.py  the window: lays out the views and wires them to the run's controllers
views/   what the person sees: the lanes, the prompt panel, the window's menus and appearance
run/     the run's controllers: a live run, replays, checks and tasks, the link to the engine
         process (local or on another machine), fetching models
state/   plain state, no widgets: the lanes model, settings, server keys, a run's set-up
export/  getting a race out: pictures, tables, traces, a video, an HTML page
cli/     `specviz` and its subcommands

Each imports only what stands below it in this order: cli, main_window, export, run, views,
state (qt_app, the Qt application the window commands start, imports none of them).
"""

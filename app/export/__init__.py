"""Getting a race out of specviz without the window: a self-contained HTML page (page.py)."""

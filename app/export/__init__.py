"""Getting a race out: the window's pictures, figures table and trace copies (files), a
self-contained HTML page (page, no Qt), a video drawn by a window of its own (video,
race_window), and the File menu's exports (window_exports)."""

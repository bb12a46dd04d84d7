"""What the person sees, laid out by the window (app.main_window): the lanes (board,
lane_widget; a llama-server lane's speculation types: spec_types), the prompt panel, the model
picker, the server-key dialog, the window's actions and menus (menus) and its theme and
presentation mode (appearance)."""

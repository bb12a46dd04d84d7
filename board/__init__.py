"""What the window, the exported page and the video show, without Qt: the lanes model the
views observe, where a lane parted from plain decoding, lane titles, the one-prompt rule, the
token kinds with their colours and words, the words for tokens and verdicts, and a step taken
apart for the anatomy view. Below widgets/ (which draw it) and above engines/ (which it
reads)."""

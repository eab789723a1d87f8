"""mam-minitmux: a minimal tmux backend for mam, written only against mam.api."""

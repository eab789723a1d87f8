"""The tmux backend of mam: a server is a tmux socket name (`tmux -L NAME`), an agent a tmux session on it."""

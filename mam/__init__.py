"""mam, the multi-agent mux: keeps track of coding agents running in terminal multiplexer panes."""

__version__ = "0.1.0"

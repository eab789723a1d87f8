"""mam, the multi-agent mux: keeps track of coding agents running in terminal multiplexer panes."""

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    """`mam.hookimpl` for plugin authors, imported only when asked for: `import mam` stays cheap."""
    if name == "hookimpl":
        from mam.plugin.spec import hookimpl  # start-up: pluggy loads only when a plugin asks for it

        return hookimpl
    raise AttributeError(f"module 'mam' has no attribute {name!r}")

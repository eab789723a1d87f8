"""Agent kinds: which program is which agent, how to resume it, and the screen rules that read its state.

The data is `agents.yaml` next to this file, overridable per workspace by `.mam/states.yaml` (docs/states.md).
Nothing is imported here, so importing the package costs nothing. May import registry and util only.
"""

"""mam-wrap: a plugin that declares no backend and implements every hook of mam, written only against mam.api."""

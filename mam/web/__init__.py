"""`mam serve`: the fleet on a web page and over HTTP (the ASGI app, its routes, auth, metrics), loaded by that
command alone. May import mam.live, the commands and the layers below them; never mam.cli. The web framework is
imported only here."""

"""The agents' own word: `mam report STATE`, which their hooks run (report), and `mam hooks` (catalog, ops).
May import calls and the layers below; this file imports nothing, so `mam report` pays for report alone."""

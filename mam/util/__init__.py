"""Small helpers every layer uses: errors, names, quoting, masking, safe files, log files, progress, tables.
Imports nothing of mam outside util."""

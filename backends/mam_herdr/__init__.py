"""The herdr backend of mam: built in, and the default."""

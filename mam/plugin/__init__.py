"""The plugin machinery: the hook specifications (spec), the manager that loads backends and calls the hooks
(manager), the core's own implementations and classifiers (builtin), entry point discovery (entrypoints) and the
records that cross the hook boundary (records). Plugin authors import from `mam.api` only."""

"""The plugin machinery: the hook specifications (spec), the manager that loads backends and calls the hooks
(manager), the core's own implementations and classifiers (builtin), entry point discovery (entrypoints), the
records that cross the hook boundary (records) and the scrub rules plugins add to (envscrub). Plugin authors
import from `mam.api` only. May import registry and util; never config, kinds or anything above."""

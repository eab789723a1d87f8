"""The jobs on servers: a command's context (app), asking them all (fanout), starting one (bootstrap), hosts.
May import calls, plugin, config, kinds, registry and util; never the agents' jobs, nor anything above."""

"""How a backend's calls travel: here (runner) or over ssh (route, transport, batch, remote); machine; shims.
May import plugin, config, kinds, registry and util; never servers, agents, nor anything above."""

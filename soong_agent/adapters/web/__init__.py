"""web_fetch over httpx under the network policy."""

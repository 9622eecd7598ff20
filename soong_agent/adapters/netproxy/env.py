"""The environment that points a command's programs at the filtering proxy (SBX-4): the proxy
variables curl, Python, pip, npm and most HTTP clients read, and git's ``http.proxy`` through
``GIT_CONFIG_COUNT``. The proxy URL carries the command's token as its user name, so the proxy
can name the command a refused connection came from."""

from __future__ import annotations

PROXY_USER = "soong"


def proxy_env(port: int, token: str, *, host: str = "127.0.0.1") -> dict[str, str]:
    """The variables for a command whose proxy listens on `host:port` (inside its sandbox)."""
    http = f"http://{PROXY_USER}:{token}@{host}:{port}"
    socks = f"socks5h://{PROXY_USER}:{token}@{host}:{port}"
    env = {
        "HTTP_PROXY": http,
        "HTTPS_PROXY": http,
        "ALL_PROXY": socks,
        "http_proxy": http,
        "https_proxy": http,
        "all_proxy": socks,
        # a host's NO_PROXY would send loopback requests around the proxy, to nothing
        "NO_PROXY": "",
        "no_proxy": "",
        "npm_config_proxy": http,
        "npm_config_https_proxy": http,
        "PIP_PROXY": http,
        "GIT_CONFIG_COUNT": "1",
        "GIT_CONFIG_KEY_0": "http.proxy",
        "GIT_CONFIG_VALUE_0": http,
    }
    return env

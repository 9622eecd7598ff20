"""The network allow-list of web_fetch (SBX-2), against loopback listeners only.

`allowed_site` is listed in `tools.network.allowed_hosts` (as ``127.0.0.1:<port>``);
`forbidden_site` never is: any connection it accepts is a failure. The approval callback allows
every fetch, so only the allow-list can be what stops it.
"""

from __future__ import annotations

import pytest

from soong_agent.adapters.web.fetcher import HttpxWebFetcher
from soong_agent.domain.permissions import parse_rule
from soong_agent.ports.errors import PermissionDenied
from tests.security.conftest import ALLOW, DENY, Listener, World, network_config


def listed(site: Listener, extra: str = "") -> str:
    return network_config(f"127.0.0.1:{site.port}", extra=extra)


def fetch(url: str) -> tuple[str, dict[str, object]]:
    return ("web_fetch", {"url": url})


async def test_control_the_allowed_listener_is_reached(
    world: World, allowed_site: Listener, forbidden_site: Listener
) -> None:
    outcome = await world.run(
        fetch(allowed_site.url("/page")), approval=ALLOW, config=listed(allowed_site)
    )
    assert allowed_site.paths == ["/page"]
    assert allowed_site.body.decode() in outcome.seen_by_model
    assert not forbidden_site.hit


async def test_a_listener_that_is_not_listed_gets_no_request(
    world: World, allowed_site: Listener, forbidden_site: Listener
) -> None:
    await world.run(fetch(forbidden_site.url("/")), approval=ALLOW, config=listed(allowed_site))
    assert not forbidden_site.hit


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
async def test_redirect_from_an_allowed_to_a_forbidden_listener(
    world: World, allowed_site: Listener, forbidden_site: Listener, status: int
) -> None:
    allowed_site.redirect("/go", forbidden_site.url("/stolen?data=1"), status)
    await world.run(fetch(allowed_site.url("/go")), approval=ALLOW, config=listed(allowed_site))
    assert allowed_site.paths == ["/go"]  # the first hop was made
    assert not forbidden_site.hit


@pytest.mark.parametrize(
    "location",
    [
        "//127.0.0.1:{port}/scheme-relative",
        "http://localhost:{port}/by-name",
        "http://[::ffff:127.0.0.1]:{port}/mapped",
        "http://2130706433:{port}/decimal",
        "http://127.1:{port}/short",
        "http://0.0.0.0:{port}/unspecified",
        "http://127.0.0.1.:{port}/trailing-dot",
        "http://127.0.0.1:{allowed}@127.0.0.1:{port}/userinfo",
        "  http://127.0.0.1:{port}/padded",
    ],
)
async def test_redirect_to_another_spelling_of_the_forbidden_listener(
    world: World, allowed_site: Listener, forbidden_site: Listener, location: str
) -> None:
    target = location.format(port=forbidden_site.port, allowed=allowed_site.port)
    allowed_site.redirect("/go", target)
    await world.run(fetch(allowed_site.url("/go")), approval=ALLOW, config=listed(allowed_site))
    assert allowed_site.hit
    assert not forbidden_site.hit


async def test_redirect_chain_that_ends_on_the_forbidden_listener(
    world: World, allowed_site: Listener, forbidden_site: Listener
) -> None:
    allowed_site.redirect("/1", "/2", 301)
    allowed_site.redirect("/2", allowed_site.url("/3"), 307)
    allowed_site.redirect("/3", forbidden_site.url("/4"), 302)
    await world.run(fetch(allowed_site.url("/1")), approval=ALLOW, config=listed(allowed_site))
    assert allowed_site.paths == ["/1", "/2", "/3"]
    assert not forbidden_site.hit


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:{allowed}@127.0.0.1:{port}/",
        "http://127.0.0.1:{allowed}:x@127.0.0.1:{port}/",
        "http://evil@127.0.0.1:{port}/",
        "http://127.0.0.1:{port}#@127.0.0.1:{allowed}/",
        "http://127.0.0.1:{port}?@127.0.0.1:{allowed}/",
        "http://127.0.0.1:{port}\\@127.0.0.1:{allowed}/",
        "http://localhost:{port}/",
        "http://[::ffff:127.0.0.1]:{port}/",
        "http://0x7f000001:{port}/",
        "http://2130706433:{port}/",
        "http://0177.0.0.1:{port}/",
        "http://127.1:{port}/",
        "http://0.0.0.0:{port}/",
        "http://127.0.0.1.:{port}/",
        "HTTP://127.0.0.1:{port}/",
    ],
)
async def test_url_tricks_do_not_reach_the_forbidden_listener(
    world: World, allowed_site: Listener, forbidden_site: Listener, url: str
) -> None:
    target = url.format(port=forbidden_site.port, allowed=allowed_site.port)
    await world.run(fetch(target), approval=ALLOW, config=listed(allowed_site))
    assert not forbidden_site.hit


async def test_userinfo_in_front_of_the_allowed_host_is_not_fetched(
    world: World, allowed_site: Listener
) -> None:
    """``http://user@allowed/`` is refused too (credentials are never sent)."""
    target = f"http://127.0.0.1:{allowed_site.port}@127.0.0.1:{allowed_site.port}/"
    await world.run(fetch(target), approval=ALLOW, config=listed(allowed_site))
    assert not allowed_site.hit


@pytest.mark.parametrize("domain", ["localhost", "127.0.0.1"])
async def test_allowed_domains_do_not_open_loopback_addresses(
    world: World, allowed_site: Listener, domain: str
) -> None:
    """A domain entry allows names, but a loopback address needs an allowed_hosts entry."""
    host = "localhost" if domain == "localhost" else "127.0.0.1"
    config = network_config(domains=[domain])
    await world.run(fetch(f"http://{host}:{allowed_site.port}/"), approval=ALLOW, config=config)
    assert not allowed_site.hit


async def test_a_host_listed_with_another_port_does_not_open_this_one(
    world: World, allowed_site: Listener, forbidden_site: Listener
) -> None:
    await world.run(
        fetch(forbidden_site.url("/")),
        fetch(f"http://localhost:{allowed_site.port}/"),
        approval=ALLOW,
        config=listed(allowed_site),
    )
    assert not forbidden_site.hit
    assert not allowed_site.hit  # "localhost" is not the listed "127.0.0.1"


async def test_network_policy_deny_blocks_even_an_allowed_host(
    world: World, allowed_site: Listener
) -> None:
    config = listed(allowed_site) + '[permissions]\nnetwork_policy = "deny"\n'
    await world.run(fetch(allowed_site.url("/")), approval=ALLOW, config=config)
    assert not allowed_site.hit


async def test_deny_rule_for_the_domain_blocks_without_asking(
    world: World, allowed_site: Listener
) -> None:
    config = listed(allowed_site) + '[permissions]\ndeny = ["web_fetch(domain:127.0.0.1)"]\n'
    outcome = await world.run(fetch(allowed_site.url("/")), approval=ALLOW, config=config)
    assert not allowed_site.hit
    assert not outcome.asked


async def test_user_denial_blocks_an_allowed_host(world: World, allowed_site: Listener) -> None:
    outcome = await world.run(
        fetch(allowed_site.url("/")), approval=DENY, config=listed(allowed_site)
    )
    assert outcome.asked
    assert not allowed_site.hit


async def test_proxy_variables_do_not_divert_fetches(
    world: World,
    allowed_site: Listener,
    forbidden_site: Listener,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in (
        "HTTP_PROXY",
        "http_proxy",
        "HTTPS_PROXY",
        "https_proxy",
        "ALL_PROXY",
        "all_proxy",
    ):
        monkeypatch.setenv(name, forbidden_site.origin)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    await world.run(fetch(allowed_site.url("/")), approval=ALLOW, config=listed(allowed_site))
    assert allowed_site.hit
    assert not forbidden_site.hit


async def test_plan_mode_reaches_no_listener(world: World, allowed_site: Listener) -> None:
    """Plan mode is read-only: neither web_fetch nor a command may reach even a listed host."""
    outcome = await world.run(
        (
            "run_command",
            {"command": f"curl -s {allowed_site.url('/')} || wget -q -O- {allowed_site.url('/')}"},
        ),
        fetch(allowed_site.url("/")),
        approval=ALLOW,
        mode="plan",
        config=listed(allowed_site),
    )
    assert not allowed_site.hit
    assert not outcome.asked


# --- one domain syntax (issue 11 item 5): `*.x` is subdomains only, `x` the domain and below ------


async def test_a_subdomain_wildcard_does_not_admit_the_bare_domain(
    world: World, allowed_site: Listener
) -> None:
    """``*.localhost`` names the subdomains of localhost, as ``domain:*.x`` does in rules: not
    ``localhost`` itself (the listener's address is listed, so only the name check can stop it)."""
    config = network_config(f"127.0.0.1:{allowed_site.port}", domains=["*.localhost"])
    outcome = await world.run(
        fetch(f"http://localhost:{allowed_site.port}/"), approval=ALLOW, config=config
    )
    assert not allowed_site.hit
    assert "not under tools.network.allowed_domains" in outcome.seen_by_model


async def test_control_an_entry_without_wildcard_admits_the_domain_itself(
    world: World, allowed_site: Listener
) -> None:
    config = network_config(f"127.0.0.1:{allowed_site.port}", domains=["localhost"])
    await world.run(fetch(f"http://localhost:{allowed_site.port}/"), approval=ALLOW, config=config)
    assert allowed_site.hit


@pytest.mark.parametrize(
    ("entry", "host", "admitted"),
    [
        ("*.example.test", "example.test", False),
        ("*.example.test", "api.example.test", True),
        ("*.example.test", "a.b.example.test", True),
        ("*.example.test", "evilexample.test", False),
        ("example.test", "example.test", True),
        ("example.test", "api.example.test", True),
        ("example.test", "evilexample.test", False),
        (".example.test", "example.test", True),
        ("*.EXAMPLE.test.", "Api.Example.Test", True),
    ],
)
async def test_allowed_domains_match_like_domain_rules(
    allowed_site: Listener, entry: str, host: str, admitted: bool
) -> None:
    """The fetcher and ``web_fetch(domain:…)`` rules read one syntax (`DomainPattern`)."""

    async def resolve(name: str) -> list[str]:
        return ["127.0.0.1"]

    fetcher = HttpxWebFetcher(
        allowed_hosts=[f"127.0.0.1:{allowed_site.port}"],
        allowed_domains=[entry],
        policy="allowlist",
        resolver=resolve,
    )
    url = f"http://{host}:{allowed_site.port}/"
    if admitted:
        await fetcher.fetch(url, max_bytes=1000, timeout_s=5)
        assert allowed_site.hit
    else:
        with pytest.raises(PermissionDenied, match="allowed_domains"):
            await fetcher.fetch(url, max_bytes=1000, timeout_s=5)
        assert not allowed_site.hit
    rule = parse_rule(f"web_fetch(domain:{entry.lstrip('.')})")
    assert rule.matches_url(url) is admitted

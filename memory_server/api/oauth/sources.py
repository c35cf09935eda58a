"""Who is asking, for the shares of the OAuth caps: the client address of the request being handled, and the
address and network it counts against.

The SDK's handlers call the provider without the request, so the address travels in a context variable set
by the route (`routes.PerAddress`) for the request it handles, as the per-address limits see it (the peer, or
X-Forwarded-For from a trusted proxy). An address counts as `middleware.client_key` limits it (an IPv6 one
by its /64); its network is its IPv4 /24 or IPv6 /48 (what one party routinely holds).
"""

from __future__ import annotations

import ipaddress
from contextvars import ContextVar

from memory_server.api.middleware import client_key
from memory_server.storage.oauth_records import Source

IPV4_NETWORK, IPV6_NETWORK = 24, 48

requester: ContextVar[str | None] = ContextVar("oauth_requester", default=None)


def current_source() -> Source:
    """The Source of the request being handled ('unknown' outside one: e.g. a provider called directly)."""
    return source_of(requester.get() or "unknown")


def source_of(address: str) -> Source:
    try:
        ip = ipaddress.ip_address(address.strip("[]"))
    except ValueError:
        return Source(address[:100], address[:100])  # not an IP address (a Unix socket's peer): its own network
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    prefix = IPV4_NETWORK if isinstance(ip, ipaddress.IPv4Address) else IPV6_NETWORK
    return Source(client_key(str(ip)), str(ipaddress.ip_network(f"{ip}/{prefix}", strict=False)))

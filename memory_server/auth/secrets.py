"""Secrets: generated, hashed, verified.

The Basic secret is stored as an scrypt hash; tokens are 256-bit random strings stored as SHA-256 (a
brute-force search of a 256-bit space is hopeless, so a slow hash buys nothing and costs every request).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets

from memory_server.errors import InvalidParameters

SITE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
TOKEN_PREFIX = "mst_"
_SCRYPT = {"n": 2**14, "r": 8, "p": 1}


def new_secret() -> str:
    return secrets.token_urlsafe(24)


def new_token() -> tuple[str, str]:
    """(token id, token): the id names it in listings, the token is shown once."""
    return secrets.token_hex(6), f"{TOKEN_PREFIX}{secrets.token_urlsafe(32)}"


def hash_secret(secret: str) -> str:
    salt = secrets.token_bytes(16)
    digest = hashlib.scrypt(secret.encode(), salt=salt, dklen=32, **_SCRYPT)
    return f"scrypt${_SCRYPT['n']}${_SCRYPT['r']}${_SCRYPT['p']}${salt.hex()}${digest.hex()}"


def verify_secret(secret: str, stored: str) -> bool:
    try:
        _, n, r, p, salt, digest = stored.split("$")
        candidate = hashlib.scrypt(secret.encode(), salt=bytes.fromhex(salt), dklen=32, n=int(n), r=int(r), p=int(p))
    except (ValueError, TypeError):
        return False
    return hmac.compare_digest(candidate.hex(), digest)


_DUMMY_HASH: list[str] = []


def dummy_hash() -> str:
    """A fixed scrypt hash to verify against for unknown users (hashing a fresh one would cost 2 scrypts)."""
    if not _DUMMY_HASH:
        _DUMMY_HASH.append(hash_secret(new_secret()))
    return _DUMMY_HASH[0]


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def check_site_name(name: object) -> str:
    if not isinstance(name, str) or not SITE_NAME.fullmatch(name):  # match() would accept "name\n"
        raise InvalidParameters("site name must be 1-64 characters of [A-Za-z0-9_-], starting alphanumeric")
    return name

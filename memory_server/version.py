"""This project's version: what `serverInfo.version` and the build-info metric report.

The installed distribution's metadata is the source; a checkout run without installing (`python -m memory_server`
from a copy of the tree) reads it from pyproject.toml next to the package instead.
"""

from __future__ import annotations

import tomllib
from importlib import metadata
from pathlib import Path

DISTRIBUTION = "memory-server"
UNKNOWN = "0+unknown"


def project_version() -> str:
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        pass
    try:
        with open(Path(__file__).resolve().parent.parent / "pyproject.toml", "rb") as file:
            project = tomllib.load(file).get("project", {})
    except (OSError, tomllib.TOMLDecodeError):
        return UNKNOWN
    version = project.get("version") if project.get("name") == DISTRIBUTION else None
    return version if isinstance(version, str) and version else UNKNOWN


__version__ = project_version()

"""Where this user's store lives by default: the platform's per-user data folder (platformdirs)."""

from __future__ import annotations

from pathlib import Path

APP_NAME = "memory-server"


def default_data_dir() -> Path:
    """$XDG_DATA_HOME/memory-server (~/.local/share) on Linux, ~/Library/Application Support/memory-server on
    macOS, %LOCALAPPDATA%\\memory-server on Windows."""
    import platformdirs  # light, but only the default needs it

    return Path(platformdirs.user_data_dir(APP_NAME, appauthor=False))

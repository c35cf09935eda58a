"""`memory-server client-config CLIENT`: a ready-to-paste MCP server entry for a client (Claude Desktop, Claude
Code, Cursor, VS Code, Windsurf, Codex), over stdio or HTTP, and `--write` to merge it into the client's own
configuration file.

`clients` knows each client's format and file, `files` merges an entry into a JSON or TOML file (a backup
first, other servers untouched), `command` is the CLI command (the credential, the output).
"""

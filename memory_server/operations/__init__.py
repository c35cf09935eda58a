"""The typed operations, each written once: MCP tools, REST routes, the console and the CLI call them."""

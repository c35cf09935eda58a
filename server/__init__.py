"""memory-server: durable conversation logs and searchable saved memories for AI agents."""

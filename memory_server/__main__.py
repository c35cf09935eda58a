"""`python -m memory_server` is the `memory-server` command."""

from memory_server.admin.cli import main

if __name__ == "__main__":
    main()

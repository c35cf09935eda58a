"""`python -m server` is the `memory-server` command."""

from server.admin.cli import main

if __name__ == "__main__":
    main()

"""`python -m memory_server` is the `memory-server` command."""

from memory_server.launch import main

if __name__ == "__main__":
    main()

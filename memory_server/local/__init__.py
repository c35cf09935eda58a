"""One store per user, shared by every local client: the owner process, its socket, and the stdio bridge."""

"""MCP servers, started and spoken to with the official ``mcp`` SDK: the configuration file, the manager that
owns each server's connection and state, and the built-in example server. The SDK is imported only when a server
starts, so the window's start-up does not pay for it."""

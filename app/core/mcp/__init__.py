"""Model Context Protocol, the pure parts: the servers' configuration (the app's file and the ``mcp.json`` that
Claude Desktop and Cursor use), the built-in server's calculator and folder confinement, and result truncation.
Nothing here starts a process or imports the ``mcp`` SDK (that is ``app.services.mcp``)."""

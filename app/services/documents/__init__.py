"""The document index: collections of files parsed in a bounded child process, chunked, kept in SQLite with FTS5."""

"""The API server's defaults, in a module of constants only (the CLI's parser reads them at every start-up)."""

DEFAULT_PORT = 8417  # unassigned by IANA; not LM Studio's 1234, Ollama's 11434, llama-server's 8080 or vLLM's 8000
DEFAULT_HOST = "127.0.0.1"
MiB = 1024 * 1024
DEFAULT_MAX_BODY_BYTES = 16 * MiB
DEFAULT_MAX_TOKENS_LIMIT = 32768
DEFAULT_MAX_QUEUE = 8
DEFAULT_IDLE_TTL_S = 3600.0  # a model the server loaded unloads after an hour without requests

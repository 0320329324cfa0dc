"""LLM Workstation: run large language models locally, well."""

__version__ = "0.1.0"

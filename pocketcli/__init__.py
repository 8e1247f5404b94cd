"""PocketLLM: a local LLM engine and CLI."""

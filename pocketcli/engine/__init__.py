"""The inference engine: sequences, paged KV blocks, scheduling, model running and sampling."""

"""The OpenAI-compatible HTTP server: FastAPI app over the EngineLoop (one thread owns the engine)."""
from .app import make_app

__all__ = ["make_app"]

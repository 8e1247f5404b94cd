"""uvicorn (for `pocket serve` with FastAPI): the event loop, HTTP/WebSocket protocols and lifespan handler are
imported from strings ("uvicorn.loops.auto", "uvicorn.protocols.http.h11_impl", ...) chosen at run time.

FastAPI/Starlette/pydantic import everything statically (pydantic has its own hooks-contrib hook).
"""
from PyInstaller.utils.hooks import collect_submodules

hiddenimports = collect_submodules("uvicorn") + ["h11", "anyio._backends._asyncio"]

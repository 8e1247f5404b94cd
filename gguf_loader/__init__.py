"""Reading model files: GGUF metadata, tensor views (still quantized) and model hyper-parameters.

The names below load their module on first use (PEP 562), so that a light submodule (errors, sampling_keys) can be
imported without numpy and gguf-py: `pocket --help` builds its flags from them."""
from importlib import import_module

_MODULE_OF = {"ModelFileError": ".errors", "UnsupportedModelError": ".errors", "GGUFFile": ".reader",
              "TensorInfo": ".reader", "open_gguf": ".reader", "WeightTensor": ".weight_tensor",
              "make_weight_tensor": ".weight_tensor"}

__all__ = sorted(_MODULE_OF)


def __getattr__(name: str):
    if name not in _MODULE_OF:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(_MODULE_OF[name], __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_MODULE_OF))

"""Errors raised by the kernels."""


class UnsupportedQuantType(ValueError):
    """A weight tensor's ggml type has no kernel in the chosen backend."""

    def __init__(self, type_name: str, tensor_name: str, backend: str):
        super().__init__(f"{backend} kernels do not support ggml type {type_name} (tensor {tensor_name!r})")
        self.type_name = type_name
        self.tensor_name = tensor_name
        self.backend = backend

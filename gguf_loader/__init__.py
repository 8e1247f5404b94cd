"""Reading model files: GGUF metadata, tensor views (still quantized) and model hyper-parameters."""
from .errors import ModelFileError, UnsupportedModelError
from .reader import GGUFFile, TensorInfo, open_gguf
from .weight_tensor import WeightTensor, make_weight_tensor

__all__ = ["GGUFFile", "ModelFileError", "TensorInfo", "UnsupportedModelError", "WeightTensor",
           "make_weight_tensor", "open_gguf"]

import inspect

import pytest

import kernels_numba
from kernels_numba import get_ops, reference


def test_get_ops_returns_the_backend_modules():
    assert get_ops("reference") is reference
    assert get_ops("cpu").__name__ == "kernels_numba.cpu"


def test_get_ops_rejects_unknown_backends_by_name():
    with pytest.raises(ValueError, match="'tpu'.*cpu.*reference"):
        get_ops("tpu")


def parameters(function) -> list[tuple[str, object, object]]:
    """Names, kinds and defaults of a function's parameters (annotations may be strings in one module)."""
    return [(p.name, p.kind, p.default) for p in inspect.signature(function).parameters.values()]


def test_cpu_exposes_every_reference_op_with_the_same_signature():
    cpu = get_ops("cpu")
    assert set(cpu.__all__) == set(reference.__all__)
    for name in reference.__all__:
        assert parameters(getattr(cpu, name)) == parameters(getattr(reference, name)), name


def test_unsupported_quant_type_is_a_value_error():
    assert issubclass(kernels_numba.UnsupportedQuantType, ValueError)

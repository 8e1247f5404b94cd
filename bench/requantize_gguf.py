"""Write a copy of a GGUF model with every 2-D weight re-quantized to one type (for per-type benchmarks).

    python bench/requantize_gguf.py SRC.gguf DST.gguf --type Q8_0|Q4_0|Q5_0|Q4_1|Q5_1|F16|BF16

Metadata is copied unchanged; 1-D tensors (norms, biases) stay as they are. Uses gguf-py's reference
quantizers, so it is slow (minutes for a 270M model) but needs nothing else.
"""
from __future__ import annotations

import argparse

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType, GGUFWriter
from gguf.quants import dequantize, quantize


def copy_metadata(reader: GGUFReader, writer: GGUFWriter) -> None:
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        value_type = field.types[0]
        if value_type == GGUFValueType.ARRAY:
            writer.add_array(key, field.contents())
        else:
            writer.add_key_value(key, field.contents(), value_type)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("src")
    parser.add_argument("dst")
    parser.add_argument("--type", required=True, choices=["Q8_0", "Q4_0", "Q5_0", "Q4_1", "Q5_1", "F16", "BF16"])
    args = parser.parse_args()
    target = GGMLQuantizationType[args.type]
    reader = GGUFReader(args.src)
    writer = GGUFWriter(args.dst, reader.fields["general.architecture"].contents())
    copy_metadata(reader, writer)
    for tensor in reader.tensors:
        shape = tuple(int(d) for d in reversed(tensor.shape))
        if len(shape) == 1:
            writer.add_tensor(tensor.name, np.asarray(tensor.data).reshape(shape), raw_dtype=tensor.tensor_type)
            continue
        values = dequantize(tensor.data, tensor.tensor_type).reshape(shape).astype(np.float32)
        writer.add_tensor(tensor.name, quantize(values, target), raw_dtype=target)
        print(f"{tensor.name}: {tensor.tensor_type.name} -> {args.type}", flush=True)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


if __name__ == "__main__":
    main()

import pytest

from perfmodel.dtypes import get_dtype
from perfmodel.errors import PerfmodelError


@pytest.mark.parametrize("name, canonical, bytes_per_element", [
    ("bf16", "bf16", 2), ("torch.bfloat16", "bf16", 2), ("float16", "fp16", 2), ("fp8_e4m3", "fp8", 1),
    ("int4", "int4", 0.5), ("float32", "fp32", 4), ("tf32", "tf32", 4), ("int8", "int8", 1),
])
def test_names_and_sizes(name, canonical, bytes_per_element):
    dtype = get_dtype(name)
    assert dtype.name == canonical
    assert dtype.bytes_per_element == bytes_per_element


def test_unknown_dtype_lists_the_known_ones():
    with pytest.raises(PerfmodelError, match="unknown dtype 'fp12'.*bf16"):
        get_dtype("fp12")

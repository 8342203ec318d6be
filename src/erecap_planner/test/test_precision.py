"""dtype / quantisation by capability: an AVX2 CPU never gets bf16 from 'auto'."""

from __future__ import annotations

import pytest

from erecap_planner.precision import CpuInfo, cpu_flags, resolve

AVX2_EPYC = CpuInfo("AVX2", frozenset({"avx", "avx2", "fma", "f16c"}))
ZEN4 = CpuInfo("AVX512", frozenset({"avx2", "avx512f", "avx512_bf16"}))
SAPPHIRE_RAPIDS = CpuInfo("AVX512", frozenset({"avx2", "avx512f", "amx_bf16", "amx_tile"}))
SKYLAKE_X = CpuInfo("AVX512", frozenset({"avx2", "avx512f"}))
INT8 = (True, "quantized engine x86")


def cpu(info: CpuInfo, dtype: str = "auto", decode_weights: str = "auto"):
    return resolve("auto", dtype, decode_weights, cpu=info, cuda_available=False, cuda_bf16=False, int8_runs=INT8)


def test_an_avx2_cpu_never_gets_bf16():
    chosen = cpu(AVX2_EPYC)
    assert (chosen.device, chosen.dtype, chosen.decode_weights) == ("cpu", "float32", "float16")
    assert "emulated" in chosen.reason and "AVX2" in chosen.reason


@pytest.mark.parametrize("info", [ZEN4, SAPPHIRE_RAPIDS])
def test_native_bf16_cpus_get_bf16(info):
    chosen = cpu(info)
    assert chosen.dtype == "bfloat16" and chosen.decode_weights == "model" and "natively" in chosen.reason


def test_avx512_without_bf16_gets_float32():
    assert cpu(SKYLAKE_X).dtype == "float32"


def test_dispatch_caps_are_respected():
    # A bf16 CPU run as an AVX2 one (ATEN_CPU_CAPABILITY=avx2 / ONEDNN_MAX_CPU_ISA=AVX2) is measured as one.
    assert cpu(CpuInfo("AVX2", ZEN4.flags)).dtype == "float32"
    assert cpu(CpuInfo("AVX512", ZEN4.flags, onednn_isa="AVX2")).dtype == "float32"


def test_arm_needs_bf16_and_sve():
    assert cpu(CpuInfo("SVE256", frozenset({"sve", "bf16"}), machine="aarch64")).dtype == "bfloat16"
    assert cpu(CpuInfo("DEFAULT", frozenset({"asimd"}), machine="aarch64")).dtype == "float32"


def test_explicit_bf16_on_avx2_is_kept_with_a_warning():
    chosen = cpu(AVX2_EPYC, dtype="bfloat16", decode_weights="model")
    assert chosen.dtype == "bfloat16" and chosen.decode_weights == "model" and "WARNING" in chosen.reason


def test_gpu_choices():
    chosen = resolve("auto", "auto", "auto", cuda_available=True, cuda_bf16=True)
    assert (chosen.device, chosen.dtype, chosen.decode_weights) == ("cuda", "bfloat16", "model")
    assert resolve("cuda", "auto", "auto", cuda_available=True, cuda_bf16=False).dtype == "float32"
    with pytest.raises(ValueError, match="CPU only"):
        resolve("cuda", "auto", "int8", cuda_available=True, cuda_bf16=True)


def test_int8_decode_weights_need_a_quantized_engine():
    chosen = resolve("cpu", "auto", "int8", cpu=AVX2_EPYC, cuda_available=False, int8_runs=INT8)
    assert chosen.decode_weights == "int8"
    with pytest.raises(ValueError, match="no engine"):
        resolve("cpu", "auto", "int8", cpu=AVX2_EPYC, cuda_available=False, int8_runs=(False, "no engine"))


def test_unknown_values_are_refused():
    with pytest.raises(ValueError, match="dtype"):
        resolve("cpu", "float64", "auto", cpu=AVX2_EPYC, cuda_available=False)
    with pytest.raises(ValueError, match="decode_weights"):
        resolve("cpu", "auto", "int4", cpu=AVX2_EPYC, cuda_available=False)


def test_cpu_flags_are_read_from_cpuinfo(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512_bf16\n\nprocessor\t: 1\nflags\t\t: fpu\n")
    assert cpu_flags(str(info)) == {"fpu", "avx2", "avx512_bf16"}
    assert cpu_flags(str(tmp_path / "missing")) == set()


def test_cuda_without_a_gpu_names_the_cause():
    with pytest.raises(ValueError, match="sees no CUDA GPU"):
        resolve("cuda:0", cpu=AVX2_EPYC, cuda_available=False, cuda_bf16=False)

"""The device a command computes on: `--device {cpu, cuda, cuda:N, auto}` (issue 22).

Configs hold the device as text and check only its form (`check_device`), so a run folder written on a GPU
machine still reads back on a CPU-only one. The run function calls `resolve(config.device)` before any work:
`cuda` on a machine without CUDA, or `cuda:N` past the last GPU, is a one-line `InputError` there, and `auto`
becomes `cuda` when a GPU is present and `cpu` otherwise. `on_device(device)` is the context a run computes in:
deterministic algorithms where torch has them (`torch.use_deterministic_algorithms(True, warn_only=True)`, with
cuBLAS's fixed workspace), restored afterwards. Ops without a deterministic CUDA kernel are listed in
`NONDETERMINISTIC`; torch warns (never fails) when one runs.

Nothing here imports torch at module level: configs import this module, and `attnlab --help` must stay fast.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from typing import Any

from attnlab.errors import InputError

DEVICES = ("cpu", "cuda", "cuda:N", "auto")
DEVICE_HELP = (
    "cpu (default), cuda, cuda:N or auto (cuda when a GPU is present); cuda without a GPU is refused in one line"
)
_FORM = re.compile(r"^(cpu|cuda|cuda:\d{1,4}|auto)$")
# Ops this package runs on CUDA that torch implements without a deterministic kernel (torch warns when they
# run under `on_device`); each adds run-to-run noise at float rounding level only.
NONDETERMINISTIC = (
    "index_add_ / scatter_add_ backward of embeddings (nn.Embedding's backward on CUDA accumulates with atomics)",
    "torch.Tensor.index_put_ with accumulate=True",
    "scaled_dot_product_attention's backward with the memory-efficient kernel (what float32 attention gets on CUDA:"
    " bb train, series train): under warn-only deterministic mode torch warns 'Memory Efficient attention defaults"
    " to a non-deterministic algorithm'",
)
CUBLAS_WORKSPACE = ":4096:8"  # cuBLAS needs a fixed workspace for deterministic GEMMs (CUDA >= 10.2)


def check_device(value: object, what: str = "device") -> str:
    """The device text `value` if it has one of the forms cpu, cuda, cuda:N, auto; else a one-line error."""
    if not isinstance(value, str) or not _FORM.match(value):
        raise InputError(f"{what} must be one of {', '.join(DEVICES)} (N a GPU index), got {value!r}")
    return value


def cuda_count() -> int:
    """Number of CUDA devices torch sees (0 without CUDA)."""
    import torch

    return int(torch.cuda.device_count()) if torch.cuda.is_available() else 0


def resolve(device: str, what: str = "--device", gpu: str | None = None) -> Any:
    """The `torch.device` of `device` text; refuses CUDA where there is none, in one line, before any work.
    `gpu`: why a command computes on the cpu only ("bb intervene evaluates on the cpu"); it refuses cuda
    with that reason and takes auto as cpu."""
    import torch

    check_device(device, what)
    if gpu is not None:
        if device.startswith("cuda"):
            raise InputError(f"{what} {device}: {gpu}; --device cuda is not available for it (use cpu or auto)")
        return torch.device("cpu")
    count = cuda_count()
    if device == "auto":
        return torch.device("cuda" if count else "cpu")
    if device == "cpu":
        return torch.device("cpu")
    if count == 0:
        raise InputError(
            f"{what} {device}: this machine has no CUDA device (torch {torch.__version__} sees none); use --device cpu"
        )
    index = int(device.split(":")[1]) if ":" in device else 0
    if index >= count:
        raise InputError(f"{what} {device}: this machine has {count} CUDA device(s), numbered 0 to {count - 1}")
    return torch.device("cuda", index)


def memory_bytes(device: Any) -> int | None:
    """Bytes of memory a run may plan to use on `device`: 90% of the GPU's free memory; None for the CPU."""
    import torch

    if getattr(device, "type", "cpu") != "cuda":
        return None
    free, _total = torch.cuda.mem_get_info(device)
    return int(0.9 * free)


def describe(device: Any) -> dict:
    """What the manifest records of a resolved device: its name, and the GPU's model and memory."""
    import torch

    info: dict = {"device": str(device)}
    if getattr(device, "type", "cpu") == "cuda":
        props = torch.cuda.get_device_properties(device)
        info |= {"gpu": props.name, "gpu_memory_gib": round(props.total_memory / 2**30, 1), "cuda": torch.version.cuda}
    return info


@contextlib.contextmanager
def on_device(device: Any) -> Iterator[None]:
    """Compute on `device` with deterministic algorithms where torch has them (warn-only), restored after.
    On the CPU nothing changes: torch's CPU kernels used here are deterministic already."""
    import torch

    if getattr(device, "type", "cpu") != "cuda":
        yield
        return
    old = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled())
    old_env = os.environ.get("CUBLAS_WORKSPACE_CONFIG")
    os.environ["CUBLAS_WORKSPACE_CONFIG"] = old_env or CUBLAS_WORKSPACE
    torch.use_deterministic_algorithms(True, warn_only=True)
    old_cudnn = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = False
    try:
        with torch.cuda.device(device):
            yield
    finally:
        torch.use_deterministic_algorithms(old[0], warn_only=old[1])
        torch.backends.cudnn.benchmark = old_cudnn
        if old_env is None:
            os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)


ACCELERATOR_BLOCK_ELEMENTS = 2**26  # a block's fp32 temporary on an accelerator: 256 MiB


def rows_per_block(cpu_rows: int, device: Any, row_elements: int) -> int:
    """Rows of a blocked reduction: `cpu_rows` on the cpu (sized so that a block's temporaries stay in cache), and on
    an accelerator as many as keep a block of `row_elements` per row within ACCELERATOR_BLOCK_ELEMENTS, and no fewer
    than `cpu_rows`: a GPU has no such cache to fit, and each block is a few kernel launches (the scan at
    T = 131,072 on an H200 spent ~0.5 s of 6 s launching 512-row blocks)."""
    import torch

    if torch.device(device).type == "cpu":
        return cpu_rows
    return max(cpu_rows, ACCELERATOR_BLOCK_ELEMENTS // max(1, row_elements))

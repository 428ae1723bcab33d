"""What autocast is doing on a device: the one question heads ask about mixed precision."""

from __future__ import annotations

import torch

__all__ = ["AUTOCAST_DTYPES", "autocast_dtype"]


def autocast_dtype(device_type: str) -> torch.dtype | None:
    """The dtype ``torch.autocast`` computes in on ``device_type`` (``"cpu"``, ``"cuda"``)
    at this moment, or None when autocast is off there."""
    try:  # torch >= 2.4
        on = torch.is_autocast_enabled(device_type)
        dtype = torch.get_autocast_dtype(device_type)
    except (TypeError, AttributeError):  # older torch: one switch per backend
        cpu = device_type == "cpu"
        on = torch.is_autocast_cpu_enabled() if cpu else torch.is_autocast_enabled()
        dtype = torch.get_autocast_cpu_dtype() if cpu else torch.get_autocast_gpu_dtype()
    return dtype if on else None


#: the dtypes autocast moves between: features in one of them may meet a head whose
#: parameters are in another while autocast is on (it casts both for each product)
AUTOCAST_DTYPES = (torch.float32, torch.float16, torch.bfloat16)

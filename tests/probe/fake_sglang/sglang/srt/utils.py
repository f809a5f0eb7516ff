"""``get_device_module()`` as SGLang has it: torch.cuda on a GPU run (FAKE_SGLANG_DEVICE=cuda,
the GPU harness), else the simulated device of ``fake_device`` (the CPU tests)."""

import os


def get_device_module():
    if os.environ.get("FAKE_SGLANG_DEVICE") == "cuda":
        import torch

        return torch.cuda
    from sglang.srt import fake_device

    return fake_device

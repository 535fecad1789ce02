"""A factory for `outofplace export examples/export_model.py:kv_cache -o out/`."""

import torch

from kv_cache import RollingKVCache


def kv_cache():
    return RollingKVCache(), (torch.randn(2, 1, 4),)

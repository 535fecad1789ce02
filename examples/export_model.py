"""A factory for `outofplace export examples/export_model.py:kv_cache -o out/`."""

import torch

from kv_cache import DecodeStep


def kv_cache():
    return DecodeStep(), (torch.randn(8, 64), torch.randn(8, 64), torch.tensor(0))

"""BatchNorm with `momentum=None` (a cumulative average of the batch statistics) while
tracing.

Eager computes the average's factor as a Python number, `1.0 / float(num_batches_tracked)`,
which torch.export cannot trace (the counter's value would be baked in, the same at every
call). While tracing, such a module in training mode runs this forward instead: the same
computation with the factor a 0-d tensor, `1 / num_batches_tracked` after its increment,
and the running statistics updated by in-place ops the pass lowers like any other.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch
import torch.nn.functional as F


def _forward(module: torch.nn.modules.batchnorm._BatchNorm, x: torch.Tensor
             ) -> torch.Tensor:
    if not module.training or not module.track_running_stats or \
            module.num_batches_tracked is None:
        return type(module).forward(module, x)  # no cumulative average to keep
    module._check_input_dim(x)
    module.num_batches_tracked.add_(1)
    factor = 1.0 / module.num_batches_tracked.double()  # a 0-d tensor, as eager's double
    out = F.batch_norm(x, None, None, module.weight, module.bias, True, 0.0, module.eps)
    dims = [0, *range(2, x.dim())]
    with torch.no_grad():  # (batch_norm refused a single value per channel)
        mean = x.mean(dims)
        var = x.var(dims, correction=1)  # eager's running variance is unbiased
        module.running_mean.mul_(1 - factor).add_(mean * factor)
        module.running_var.mul_(1 - factor).add_(var * factor)
    return out


@contextlib.contextmanager
def traced(root: torch.nn.Module) -> Iterator[None]:
    """While tracing `root`: each BatchNorm with momentum None runs `_forward`."""
    patched = [m for m in root.modules()
               if isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and m.momentum is None]
    for module in patched:
        module.forward = _forward.__get__(module)
    try:
        yield
    finally:
        for module in patched:
            del module.forward

"""outofplace's XLA:CPU client: jax loaded (the `xla` extra), its one device, and the C++
planned calls (the `_planned_call` extension, when built).

The client is outofplace's own, synchronous: a call returns when XLA has run, which a
call needs anyway (torch reads the results right after), without handing the work to a
thread and waiting for it to come back (tens of µs per call on jax's asynchronous one).
"""

from __future__ import annotations

import functools
from typing import Any


@functools.cache
def available() -> bool:
    try:
        import jax  # noqa: F401
    except ImportError:
        return False
    return True


@functools.cache
def load_jax() -> Any:
    try:
        import jax
    except ImportError as error:
        raise RuntimeError("the XLA engine needs the 'xla' extra: "
                           "pip install 'outofplace[xla]'") from error
    jax.config.update("jax_enable_x64", True)  # or int64 inputs are narrowed
    return jax


@functools.cache
def client() -> Any:
    load_jax()
    from jax._src.lib import xla_client

    return xla_client.make_cpu_client(asynchronous=False, num_devices=1)


@functools.cache
def device() -> Any:
    return client().local_devices()[0]


@functools.cache
def device_sharding() -> Any:
    return load_jax().sharding.SingleDeviceSharding(device())


@functools.cache
def extension() -> Any:
    """The C++ planned calls (planned_call.cpp, sharded_call.cpp), or None when the
    extension is not built (setup.py)."""
    try:
        from .. import _planned_call
    except ImportError:
        return None
    return _planned_call


def device_list() -> Any:
    from jax._src.lib import xla_client

    return xla_client.DeviceList((device(),))

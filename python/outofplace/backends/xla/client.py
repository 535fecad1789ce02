"""outofplace's XLA:CPU client: jax loaded (the `xla` extra), its one device, and the C++
planned calls (the `_planned_call` extension, when built); making the client sets glibc's
malloc to keep the heaps a call's temporaries leave empty (heaps.py).

The client is outofplace's own, synchronous: a call returns when XLA has run, which a
call needs anyway (torch reads the results right after), without handing the work to a
thread and waiting for it to come back (tens of µs per call on jax's asynchronous one).
"""

from __future__ import annotations

import functools
from typing import Any

from .heaps import keep_heaps


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


# A process that runs its rank of a job's collectives (backends/distributed.py sets it
# when it joins the job): `client` (synchronous, its devices every rank's), `device` (this
# rank's), `sharding` (on it), `devices` (all, in rank order) and `place(CompileOptions)`
# (a replica per rank). Programs compiled and arrays made after it use it; None in a
# lone process.
COLLECTIVES: Any = None


def client() -> Any:
    return local_client() if COLLECTIVES is None else COLLECTIVES.client


@functools.cache
def local_client() -> Any:
    return make_cpu_client()


def make_cpu_client(**options: Any) -> Any:
    """A synchronous XLA:CPU client of one device (`options`: jaxlib's `make_cpu_client`
    arguments for a job's rank), glibc's malloc set first to keep the heaps its calls'
    temporaries leave empty (heaps.py)."""
    load_jax()
    from jax._src.lib import xla_client

    keep_heaps()
    return xla_client.make_cpu_client(asynchronous=False, num_devices=1, **options)


def device() -> Any:
    return _local_device() if COLLECTIVES is None else COLLECTIVES.device


@functools.cache
def _local_device() -> Any:
    return local_client().local_devices()[0]


def device_sharding() -> Any:
    return _local_sharding() if COLLECTIVES is None else COLLECTIVES.sharding


@functools.cache
def _local_sharding() -> Any:
    return load_jax().sharding.SingleDeviceSharding(_local_device())


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

    if COLLECTIVES is not None:
        return COLLECTIVES.devices
    return xla_client.DeviceList((device(),))

"""Sharded state on XLA's SPMD partitioner (docs/sharding.md) against eager.

Every program runs on 2, 4 and 8 XLA:CPU devices (conftest.py sets the device count) and
must leave the caller's tensors as eager does; its sharding report must show each aliased
buffer split as its spec says, updated in place on every device, and read by no
collective or copy.
"""

import warnings

import pytest
import torch

import outofplace
from outofplace.transforms.sharding import hlo_sharding
from differential import assert_same

jax = pytest.importorskip("jax")

B, H, S, D = 8, 8, 16, 4
DEVICES = pytest.mark.parametrize("devices", [2, 4, 8])
SPECS = {"heads": (None, "x", None, None), "batch": ("x", None, None, None),
         "sequence": (None, None, "x", None)}


def writes(cache, k, pos, idx):
    """Every kind of cache write at once: int, slice, runtime position, index_copy_."""
    cache[:, :, 0] = k
    cache[:, :, 5:7] = 2 * k.unsqueeze(2)
    cache[:, :, pos] = k + 1
    cache.index_copy_(2, idx, k.unsqueeze(2) - 1)
    return cache.sum(dim=(2, 3))


def _run_against_eager(f, args, mesh, shardings, calls):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", outofplace.OutOfBoundsPolicyWarning)
        compiled = outofplace.compile(f, args, mesh=mesh, shardings=shardings)
    for call in calls:
        eager = [a.clone() for a in call]
        expected = f(*eager)
        actual = compiled(*call)
        assert_same(actual, expected, "result")
        for i, (a, e) in enumerate(zip(call, eager)):
            assert_same(a, e, f"argument {i}")
    return compiled


def _cache_calls(positions):
    return [(torch.randn(B, H, S, D), torch.randn(B, H, D), torch.tensor(p),
             torch.tensor([(p + 3) % S])) for p in positions]


@DEVICES
@pytest.mark.parametrize("over", SPECS)
def test_kv_cache_writes_match_eager(over, devices):
    # positions at both ends of every shard of the sequence, and one out of range, which
    # the compiled program clamps (as one device does) instead of losing (openxla/xla#49118)
    positions = [1, S // devices - 1, S // devices, S - 1, -1, S + 3]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", outofplace.OutOfBoundsPolicyWarning)
        compiled = outofplace.compile(writes, _cache_calls([0])[0], mesh={"x": devices},
                                      shardings={"cache": SPECS[over]})
    for call in _cache_calls(positions):
        eager = [a.clone() for a in call]
        p = int(call[2])
        eager[2] = torch.tensor(min(p, S - 1))  # the clamp is the compiled program's policy
        expected = writes(*eager)
        assert_same(compiled(*call), expected, f"result at {p}")
        assert_same(call[0], eager[0], f"cache at {p}")
    report = compiled.sharding_report()
    (cache,) = report.state
    assert cache.device_shape == [s // devices if a else s
                                  for s, a in zip([B, H, S, D], SPECS[over])]
    assert report.ok, str(report)


def test_sequence_sharded_update_is_shard_local():
    """A runtime position in a sharded sequence: each device updates its own shard at a
    local offset (partition-id arithmetic), with the clamp before, and nothing gathers."""
    compiled = _run_against_eager(writes, _cache_calls([0])[0], {"x": 4},
                                  {"cache": SPECS["sequence"]}, _cache_calls([9]))
    assert "stablehlo.clamp" in compiled.stablehlo
    report = compiled.sharding_report()
    assert report.state[0].written_by in ("stablehlo.dynamic_update_slice",
                                          "stablehlo.scatter"), str(report)
    assert report.ok, str(report)


@pytest.mark.parametrize("spec", [(), ("x",), (None, "y"), (("y", "x"), None),
                                  ("y", None, "x"), (None, ("x", "y"), None)])
def test_hlo_sharding_is_jax_s(spec):
    from jax._src.lib import xla_client

    mesh = {"x": 2, "y": 4}
    rank = max(len(spec), 2)
    spec = tuple(spec) + (None,) * (rank - len(spec))
    jax_mesh = jax.sharding.Mesh(
        __import__("numpy").array(jax.devices()[:8]).reshape(2, 4), ("x", "y"))
    theirs = jax.sharding.NamedSharding(jax_mesh, jax.sharding.PartitionSpec(*spec)) \
        ._to_xla_hlo_sharding(rank)
    ours = tuple(() if a is None else (a,) if isinstance(a, str) else a for a in spec)
    assert xla_client.HloSharding.from_string(hlo_sharding(mesh, ours)) == theirs

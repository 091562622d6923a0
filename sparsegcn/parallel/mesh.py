"""Which devices a run uses, and moving data onto them.

A run on ``D`` devices per process and ``P`` processes uses a 1-D
:class:`jax.sharding.Mesh` of ``D * P`` devices along one axis,
:data:`AXIS`, ordered by process and then by local device id, so device
``d`` of process ``p`` has mesh index ``p * D + d`` on every process.

The refusal of an impossible device count happens here, on the host,
before any data is read: JAX sees a fixed number of devices once its
backend starts, and on CPU that number is 1 unless the environment asks
for more before JAX starts (:data:`SIMULATE_HINT`).
"""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from sparsegcn import _checks

#: The name of the one mesh axis every sharded program maps over.
AXIS = "devices"
"""The name of the one mesh axis, as collectives (``psum``, ``all_gather``) see it."""

SIMULATE_HINT = (
    "to simulate N devices on CPU, set XLA_FLAGS=--xla_force_host_platform_device_count=N "
    "(or JAX_NUM_CPU_DEVICES=N) in the environment before JAX starts, e.g. "
    "`XLA_FLAGS=--xla_force_host_platform_device_count={n} sparsegcn train ... --devices {n}`"
)


def check_devices(devices: int) -> int:
    """Returns ``devices`` if this process has that many local devices, else raises.

    Starts JAX's backend (after :func:`sparsegcn.parallel.initialize` in a
    multi-process run, which must come first).

    Raises:
      TypeError: ``devices`` is not an int.
      ValueError: ``devices < 1``, or more than ``jax.local_device_count()``;
        the message says how to simulate devices on CPU.
    """
    devices = _checks.check_static_int("devices", devices, minimum=1)
    local = jax.local_devices()
    if devices > len(local):
        kinds = sorted({f"{d.platform}:{d.device_kind}" for d in local})
        raise ValueError(
            f"devices={devices} (--devices) asks for {devices} local devices but this process "
            f"sees {len(local)} ({', '.join(kinds)}); pass --devices {len(local)} or fewer, or "
            + SIMULATE_HINT.format(n=devices)
        )
    return devices


def make_mesh(devices: int = 1) -> Mesh:
    """A 1-D mesh over the first ``devices`` local devices of every process.

    Args:
      devices: local devices per process ``D`` (checked by :func:`check_devices`).

    Returns:
      A :class:`~jax.sharding.Mesh` of ``D * jax.process_count()`` devices on
      axis :data:`AXIS`, with ``Auto`` axis type so that ``jit`` moves
      inputs to the shardings the program asks for.
    """
    devices = check_devices(devices)
    chosen = []
    for process in range(jax.process_count()):
        own = sorted((d for d in jax.devices() if d.process_index == process), key=lambda d: d.id)
        if len(own) < devices:
            raise ValueError(
                f"process {process} has {len(own)} devices, fewer than devices={devices}; "
                "every process of a run must offer the same number of devices"
            )
        chosen.extend(own[:devices])
    return jax.make_mesh((len(chosen),), (AXIS,), axis_types=(AxisType.Auto,), devices=chosen)


def as_mesh(devices: int | Mesh) -> Mesh:
    """``devices`` if it is a mesh with axis :data:`AXIS`, else :func:`make_mesh` of it."""
    if isinstance(devices, Mesh):
        if tuple(devices.axis_names) != (AXIS,):
            raise ValueError(
                f"the mesh must have the single axis {AXIS!r}, got axes {devices.axis_names}; "
                "build it with sparsegcn.parallel.make_mesh"
            )
        return devices
    return make_mesh(devices)


def _is_key(leaf) -> bool:
    return isinstance(leaf, jax.Array) and jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key)


def _put_leaf(leaf, sharding: NamedSharding):
    if _is_key(leaf):
        data = _put_leaf(jax.random.key_data(leaf), sharding)
        return jax.random.wrap_key_data(data, impl=jax.random.key_impl(leaf))
    if isinstance(leaf, jax.Array) and leaf.sharding == sharding:
        return leaf
    host = np.asarray(leaf)
    # Each process fills only its own devices' blocks, from the same host value.
    return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])


def put(tree, mesh: Mesh, spec: P | None = None):
    """Places every leaf of ``tree`` on ``mesh`` with ``PartitionSpec`` ``spec``.

    ``P()`` (the default) replicates; ``P(AXIS)`` splits the leading axis into ``mesh.size``
    equal blocks, block ``i`` on mesh device ``i``. Works across processes:
    each one passes the same host values and fills its own devices. PRNG
    key leaves keep their type.
    """
    sharding = NamedSharding(mesh, P() if spec is None else spec)
    return jax.tree.map(lambda leaf: _put_leaf(leaf, sharding), tree)

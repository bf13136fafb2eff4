"""JAX on every GPU it sees, and an array moved from the first to the second: on a device list of two servers
(tests/gpu_device_list.sh) XLA's allocator asks for virtual memory located on each device, and the move is a
copy between servers with a stream waiting for the other server's event (docs/several-servers.md). The
output is compared with a native run on a machine with as many GPUs.

Run: python3 tests/multi_gpu_apps/jax_each_gpu.py
"""

import jax
import jax.numpy as jnp

devices = jax.devices()
print("devices", len(devices), [d.platform for d in devices])
square_sum = jax.jit(lambda a: (a * a).sum())
last_of_cumsum = jax.jit(lambda a: jnp.cumsum(a)[-1])
for d in devices:
    x = jax.device_put(jnp.arange(1024, dtype=jnp.float32), d)
    print(d.id, float(square_sum(x)), float(last_of_cumsum(x)))
if len(devices) > 1:
    y = jax.device_put(jax.device_put(jnp.arange(1000, dtype=jnp.float32), devices[0]), devices[1])
    print("moved", float(y.sum()), [d.id for d in y.devices()])

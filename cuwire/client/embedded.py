"""What the client library's embedded Python runs first (the init code client/build.py compiles in): every
half that answers CUDA calls, registered with cffi by being imported, then the session's hooks. Kept apart
from runtime.py so that the halves import the runtime and nothing imports them back."""

from cuwire.client import driver, graphs, launches, modules, nvml, runtime  # noqa: F401  (hand-written halves)
from cuwire.generated import client_calls  # noqa: F401  (the generated halves)


def start() -> None:
    runtime.start()

"""The protocol between a program's client library and a server, defined once, for both sides.

- `protocol.proto`: the hand-written messages (hello, welcome, batch, reply and cuwire's own operations);
  the generated schema (generated/cuwire.proto) adds one pair of messages per remoted CUDA function.
- `frames.h`: the frame header and the fixed records the C of both sides packs (the client's C, the server's
  records.c); `layouts.py` reads the same layouts for Python, through cffi.
- `transport.py`: frames on a socket (header, payloads beside messages) and how a session opens.
- `stripes.py`: more connections for large payloads; `compression.py`: zstd on slow links.
- `ring.py` and `shm_ring.h`: shared memory for payloads between a client and a server on one host.
- `tls.py`: TLS for sessions that cross a network; `socket_wait.h`: a wait that polls before it sleeps.
- `generated/wire_ids.py` (made by codegen): the ids and digest both sides agree on.

The client and the server import this package; it imports neither."""

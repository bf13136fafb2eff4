"""How a library load the client names (client/runtime.py name_load, CUWIRE_NAMED_LOADS) sends its image,
which nobody waits for: a small one with its bytes; a large one by its digest alone where the welcome listed
it among the server's module cache's large images (pinned there for the session), and with its bytes where
that list was whole and lacked it (the cache lacks it: its bytes must go anyway, a program's first run on a
new server); else as asked, which sends its digest first."""

from __future__ import annotations

from cuwire.wire import layouts

WITH_LOAD_MOST = layouts.constant("CW_IMAGE_WITH_LOAD_MOST")  # bytes an image goes with its load at most
LISTED_MOST = layouts.constant("CW_LARGE_IMAGES_MOST")  # large images a welcome lists at most
BYTES_MOST = layouts.constant("CW_MESSAGE_MAX") // 2  # (a load's message holds its image, compressed or not)
BYTES, DIGEST = "bytes", "digest"


def how_sent(size: int, digest: bytes, listed: frozenset[bytes]) -> tuple[str | None, str]:
    """BYTES or DIGEST for an image of `size` bytes, given the large images the welcome listed; or None and
    why the load goes as asked."""
    if size <= WITH_LOAD_MOST:
        return BYTES, ""
    if digest in listed:
        return DIGEST, ""
    if len(listed) >= LISTED_MOST:
        return None, (f"larger than {WITH_LOAD_MOST} bytes, not among the {len(listed)} large images the server "
                      "listed, and the list was full (its cache may have it)")
    if size > BYTES_MOST:
        return None, f"larger than {BYTES_MOST} bytes, more than a named load's message takes"
    return BYTES, ""

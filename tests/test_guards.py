"""The client's guards (client/device_memory.c): each device range the server gives is reserved in the
program's process too, so that no host allocation comes to lie at a device address; a range where the
program already has memory is said, loudly. Built from the source with a small driver, no GPU needed."""

from __future__ import annotations

import subprocess

from conftest import ROOT

DRIVER = r"""
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>
void cuwire_guard_device_range(uint64_t base, uint64_t size);
int cuwire_guarded(uint64_t lo, uint64_t hi);
void cuwire_note_mapped(unsigned long long ptr, size_t size, size_t offset, unsigned long long handle,
                        unsigned long long flags);
int main(void) {
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    char *free_range = mmap(NULL, 64 * page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    munmap(free_range, 64 * page);  /* an address range nothing holds */
    uint64_t r = (uint64_t)(uintptr_t)free_range;
    cuwire_guard_device_range(r + 100, 2 * page);  /* not page-aligned: its pages are guarded */
    void *host = mmap((void *)(uintptr_t)r, page, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | 0x100000 /* MAP_FIXED_NOREPLACE */, -1, 0);
    printf("a host mapping over a guard: %s\n", host == MAP_FAILED && errno == EEXIST ? "refused" : "made");
    cuwire_guard_device_range(r + 2 * page, 4 * page);  /* overlaps: the rest is added */
    printf("guarded: %d, beyond: %d\n", cuwire_guarded(r, r + 6 * page), cuwire_guarded(r, r + 7 * page));
    char *mine = mmap(NULL, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    cuwire_guard_device_range((uint64_t)(uintptr_t)mine, page);  /* the program's own memory: said */
    mine[0] = 1;  /* still the program's */
    printf("the program's memory guarded: %d\n", cuwire_guarded((uint64_t)(uintptr_t)mine,
                                                                   (uint64_t)(uintptr_t)mine + page));
    cuwire_note_mapped(r + 8 * page, 3 * page, 0, 1, 0);  /* a virtual memory mapping (cuMemMap): guarded too */
    printf("a mapping: %d\n", cuwire_guarded(r + 8 * page, r + 11 * page));
    cuwire_guard_device_range(1ull << 48, page);  /* above user space (the emulated device): nothing */
    printf("above user space: %d\n", cuwire_guarded(1ull << 48, (1ull << 48) + page));
    return 0;
}
"""


def test_device_ranges_are_guarded_in_the_client(tmp_path):
    (tmp_path / "driver.c").write_text(DRIVER)
    exe = tmp_path / "guards"
    subprocess.run(["gcc", "-O1", "-o", str(exe), str(tmp_path / "driver.c"),
                    str(ROOT / "cuwire" / "client" / "device_memory.c"), f"-I{ROOT / 'cuwire' / 'generated'}",
                    f"-I{ROOT / 'cuwire' / 'client'}", f"-I{ROOT / 'cuwire' / 'wire'}", "-lpthread"], check=True)
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["a host mapping over a guard: refused", "guarded: 1, beyond: 0",
                                     "the program's memory guarded: 0", "a mapping: 1", "above user space: 0"]
    assert r.stderr.count("lies where this program has memory of its own") == 1, r.stderr

/*
 * pic_pages.c — large buffers straight from the kernel (pic_pages.h).
 *
 * Why: a checkpoint of the prefix cache is megabytes of fresh memory
 * written once inside a request, and malloc hands such sizes out as new
 * mappings whose every 4 KiB page faults on first write.  Mapped here, the
 * 2 MiB-aligned middle of the buffer asks for transparent huge pages
 * (MADV_HUGEPAGE: one fault per 2 MiB where THP is "madvise" or "always")
 * and the whole is populated by one call (MADV_POPULATE_WRITE, Linux 5.14;
 * where it is missing the pages fault in as before).  A microbenchmark of
 * 6.4 MB on the AMD EPYC VM, quiet: malloc + a write per page 2.3-3.2 ms,
 * this 0.6 ms.  Below 2 MiB a buffer is calloc's (no huge page to win, and
 * thousands of small mappings would run into vm.max_map_count).
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "pic_pages.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

#define PIC_PAGE 4096u
#define PIC_HUGE ((size_t) 2 << 20)

static size_t
pic_pages_len(size_t bytes)
{
    return (bytes + PIC_PAGE - 1) & ~((size_t) PIC_PAGE - 1);
}

void *
pic_pages_alloc(size_t bytes)
{
    size_t    len = pic_pages_len(bytes > 0 ? bytes : 1);
    uint8_t  *p;
    uintptr_t lo, hi;

    if (len < PIC_HUGE) {
        return calloc(1, len);
    }
    p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        return NULL;
    }
    lo = ((uintptr_t) p + PIC_HUGE - 1) & ~(uintptr_t) (PIC_HUGE - 1);
    hi = ((uintptr_t) p + len) & ~(uintptr_t) (PIC_HUGE - 1);
    if (hi > lo) {
        (void) madvise((void *) lo, hi - lo, MADV_HUGEPAGE);
    }
    (void) madvise(p, len, MADV_POPULATE_WRITE);
    return p;
}

void
pic_pages_free(void *p, size_t bytes)
{
    size_t len = pic_pages_len(bytes > 0 ? bytes : 1);

    if (p != NULL && len < PIC_HUGE) {
        free(p);
    } else if (p != NULL) {
        munmap(p, len);
    }
}

/*
 * pic_pages.h — large buffers straight from the kernel, mapped for their
 * own: 2 MiB pages where the kernel gives them, every page in at once.
 */
#ifndef PIC_PAGES_H
#define PIC_PAGES_H

#include <stddef.h>

/* A zeroed buffer of bytes; from 2 MiB up a mapping of its own with every
 * page already in (one MADV_POPULATE_WRITE instead of a fault per 4 KiB
 * page on first write; transparent huge pages asked for on its 2 MiB-
 * aligned part), below that calloc's; NULL when out of memory.  Free it
 * with pic_pages_free and the same size. */
void *pic_pages_alloc(size_t bytes);

/* Unmap a buffer of pic_pages_alloc(bytes); NULL does nothing. */
void pic_pages_free(void *p, size_t bytes);

#endif /* PIC_PAGES_H */

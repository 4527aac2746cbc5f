/*
 * fuzz_safetensors.c — libFuzzer target for the safetensors reader
 * (engine/model/safetensors.h): the input is a whole .safetensors file
 * (8-byte header length, JSON header, data), mapped from a memfd as
 * pic_st_open maps a checkpoint.  Every tensor it accepts must lie inside
 * the file, and reading its first elements must not fault.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "safetensors.h"

#define CHECK(x) do { if (!(x)) __builtin_trap(); } while (0)

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char    path[64], err[256];
    int     fd = memfd_create("st", 0);
    pic_st *st;

    CHECK(fd >= 0);
    CHECK(size == 0 || write(fd, data, size) == (ssize_t) size);
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    st = pic_st_open(path, err, sizeof(err));
    if (st != NULL) {
        size_t         flen = 0;
        const uint8_t *base = pic_st_file_bytes(st, 0, &flen);

        CHECK(flen == size);
        for (size_t i = 0; i < pic_st_count(st); i++) {
            const pic_st_tensor *t = pic_st_get(st, i);
            float                v[4];

            CHECK(t->data >= base && t->nbytes <= flen
                  && (size_t) (t->data - base) <= flen - t->nbytes);
            CHECK(pic_st_find(st, t->name) == t);
            if (t->dtype != PIC_ST_DTYPE_OTHER && t->numel > 0) {
                uint64_t n = t->numel < 4 ? t->numel : 4;
                CHECK(pic_st_read_f32(t, 0, n, v, err, sizeof(err)) == 0);
            }
        }
        pic_st_close(st);
    }
    close(fd);
    return 0;
}

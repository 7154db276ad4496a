/* base/bufalloc.c - see bufalloc.h. Both kinds are anonymous private
 * mappings: page-aligned by construction, zero-filled, returned to the system
 * on free. A huge buffer maps 2 MiB more than it needs and trims the
 * misaligned head and the tail so that the kept range starts on a 2 MiB
 * boundary (THP can only back whole aligned 2 MiB extents). */
#include "base/bufalloc.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>

#define SMALL_ALIGN ((int64_t)4096)

int64_t ms_buf_alloc_size(int64_t bytes, int huge) {
    int64_t a = huge ? MS_BUF_HUGE_PAGE : SMALL_ALIGN;
    if (bytes <= 0) return 0;
    if (bytes > INT64_MAX - 2 * a) return -1; /* room for the huge over-map too */
    return (bytes + a - 1) / a * a;
}

void *ms_buf_alloc(int64_t bytes, int huge) {
    int64_t size = ms_buf_alloc_size(bytes, huge);
    if (size <= 0 || (uint64_t)size > SIZE_MAX / 2) return NULL;
    if (!huge) {
        void *p = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                       -1, 0);
        return p == MAP_FAILED ? NULL : p;
    }
    size_t map = (size_t)size + (size_t)MS_BUF_HUGE_PAGE;
    void *p = mmap(NULL, map, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    uintptr_t u = (uintptr_t)p;
    uintptr_t a = (u + (uintptr_t)MS_BUF_HUGE_PAGE - 1) & ~((uintptr_t)MS_BUF_HUGE_PAGE - 1);
    size_t head = a - u, tail = map - head - (size_t)size;
    if (head) munmap(p, head);
    if (tail) munmap((void *)(a + (size_t)size), tail);
#ifdef MADV_HUGEPAGE
    madvise((void *)a, (size_t)size, MADV_HUGEPAGE); /* advice: failure only costs speed */
#endif
    return (void *)a;
}

void ms_buf_prefault(void *ptr, int64_t bytes, int huge) {
    int64_t size = ms_buf_alloc_size(bytes, huge);
    if (!ptr || size <= 0) return;
#ifdef MADV_POPULATE_WRITE
    if (madvise(ptr, (size_t)size, MADV_POPULATE_WRITE) == 0) return;
#endif
    /* older kernels: write one byte per 4 KiB page (the buffer is zero, so
     * writing zero keeps it so) */
    volatile uint8_t *b = ptr;
    for (int64_t i = 0; i < size; i += SMALL_ALIGN) b[i] = 0;
}

void ms_buf_free(void *ptr, int64_t bytes, int huge) {
    if (!ptr) return;
    int64_t size = ms_buf_alloc_size(bytes, huge);
    if (size > 0) munmap(ptr, (size_t)size);
}

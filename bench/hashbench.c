/* bench/hashbench.c - XXH3-64 throughput as the store uses it (one call per
 * 1 MiB block, format/sums.h), on hot and cold buffers.
 *
 *   hot   the same 1 MiB block hashed again and again (it stays in L2): the
 *         hash's own speed;
 *   cold  a buffer much larger than the last-level cache (default 1 GiB)
 *         hashed block by block, once per pass: what hashing a block that was
 *         just read from disk costs when it is no longer in cache (the store
 *         hashes right after the read, so the truth is in between).
 * Prints GB/s (1e9 bytes) per case: the median of 5 passes. No assertion.
 * Usage: hashbench [COLD_MIB]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

#define BLOCK ((size_t)1 << 20)

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    size_t cold_mib = argc > 1 ? (size_t)strtoull(argv[1], NULL, 10) : 1024;
    size_t n = cold_mib * BLOCK;
    uint8_t *buf = malloc(n);
    if (!buf) { fprintf(stderr, "hashbench: cannot allocate %zu MiB\n", cold_mib); return 1; }
    for (size_t i = 0; i < n; i++) buf[i] = (uint8_t)(i * 2654435761u >> 13);
    volatile uint64_t sink = 0;
    double hot[5], cold[5];
    for (int pass = 0; pass < 5; pass++) {
        double t0 = now_s();
        for (int k = 0; k < 2048; k++) sink ^= XXH3_64bits(buf, BLOCK);
        hot[pass] = 2048.0 * (double)BLOCK / (now_s() - t0) / 1e9;
        t0 = now_s();
        for (size_t off = 0; off < n; off += BLOCK) sink ^= XXH3_64bits(buf + off, BLOCK);
        cold[pass] = (double)n / (now_s() - t0) / 1e9;
    }
    qsort(hot, 5, sizeof hot[0], cmp_d);
    qsort(cold, 5, sizeof cold[0], cmp_d);
    printf("XXH3-64, 1 MiB blocks: hot %.1f GB/s, cold (%zu MiB buffer) %.1f GB/s\n", hot[2], cold_mib, cold[2]);
    free(buf);
    return sink == 42 ? 2 : 0;
}

/* engine/kernels_info.c - the kernel tables of this build, for programs
 * (`moestream --version`).
 *
 * Owns: ms_kernels_built and ms_kernels_choice (include/moestream.h).
 * Does not: select a table for an engine (ms_engine_open does, through
 *   ms_kernels_select).
 */
#include "moestream.h"

#include "kernels/kernels.h"

const char *ms_kernels_built(void) {
#if defined(__x86_64__) || defined(__i386__)
    return "ref avx2 avx512 avx512-l2";
#else
    return "ref";
#endif
}

const char *ms_kernels_choice(const char *kernels) {
    const ms_kern *k = ms_kernels_select(kernels);
    return k ? k->name : NULL;
}

/* kernels/dispatch.c - choosing the kernel table once, and the MXFP4 scale table.
 *
 * Owns: ms_kernels_select and ms_mxfp4_scale.
 * Idea: the engine asks once at start-up for a table ("auto" = the best the
 *   CPU supports, or a named one) and calls only through it; every table gives
 *   the same bits, so the choice changes speed, never results. The choice is
 *   passed in by the caller: library code never reads the environment.
 * Invariants: ms_mxfp4_scale is a constant initialised statically (so it is
 *   valid before, and unchanged by, any call here); ms_kernels_select is
 *   idempotent and thread-safe (CPU detection runs under pthread_once).
 * Does not: allocate, log, or keep any mutable state after the first call.
 */
#include "kernels/kernels.h"

#include "base/err.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#define MS_KERN_X86 1
extern const ms_kern ms_kern_avx2;     /* kernels/x86/matvec_avx2.c */
extern const ms_kern ms_kern_avx512;   /* kernels/x86/matvec_avx512.c */
extern const ms_kern ms_kern_avx512_l2; /* the same, matvec prefetches to L2 */
#else
#define MS_KERN_X86 0
#endif

/* 2^(s-128) for s = 0..254 (all exact floats: 2^-128 is subnormal but
 * representable), 0.0f for 255. Checked against ldexpf on first selection. */
float ms_mxfp4_scale[256] = {
    0x1p-128f, 0x1p-127f, 0x1p-126f, 0x1p-125f, 0x1p-124f, 0x1p-123f, 0x1p-122f, 0x1p-121f,
    0x1p-120f, 0x1p-119f, 0x1p-118f, 0x1p-117f, 0x1p-116f, 0x1p-115f, 0x1p-114f, 0x1p-113f,
    0x1p-112f, 0x1p-111f, 0x1p-110f, 0x1p-109f, 0x1p-108f, 0x1p-107f, 0x1p-106f, 0x1p-105f,
    0x1p-104f, 0x1p-103f, 0x1p-102f, 0x1p-101f, 0x1p-100f, 0x1p-99f, 0x1p-98f, 0x1p-97f,
    0x1p-96f, 0x1p-95f, 0x1p-94f, 0x1p-93f, 0x1p-92f, 0x1p-91f, 0x1p-90f, 0x1p-89f,
    0x1p-88f, 0x1p-87f, 0x1p-86f, 0x1p-85f, 0x1p-84f, 0x1p-83f, 0x1p-82f, 0x1p-81f,
    0x1p-80f, 0x1p-79f, 0x1p-78f, 0x1p-77f, 0x1p-76f, 0x1p-75f, 0x1p-74f, 0x1p-73f,
    0x1p-72f, 0x1p-71f, 0x1p-70f, 0x1p-69f, 0x1p-68f, 0x1p-67f, 0x1p-66f, 0x1p-65f,
    0x1p-64f, 0x1p-63f, 0x1p-62f, 0x1p-61f, 0x1p-60f, 0x1p-59f, 0x1p-58f, 0x1p-57f,
    0x1p-56f, 0x1p-55f, 0x1p-54f, 0x1p-53f, 0x1p-52f, 0x1p-51f, 0x1p-50f, 0x1p-49f,
    0x1p-48f, 0x1p-47f, 0x1p-46f, 0x1p-45f, 0x1p-44f, 0x1p-43f, 0x1p-42f, 0x1p-41f,
    0x1p-40f, 0x1p-39f, 0x1p-38f, 0x1p-37f, 0x1p-36f, 0x1p-35f, 0x1p-34f, 0x1p-33f,
    0x1p-32f, 0x1p-31f, 0x1p-30f, 0x1p-29f, 0x1p-28f, 0x1p-27f, 0x1p-26f, 0x1p-25f,
    0x1p-24f, 0x1p-23f, 0x1p-22f, 0x1p-21f, 0x1p-20f, 0x1p-19f, 0x1p-18f, 0x1p-17f,
    0x1p-16f, 0x1p-15f, 0x1p-14f, 0x1p-13f, 0x1p-12f, 0x1p-11f, 0x1p-10f, 0x1p-9f,
    0x1p-8f, 0x1p-7f, 0x1p-6f, 0x1p-5f, 0x1p-4f, 0x1p-3f, 0x1p-2f, 0x1p-1f,
    0x1p0f, 0x1p1f, 0x1p2f, 0x1p3f, 0x1p4f, 0x1p5f, 0x1p6f, 0x1p7f,
    0x1p8f, 0x1p9f, 0x1p10f, 0x1p11f, 0x1p12f, 0x1p13f, 0x1p14f, 0x1p15f,
    0x1p16f, 0x1p17f, 0x1p18f, 0x1p19f, 0x1p20f, 0x1p21f, 0x1p22f, 0x1p23f,
    0x1p24f, 0x1p25f, 0x1p26f, 0x1p27f, 0x1p28f, 0x1p29f, 0x1p30f, 0x1p31f,
    0x1p32f, 0x1p33f, 0x1p34f, 0x1p35f, 0x1p36f, 0x1p37f, 0x1p38f, 0x1p39f,
    0x1p40f, 0x1p41f, 0x1p42f, 0x1p43f, 0x1p44f, 0x1p45f, 0x1p46f, 0x1p47f,
    0x1p48f, 0x1p49f, 0x1p50f, 0x1p51f, 0x1p52f, 0x1p53f, 0x1p54f, 0x1p55f,
    0x1p56f, 0x1p57f, 0x1p58f, 0x1p59f, 0x1p60f, 0x1p61f, 0x1p62f, 0x1p63f,
    0x1p64f, 0x1p65f, 0x1p66f, 0x1p67f, 0x1p68f, 0x1p69f, 0x1p70f, 0x1p71f,
    0x1p72f, 0x1p73f, 0x1p74f, 0x1p75f, 0x1p76f, 0x1p77f, 0x1p78f, 0x1p79f,
    0x1p80f, 0x1p81f, 0x1p82f, 0x1p83f, 0x1p84f, 0x1p85f, 0x1p86f, 0x1p87f,
    0x1p88f, 0x1p89f, 0x1p90f, 0x1p91f, 0x1p92f, 0x1p93f, 0x1p94f, 0x1p95f,
    0x1p96f, 0x1p97f, 0x1p98f, 0x1p99f, 0x1p100f, 0x1p101f, 0x1p102f, 0x1p103f,
    0x1p104f, 0x1p105f, 0x1p106f, 0x1p107f, 0x1p108f, 0x1p109f, 0x1p110f, 0x1p111f,
    0x1p112f, 0x1p113f, 0x1p114f, 0x1p115f, 0x1p116f, 0x1p117f, 0x1p118f, 0x1p119f,
    0x1p120f, 0x1p121f, 0x1p122f, 0x1p123f, 0x1p124f, 0x1p125f, 0x1p126f, 0.0f,
};

static pthread_once_t select_once = PTHREAD_ONCE_INIT;
static int have_avx2;
static int have_avx512;
static int prefer_l2;                   /* avx512-l2 is the auto choice */

#if MS_KERN_X86
#include <cpuid.h>
/* The display family (base + extended, as the vendors document it); 0 if
 * CPUID leaf 1 is missing. */
static unsigned cpu_family(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    const unsigned f = (a >> 8) & 0xf;
    return f == 0xf ? f + ((a >> 20) & 0xff) : f;
}
#endif

static void select_init(void) {
    for (int s = 0; s < 255; s++) MS_ASSERT(ms_mxfp4_scale[s] == ldexpf(1.0f, s - 128));
    MS_ASSERT(ms_mxfp4_scale[255] == 0.0f);
#if MS_KERN_X86
    __builtin_cpu_init();
    /* __builtin_cpu_supports also checks that the OS saves the vector state.
     * F16C (in the AVX2 file's flags) is not queried: clang cannot name it,
     * every AVX2 CPU has it, and the kernels use no F16C instruction. */
    have_avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    have_avx512 = have_avx2 && __builtin_cpu_supports("avx512f") &&
                  __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
                  __builtin_cpu_supports("avx512dq");
    /* The matvec streams faster with the prefetches to L2 on every AVX-512
     * core measured but Zen 5: Zen 4 (x1.13-1.33 cold), the Intel Xeons of
     * family 6 model 167 (bf16 x1.23 cold, resident decode x1.16) and model
     * 207 (bf16 x1.14-1.22 cold, resident decode x1.07-1.09); on Zen 5 (AMD
     * family 0x1a) the L1 prefetch was ahead (kernels/x86/matvec_avx512.c,
     * PREFETCH HINT). */
    prefer_l2 = have_avx512 && !(__builtin_cpu_is("amd") && cpu_family() == 0x1a);
#endif
}

/* The names ms_kernels_select knows on any CPU (kernels.h). */
int ms_kernels_known(const char *name) {
    static const char *const names[] = { "auto", "ref", "avx2", "avx512", "avx512-l2" };
    if (!name) return 1;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(name, names[i])) return 1;
    return 0;
}

/* CONTRACT     force: NULL or "auto" -> the best supported table; "ref", "avx2",
 *              "avx512", "avx512-l2" -> that table, or NULL if this CPU (or
 *              build) lacks it; the two avx512 tables differ only in where
 *              matvec prefetches go, and auto takes avx512-l2 on every
 *              AVX-512 CPU but AMD family 0x1a (Zen 5);
 *              any other name -> NULL.
 * THREADS      safe to call from several threads, any number of times.
 * RETURNS      a pointer to a static table (never freed). Allocates nothing. */
const ms_kern *ms_kernels_select(const char *force) {
    pthread_once(&select_once, select_init);
    int is_auto = force == NULL || strcmp(force, "auto") == 0;
    if (!is_auto && strcmp(force, "ref") == 0) return &ms_kern_ref;
#if MS_KERN_X86
    if (!is_auto && strcmp(force, "avx512-l2") == 0) return have_avx512 ? &ms_kern_avx512_l2 : NULL;
    if (is_auto || strcmp(force, "avx512") == 0) {
        if (have_avx512) return is_auto && prefer_l2 ? &ms_kern_avx512_l2 : &ms_kern_avx512;
        if (!is_auto) return NULL;
    }
    if (is_auto || strcmp(force, "avx2") == 0) {
        if (have_avx2) return &ms_kern_avx2;
        if (!is_auto) return NULL;
    }
#endif
    return is_auto ? &ms_kern_ref : NULL;
}

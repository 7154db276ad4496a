/* tests/fuzz/fuzz_size.c - libFuzzer target: the byte-size parser
 * (ms_parse_size, include/moestream.h; base/size.c).
 *
 * Owns: fuzzing ms_parse_size on the input as a string, and on sizes built
 *   from the input whose value is known.
 * Idea: the input, up to its first NUL, is parsed as it is. Then bytes of the
 *   input make a decimal number N of 1..15 digits and a suffix
 *   (K/M/G/T in either case, an optional "i", an optional "B" or "b"), whose
 *   size is known exactly: N, or N * 1024^k when that is at most 9e18.
 *   Properties:
 *     - any string: -1 or >= 0; -1 for a string that starts with anything
 *       but a digit or '.' (a sign, a space, "inf", "nan") or holds a
 *       space, a sign before its first digit, or two unit letters;
 *     - digits only (1..15): strtoll's value; "N" + suffix: N * 1024^k
 *       exactly (or -1 past 9e18); the same with a trailing character that is
 *       not part of the grammar: -1;
 *     - "N.5K" is N * 1024 + 512.
 * Does not: parse the CLI's --ram words ("min", "auto"; src/cli/opts.c is not
 *   in the library).
 */
#include "moestream.h"
#include "fuzz_fixture.h"

#include <ctype.h>

static const char *const g_suffix[] = {
    "", "K", "k", "M", "m", "G", "g", "T", "t", "KiB", "MiB", "GiB", "TiB", "KB", "MB", "GB", "TB",
    "kb", "Ki", "Gi", "B", "b", "gib", "tiB",
};
#define N_SUFFIX ((int)(sizeof g_suffix / sizeof g_suffix[0]))

static int shift_of(const char *suf) {
    switch (suf[0]) {
    case 'k': case 'K': return 10;
    case 'm': case 'M': return 20;
    case 'g': case 'G': return 30;
    case 't': case 'T': return 40;
    default: return 0;
    }
}

static void any_string(const char *s) {
    const int64_t v = ms_parse_size(s);
    if (v < -1) fz_fail("'%s' parsed as %lld", s, (long long)v);
    if (v == -1) return;
    if (!isdigit((unsigned char)s[0]) && s[0] != '.') fz_fail("'%s' (no leading digit) parsed as %lld", s, (long long)v);
    int units = 0;
    for (const char *p = s; *p; p++) {
        if (!strchr("0123456789.KMGTkmgtiBb", *p)) fz_fail("'%s' (a character outside digits, '.' and units) parsed as %lld", s, (long long)v);
        units += strchr("KMGTkmgt", *p) != NULL;
    }
    if (units > 1) fz_fail("'%s' (two unit letters) parsed as %lld", s, (long long)v);
}

static void known(const uint8_t *d, size_t n) {
    if (n < 2) return;
    const int nd = 1 + d[0] % 15;
    char num[32];
    for (int i = 0; i < nd; i++) num[i] = (char)('0' + (i + 1 < (int)n ? d[i + 1] : d[0]) % 10);
    num[nd] = '\0';
    const long long N = strtoll(num, NULL, 10);
    const char *suf = g_suffix[d[1] % N_SUFFIX];
    char s[64];
    snprintf(s, sizeof s, "%s%s", num, suf);
    const int sh = shift_of(suf);
    const unsigned __int128 want = (unsigned __int128)N << sh;
    const int64_t expect = want > (unsigned __int128)9000000000000000000ull ? -1 : (int64_t)want;
    int64_t v = ms_parse_size(s);
    if (v != expect) fz_fail("'%s' parsed as %lld, expected %lld", s, (long long)v, (long long)expect);
    if (!suf[0] && v != N) fz_fail("'%s' parsed as %lld, strtoll says %lld", s, (long long)v, N);
    /* a character outside the grammar after it */
    static const char junk[] = " -+/x,;Zq!%";
    snprintf(s, sizeof s, "%s%s%c", num, suf, junk[d[0] % (sizeof junk - 1)]);
    if ((v = ms_parse_size(s)) != -1) fz_fail("'%s' parsed as %lld, expected -1", s, (long long)v);
    /* half a unit */
    if (sh && N < (1ll << 40)) {
        snprintf(s, sizeof s, "%s.5%c", num, suf[0]);
        const unsigned __int128 w2 = ((unsigned __int128)N << sh) + ((unsigned __int128)1 << (sh - 1));
        const int64_t e2 = w2 > (unsigned __int128)9000000000000000000ull ? -1 : (int64_t)w2;
        if ((v = ms_parse_size(s)) != e2) fz_fail("'%s' parsed as %lld, expected %lld", s, (long long)v, (long long)e2);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 256) return 0;
    char *s = fz_strndup(data, size);
    if (!s) fz_fail("out of memory");
    any_string(s);
    free(s);
    known(data, size);
    return 0;
}

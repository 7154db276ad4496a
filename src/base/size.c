/* base/size.c - the byte-size parser (size.h). */
#include "base/size.h"

#include <errno.h>
#include <stdlib.h>

int64_t ms_parse_size(const char *s) {
    if (!s) return -1;
    /* digits with at most one '.', nothing strtod would also take (a sign,
       space, inf, nan, an exponent, hex) */
    int digits = 0, dots = 0;
    const char *q = s;
    for (; (*q >= '0' && *q <= '9') || *q == '.'; q++) {
        if (*q == '.') dots++;
        else digits++;
    }
    if (!digits || dots > 1) return -1;
    errno = 0;
    char *end;
    double v = strtod(s, &end);
    if (errno || end != q || !(v >= 0)) return -1;
    double mul = 1;
    switch (*end) {
    case 'k': case 'K': mul = 1024.0; end++; break;
    case 'm': case 'M': mul = 1024.0 * 1024; end++; break;
    case 'g': case 'G': mul = 1024.0 * 1024 * 1024; end++; break;
    case 't': case 'T': mul = 1024.0 * 1024 * 1024 * 1024; end++; break;
    default: break;
    }
    if (mul > 1 && *end == 'i') end++;
    if (*end == 'B' || *end == 'b') end++;
    if (*end) return -1;
    const double b = v * mul;
    if (b > 9.0e18) return -1;
    return (int64_t)b;
}

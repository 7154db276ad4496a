/* base/size.c - the byte-size parser (size.h). */
#include "base/size.h"

#include <errno.h>
#include <stdlib.h>

int64_t ms_parse_size(const char *s) {
    if (!s || !((*s >= '0' && *s <= '9') || *s == '.')) return -1;     /* no sign, inf, nan, space */
    errno = 0;
    char *end;
    double v = strtod(s, &end);
    if (errno || end == s || !(v >= 0)) return -1;
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

/* base/size.h - sizes as people write them: "8G", "512MiB", "1.5T", "4096".
 *
 * Owns: the one parser of byte sizes every command line of the project uses
 *   (the CLI's option table, the server's options, the benchmark programs),
 *   so that a unit means the same everywhere.
 * Invariants: K, M, G and T are powers of 1024, with an optional "i" after
 *   the letter and an optional trailing B; the number is digits with at most
 *   one '.' (no sign, space, inf, nan, exponent or hex); a value over 9e18
 *   bytes is refused, never wrapped.
 * Does not: know the words of --ram (min, all, max, auto: cli/opts.c).
 */
#ifndef MS_BASE_SIZE_H
#define MS_BASE_SIZE_H

#include <stdint.h>

/* s as bytes (fractions truncated toward zero); -1 when it is not a size.
 * Declared for programs in include/moestream.h. */
int64_t ms_parse_size(const char *s);

#endif

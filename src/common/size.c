/* Byte sizes as people write them ("64mb", "2GiB", "512k", "1.5 GB"): the
 * one parser behind the CLI's --limit and --shard-size and Python's
 * memory_limit and max_shard_length. */
#include "config.h"

#include <stdbool.h>
#include <string.h>

#include "common/internal.h"

/* Fraction digits kept: past them a digit changes the value by less than
 * 2^60 / 10^32 bytes (below one byte). */
#define MAX_FRACTION 32

static bool is_space(char ch) { return ch == ' ' || ch == '\t'; }

static char lower(char ch) { return ch >= 'A' && ch <= 'Z' ? (char)(ch - 'A' + 'a') : ch; }

/* The power of 1024 a unit names (b, k, kb, kib, ... p, pb, pib), or -1. */
static int unit_power(const char *u, size_t n) {
  static const char letters[] = "kmgtp";
  if (n == 0) return 0;
  if (n == 1 && lower(u[0]) == 'b') return 0;
  const char *at = strchr(letters, lower(u[0]));
  if (at == NULL || u[0] == '\0') return -1;
  int power = (int)(at - letters) + 1;
  if (n == 1) return power;
  if (n == 2 && lower(u[1]) == 'b') return power;
  if (n == 3 && lower(u[1]) == 'i' && lower(u[2]) == 'b') return power;
  return -1;
}

int bc_parse_size(const char *text, uint64_t *out) {
  if (text == NULL || out == NULL) return bc__error(BC_EINVAL, "bc_parse_size: NULL argument");
  const char *p = text;
  while (is_space(*p)) p++;
  uint64_t whole = 0;
  bool digits = false, overflow = false;
  for (; *p >= '0' && *p <= '9'; p++, digits = true) {
    unsigned d = (unsigned)(*p - '0');
    if (whole > (UINT64_MAX - d) / 10) overflow = true;
    else whole = whole * 10 + d;
  }
  unsigned char frac[MAX_FRACTION];
  size_t nfrac = 0;
  if (*p == '.') {
    p++;
    for (; *p >= '0' && *p <= '9'; p++, digits = true)
      if (nfrac < MAX_FRACTION) frac[nfrac++] = (unsigned char)(*p - '0');
  }
  while (is_space(*p)) p++;
  const char *unit = p;
  while (*p && !is_space(*p)) p++;
  size_t ulen = (size_t)(p - unit);
  while (is_space(*p)) p++;
  int power = digits && *p == '\0' ? unit_power(unit, ulen) : -1;
  if (power < 0)
    return bc__error(BC_EINVAL, "'%s' is not a size: expected a number of bytes with "
                     "an optional unit k, m, g, t or p (each 1024 times the one "
                     "before; kb, kib, KiB, KB mean the same), e.g. 64mb, 2GiB, 1.5 GB",
                     text);
  unsigned shift = 10u * (unsigned)power;
  /* whole << shift, plus floor(0.frac * 2^shift): the fraction doubled
   * `shift` times, each carry out of its first digit one bit. */
  uint64_t fraction = 0;
  for (unsigned s = 0; s < shift; s++) {
    unsigned carry = 0;
    for (size_t j = nfrac; j-- > 0;) {
      unsigned v = frac[j] * 2u + carry;
      frac[j] = (unsigned char)(v % 10);
      carry = v / 10;
    }
    fraction = fraction * 2 + carry;
  }
  if (overflow || (shift && whole > UINT64_MAX >> shift) ||
      (whole << shift) > UINT64_MAX - fraction)
    return bc__error(BC_EINVAL, "'%s' is more than 2^64 - 1 bytes", text);
  *out = (whole << shift) + fraction;
  return 0;
}

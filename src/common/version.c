/* The library's own version, for programs linked against another build. */
#include "config.h"

#include "common/internal.h"

const char *bc_version(void) { return PACKAGE_VERSION; }

int bc__options_version(const char *type, const char *prefix, unsigned got,
                        unsigned want) {
  if (got == want) return 0;
  return bc__error(BC_EINVAL,
                   "%s: version %u, but this library's is %u: initialize the "
                   "struct with %s_INIT or %s_init(&opts, %s_VERSION), then "
                   "set its fields", type, got, want, prefix, type, prefix);
}

/* The library's own version, for programs linked against another build. */
#include "config.h"

#include "common/internal.h"

const char *bc_version(void) { return PACKAGE_VERSION; }

# BC_REQUIRE_PKG(VARIABLE-PREFIX, PKG-CONFIG-MODULES, DEBIAN-PACKAGE)
# ------------------------------------------------------------------
# Finds a dependency through pkg-config (setting VARIABLE-PREFIX_CFLAGS and
# VARIABLE-PREFIX_LIBS), or stops configure with a message that names the
# Debian package to install.
AC_DEFUN([BC_REQUIRE_PKG],
  [PKG_CHECK_MODULES([$1], [$2], [],
    [AC_MSG_ERROR([$2 not found by pkg-config: install the Debian package $3 (apt-get install $3), or run ./bootstrap.sh])])])

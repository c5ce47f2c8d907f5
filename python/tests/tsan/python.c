/* The interpreter `make check-python-threads` runs the Python tests with: the
 * Python of ./configure (its shared or static libpython), in an executable
 * linked with -fsanitize=thread.
 *
 * The extension of a ThreadSanitizer build calls the runtime (__tsan_*) but
 * does not carry it: the executable must.  Preloading a runtime into the
 * plain interpreter is no substitute: clang's shared runtime (14) crashes in
 * libstdc++'s initialisers before it has set itself up, and gcc's libtsan is
 * another version of the runtime than the one clang's instrumentation is
 * made for (and gcc cannot build the tree with -Werror: -Wtsan rejects
 * atomic_thread_fence).
 * Here the runtime is linked in statically, as for any clang -fsanitize=thread
 * program, and is up before the first allocation; CPython itself is not
 * instrumented, but its locks (the GIL included) go through the runtime's
 * pthread interceptors, so the happens-before they give is seen. */
#include <Python.h>

int main(int argc, char **argv) { return Py_BytesMain(argc, argv); }

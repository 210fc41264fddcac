/* The xerbla_ of a test program or plugin: it records what it was told, for the test to check. */
#include <stddef.h>
#include <string.h>

static char last_routine[16];
static int last_info;

void xerbla_(const char* name, const int* info, size_t len) {
    if (len >= sizeof last_routine) len = sizeof last_routine - 1;
    memcpy(last_routine, name, len);
    last_routine[len] = 0;
    last_info = *info;
}

/* Test tool, preloaded into a process: at exit it copies /proc/self/maps to the file named by
   TILESTREAM_TEST_MAPS_OUT, so a test sees which libraries a finished run of the tool had mapped. */
#include <stdio.h>
#include <stdlib.h>

__attribute__((destructor)) static void copy_maps(void) {
    const char* out = getenv("TILESTREAM_TEST_MAPS_OUT");
    if (!out) return;
    FILE* in = fopen("/proc/self/maps", "r");
    FILE* to = fopen(out, "w");
    char buf[4096];
    size_t n;
    if (in && to)
        while ((n = fread(buf, 1, sizeof buf, in)) > 0) fwrite(buf, 1, n, to);
    if (in) fclose(in);
    if (to) fclose(to);
}

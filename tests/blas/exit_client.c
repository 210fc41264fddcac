/* Calls exit() while another thread is inside a dgemm_ that the BLAS drop-in routes to tilestream.
   usage: exit_client DELAY_US. A thread starts one 700x700x700 dgemm_ (routed with
   TILESTREAM_BLAS_THRESHOLD=1) and then waits forever; main calls exit(0) after DELAY_US, wherever
   that call is: opening the context, running, or done. The process must end with status 0. */
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

void dgemm_(const char*, const char*, const int*, const int*, const int*, const double*, const double*,
            const int*, const double*, const int*, const double*, double*, const int*, size_t, size_t);

static int n = 700;
static double *a, *b, *c; /* global: still reachable when LeakSanitizer looks at exit */

static void* one_call(void* unused) {
    (void)unused;
    a = malloc(sizeof(double) * (size_t)n * (size_t)n);
    b = malloc(sizeof(double) * (size_t)n * (size_t)n);
    c = malloc(sizeof(double) * (size_t)n * (size_t)n);
    for (int i = 0; i < n * n; ++i) a[i] = b[i] = 1.0 / (i % 7 + 1);
    const double one = 1, zero = 0;
    dgemm_("N", "N", &n, &n, &n, &one, a, &n, b, &n, &zero, c, &n, 1, 1);
    for (;;) pause();
    return 0;
}

int main(int argc, char** argv) {
    if (argc != 2) return 2;
    pthread_t t;
    if (pthread_create(&t, 0, one_call, 0) != 0) return 2;
    usleep((useconds_t)atoi(argv[1]));
    exit(0);
}

/* A host that links no BLAS and loads a plugin with its own xerbla_ (argv[1], xerbla_plugin.c) with
   dlopen(RTLD_LOCAL), as Python loads numpy's lapack_lite. The plugin's LAPACK and BLAS calls with
   illegal arguments must reach the plugin's xerbla_; they reach another only when something in the
   global scope defines xerbla_ (a preloaded drop-in that brings a BLAS along did). */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char** argv) {
    if (argc != 2) return 2;
    void* plugin = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!plugin) {
        printf("cannot load %s: %s\n", argv[1], dlerror());
        return 1;
    }
    typedef void calls_fn(char*, int*, char*, int*);
    calls_fn* calls = (calls_fn*)dlsym(plugin, "plugin_illegal_calls");
    char getrf[16] = "", gemm[16] = "";
    int getrf_info = 0, gemm_info = 0;
    calls(getrf, &getrf_info, gemm, &gemm_info);
    const int getrf_ok = strstr(getrf, "DGETRF") != NULL && getrf_info == 1;
    const int gemm_ok = strstr(gemm, "DGEMM") != NULL && gemm_info == 3;
    printf("dgetrf_ m=-1 from the plugin: its xerbla_ saw '%s' parameter %d: %s\n", getrf, getrf_info,
           getrf_ok ? "ok" : "WRONG (expected DGETRF parameter 1)");
    printf("dgemm_ m=-1 from the plugin: its xerbla_ saw '%s' parameter %d: %s\n", gemm, gemm_info,
           gemm_ok ? "ok" : "WRONG (expected DGEMM parameter 3)");
    return getrf_ok && gemm_ok ? 0 : 1;
}

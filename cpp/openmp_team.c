/* See openmp_team.h. Only GOMP_parallel and omp_get_thread_num are used, which libgomp, LLVM's libomp
 * and Intel's libiomp5 all export, and which have not changed since GCC 4.9. */
#define _GNU_SOURCE
#include "openmp_team.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <sys/resource.h>

/* Looked up by soname with RTLD_NOLOAD: found only when something (libtorch) has loaded it already. */
static const char *const runtimes[] = {"libgomp.so.1", "libomp.so", "libiomp5.so"};
#define LOOK_AGAIN_EVERY 256

static spine_openmp_t found;
static int have_found;
static int share;
static unsigned calls_since_look;
static int forked_child;

static void forget_after_fork(void) {
    forked_child = 1;
    have_found = 0;
}

static int look(void) {
    for (size_t i = 0; i < sizeof runtimes / sizeof runtimes[0]; i++) {
        void *library = dlopen(runtimes[i], RTLD_NOLOAD | RTLD_LAZY);
        if (!library) continue;
        void *parallel = dlsym(library, "GOMP_parallel");
        void *thread_num = dlsym(library, "omp_get_thread_num");
        dlclose(library);   /* drops the reference NOLOAD took; whoever loaded it keeps it loaded */
        if (parallel && thread_num) {
            found.parallel = (void (*)(void (*)(void *), void *, unsigned, unsigned))parallel;
            found.thread_num = (int (*)(void))thread_num;
            return 1;
        }
    }
    return 0;
}

static void register_fork_handler(void) { pthread_atfork(NULL, NULL, forget_after_fork); }

void spine_openmp_share(int on) {
    static pthread_once_t registered = PTHREAD_ONCE_INIT;
    pthread_once(&registered, register_fork_handler);
    share = on;
}

const spine_openmp_t *spine_openmp_loaded(void) {
    if (!share || forked_child) return NULL;
    if (!have_found && calls_since_look++ % LOOK_AGAIN_EVERY == 0) have_found = look();
    return have_found ? &found : NULL;
}

static size_t launching_stack(void) {
    struct rlimit limit;
    if (getrlimit(RLIMIT_STACK, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return 8u << 20;
    return (size_t)limit.rlim_cur;
}

int spine_openmp_stack_is_roomy(void) {
    static __thread int known;   /* 1: roomy, -1: not, 0: not looked yet */
    if (!known) {
        pthread_attr_t attr;
        size_t size = 0;
        if (pthread_getattr_np(pthread_self(), &attr) == 0) {
            pthread_attr_getstacksize(&attr, &size);
            pthread_attr_destroy(&attr);
        }
        /* a thread's stack includes its guard page; allow for it */
        known = size + 65536 >= launching_stack() ? 1 : -1;
    }
    return known > 0;
}

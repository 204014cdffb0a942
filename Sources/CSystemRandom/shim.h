#ifndef SDUI_PROXY_CSYSTEMRANDOM_SHIM_H
#define SDUI_PROXY_CSYSTEMRANDOM_SHIM_H

#include <stddef.h>

#if defined(__linux__)
#include <sys/random.h>
#else
#include <stdlib.h>
#endif

/* Fills `buffer` with `count` bytes from the system's secure generator in one call (getrandom(2) on Linux, which
   Swift's Glibc module does not export); returns how many it wrote, or -1 with errno set. */
static inline long sdui_system_random(void *buffer, size_t count) {
#if defined(__linux__)
    return (long)getrandom(buffer, count, 0);
#else
    arc4random_buf(buffer, count);
    return (long)count;
#endif
}

#endif

/* The reference system's dummy workload (ros-realtime/reference-system, number_cruncher.hpp):
 * count the primes in [2, n] by trial division. Called from Python through ctypes, which
 * releases the GIL for the duration of the call, so several nodes can crunch in parallel. */
#include <stdint.h>

uint64_t crunch(uint64_t n)
{
    uint64_t primes = 0;
    if (n <= 2) {
        return 2;
    }
    for (uint64_t i = 2; i <= n; ++i) {
        volatile int is_prime = 1;   /* volatile: the loop must not be optimised away */
        for (uint64_t d = 2; d < i; ++d) {
            if (i % d == 0) {
                is_prime = 0;
                break;
            }
        }
        if (is_prime) {
            ++primes;
        }
    }
    return primes;
}

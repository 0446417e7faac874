/* Marks for callgrind, called from Python through ctypes (bench/instructions.py): count
   only what runs between start() and stop(), and dump it under a name. */
#include <valgrind/callgrind.h>

void cg_start(void) { CALLGRIND_TOGGLE_COLLECT; }
void cg_stop_and_dump(const char *name) {
    CALLGRIND_TOGGLE_COLLECT;
    CALLGRIND_DUMP_STATS_AT(name);
}

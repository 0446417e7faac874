/* Marks for callgrind, called from Python through ctypes (bench/instructions.py): count
   only what runs between start() and stop(), and dump it under a name; or (--parts)
   toggle counting on and off around chosen functions, and dump. */
#include <valgrind/callgrind.h>

void cg_start(void) { CALLGRIND_TOGGLE_COLLECT; }
void cg_stop_and_dump(const char *name) {
    CALLGRIND_TOGGLE_COLLECT;
    CALLGRIND_DUMP_STATS_AT(name);
}
void cg_toggle(void) { CALLGRIND_TOGGLE_COLLECT; }
void cg_dump(const char *name) { CALLGRIND_DUMP_STATS_AT(name); }

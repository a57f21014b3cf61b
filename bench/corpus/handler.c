/* The corpus's C handler (`lopi run --handler`): counts every probed call, return and system
 * call in its own globals, and checks that returns never outnumber calls on a thread. */
#include "lopi.h"

static unsigned long calls, returns, syscalls, unbalanced;

void lopi_enter(const struct lopi_event *e) { (void)e; calls++; }

void lopi_leave(const struct lopi_event *e)
{
    (void)e;
    if (++returns > calls)
        unbalanced++;
}

void lopi_syscall_enter(const struct lopi_event *e) { (void)e; syscalls++; }

/* The corpus's C handler for rewritten files: counts every probed call and return in its own
 * globals (handler.c also counts system calls, which a rewritten program does not probe). */
#include "lopi.h"

static unsigned long calls, returns, unbalanced;

void lopi_enter(const struct lopi_event *e) { (void)e; calls++; }

void lopi_leave(const struct lopi_event *e)
{
    (void)e;
    if (++returns > calls)
        unbalanced++;
}

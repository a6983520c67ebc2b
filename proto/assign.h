#ifndef PROPHET_ASSIGN_H
#define PROPHET_ASSIGN_H

#include <stddef.h>

/*
 * Slot -> worker assignment computed by the master.
 *
 * holders[i] is the worker that currently holds slot i (its owner, or the
 * worker a handover is heading to), or NULL. workers are the live members.
 * target[i] receives a pointer into workers (or NULL when there are none).
 *
 * Balanced: owned counts differ by at most one. Sticky: the fewest slots
 * change holder - the larger quotas go to the workers that already hold
 * the most, and a worker keeps its lowest-numbered slots. Deterministic:
 * the result depends only on the inputs, not on their order.
 * Returns the number of slots whose holder changes.
 */
int assign_compute(int nslots, const char *const *holders,
		   const char *const *workers, int nworkers,
		   const char **target);

#endif

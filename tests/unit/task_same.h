#ifndef PROPHET_TASK_SAME_H
#define PROPHET_TASK_SAME_H

#include "task.h"

/*
 * 1 when two tasks read from one submission, by the hot path
 * (task_from_text) and by jansson + task_from_json, hold the same fields:
 * every one but the id (each caller compares ids as its reading allows),
 * and none of the members outside the hot path's shape (headers,
 * callback, cron, timezone) on either side. test_tasktext and fuzz_task
 * hold the two paths against each other with it.
 */
int task_same_fields(const struct task *a, const struct task *b);

#endif

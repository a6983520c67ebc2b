#ifndef PROPHET_KEYS_H
#define PROPHET_KEYS_H

#include <stdio.h>
#include <string.h>

#include "num.h"

/*
 * Redis key names. Every key of a slot carries the hash tag {prophet:N} so
 * that, on Redis Cluster, a slot lives on one node and its Lua scripts are
 * legal.
 *   {prophet:N}:due       ZSET  id -> due ms        (scheduled, within horizon)
 *   {prophet:N}:task      HASH  id -> payload        (what the worker publishes)
 *   {prophet:N}:inflight  ZSET  id -> lease deadline (claimed, not yet delivered)
 *   {prophet:N}:attempt   HASH  id -> publish attempts so far
 *   {prophet:N}:epoch     STRING highest owner epoch seen (the Redis fence)
 *   {prophet:N}:cancelled ZSET  id -> cancel time: tombstones that keep a
 *                         loader that read the task before the cancel from
 *                         indexing it again (trimmed after an hour)
 *   {prophet:N}:built     STRING set when the slot's index was (re)built from
 *                         the DB; its absence means Redis lost the slot
 *   {prophet:0}:probe     STRING written (10 s TTL) by a manager or a worker
 *                         while Redis refuses its writes, to learn when it
 *                         takes them again (manager/ingest.c,
 *                         worker/recovery.c)
 * Tasks due later than the near window (task.bucket_near_ms) wait in
 * buckets of task.bucket_ms of due time, which cost about half as much as
 * the due/task pair (docs/architecture.md, "Buckets"):
 *   {prophet:N}:b:S       LIST  "<due ms> <id> <payload>" of the tasks due
 *                         in [S, S + bucket_ms), S in ms; appended only
 *   {prophet:N}:bk        ZSET  S -> S: the buckets that exist
 *   {prophet:N}:moved     HASH  id -> "<current due> <last due>" for a task
 *                         rescheduled while a copy may wait in a bucket:
 *                         copies of another due are stale (trimmed an hour
 *                         after the last due)
 *   {prophet:N}:held:T    ZSET  id -> due ms: tasks of paused topic T,
 *                         claimed and taken out of due (worker/pause.c)
 * The slot's owner moves a bucket into due/task (SCRIPT_MOVE) once it
 * starts within the near window; tasks due sooner are indexed there
 * directly.
 */
/* Elements moved per SCRIPT_MOVE call, so a large bucket does not hold
 * Redis for long. */
#define BUCKET_MOVE_BATCH 2000
#define RKEY_MAX 64

/* "{prophet:<slot>}:<suffix>", cut to len as snprintf would cut it, at a
 * tenth of snprintf's instructions: every claim and scan names several. */
static inline void
rkey_slot(char *buf, size_t len, int slot, const char *suffix)
{
	char tmp[RKEY_MAX];
	size_t n = 9, sl = strlen(suffix);

	if (len == 0)
		return;
	memcpy(tmp, "{prophet:", 9);
	n += num_format_ll(tmp + n, slot);
	tmp[n++] = '}';
	tmp[n++] = ':';
	if (sl > sizeof(tmp) - 1 - n)
		sl = sizeof(tmp) - 1 - n;
	memcpy(tmp + n, suffix, sl);
	n += sl;
	if (n > len - 1)
		n = len - 1;
	memcpy(buf, tmp, n);
	buf[n] = '\0';
}

static inline void
rkey_due(char *buf, size_t len, int slot)
{
	rkey_slot(buf, len, slot, "due");
}

static inline void
rkey_task(char *buf, size_t len, int slot)
{
	rkey_slot(buf, len, slot, "task");
}

static inline void
rkey_inflight(char *buf, size_t len, int slot)
{
	rkey_slot(buf, len, slot, "inflight");
}

static inline void
rkey_attempt(char *buf, size_t len, int slot)
{
	rkey_slot(buf, len, slot, "attempt");
}

static inline void
rkey_cancelled(char *buf, size_t len, int slot)
{
	rkey_slot(buf, len, slot, "cancelled");
}

static inline void
rkey_marker(char *buf, size_t len, int slot)
{
	rkey_slot(buf, len, slot, "built");
}

static inline void
rkey_bk(char *buf, size_t len, int slot)
{
	rkey_slot(buf, len, slot, "bk");
}

/* Tasks of a paused topic, held out of due (worker/pause.c): the key is
 * this prefix and the topic, a ZSET id -> due ms; their payloads stay in
 * task. */
static inline void
rkey_hprefix(char *buf, size_t len, int slot)
{
	rkey_slot(buf, len, slot, "held:");
}

/* The buckets' common prefix; a bucket is the prefix and its start. */
static inline void
rkey_bprefix(char *buf, size_t len, int slot)
{
	rkey_slot(buf, len, slot, "b:");
}

/* "{prophet:<slot>}:b:<start_ms>", cut to len like rkey_slot. */
static inline void
rkey_bucket(char *buf, size_t len, int slot, long long start_ms)
{
	char suffix[2 + NUM_LL_MAX] = "b:";

	num_format_ll(suffix + 2, start_ms);
	rkey_slot(buf, len, slot, suffix);
}

static inline void
rkey_moved(char *buf, size_t len, int slot)
{
	rkey_slot(buf, len, slot, "moved");
}

static inline void
rkey_epoch(char *buf, size_t len, int slot)
{
	rkey_slot(buf, len, slot, "epoch");
}

/* Pub/sub channel on which the manager wakes the owner of a slot that just
 * got a task due within the look-ahead (payload: the slot number). Pub/sub
 * ignores the Redis database number, so the channel names the cluster. */
static inline void
rchan_wake(char *buf, size_t len, const char *root)
{
	snprintf(buf, len, "prophet:wake:%s", root);
}

/* Kafka headers on every published task (CONTRACT.md). */
#define KHDR_ID "prophet-id"
#define KHDR_DUE_AT "prophet-due-at"
#define KHDR_FIRED_AT "prophet-fired-at"
#define KHDR_ATTEMPT "prophet-attempt"
#define KHDR_SLOT "prophet-slot"
#define KHDR_EPOCH "prophet-epoch"
/* Recurring tasks only: the scheduled time (ms) of this occurrence. With
 * prophet-id it names the occurrence: a duplicate repeats both. */
#define KHDR_OCCURRENCE "prophet-occurrence"

/* ZooKeeper nodes under the cluster root. */
#define ZPATH_CONFIG "/config"
#define ZPATH_SLOTS "/work_slot"
#define ZPATH_SLOT_PREFIX "/work_slot/ws_"
#define ZPATH_WORKERS "/workers"
#define ZPATH_ELECTION "/election"
#define ZPATH_MASTER "/master"
/* Ephemeral: the manager that prunes finished tasks (manager/prune.c). */
#define ZPATH_PRUNER "/pruner"
/* {"paused":["topic",...]}: rewritten by the manager after every pause
 * and resume commit; workers watch it (the DB's topic_pause decides). */
#define ZPATH_PAUSED "/paused"
/* One ephemeral child per running notifier, with what it consumes
 * (proto/cover.h); the manager warns of callbacks none of them covers. */
#define ZPATH_NOTIFIERS "/notifiers"

/* The path of node (a ZPATH_*) under the cluster root. */
static inline void
zpath(char *buf, size_t len, const char *root, const char *node)
{
	snprintf(buf, len, "%s%s", root, node);
}

/* A child of node: <root><node>/<name>. */
static inline void
zpath_child(char *buf, size_t len, const char *root, const char *node,
	    const char *name)
{
	snprintf(buf, len, "%s%s/%s", root, node, name);
}

/* The node of a slot: <root>/work_slot/ws_<slot>. */
static inline void
zpath_slot(char *buf, size_t len, const char *root, int slot)
{
	snprintf(buf, len, "%s%s%d", root, ZPATH_SLOT_PREFIX, slot);
}

#endif

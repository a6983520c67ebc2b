#ifndef PROPHET_WORKER_H
#define PROPHET_WORKER_H

#include <stdint.h>

#include <event2/event.h>
#include <event2/http.h>

#include "kafka.h"
#include "refclock.h"
#include "task.h"
#include "timerwheel.h"

struct cfg;
struct db_pool;
struct db_conn;
struct redis;
struct zk;
struct kafka_producer;
struct daemon;
struct metric;
struct hmap;
struct eos;
struct eos_batch;

#define WORKER_METRICS(X)                                                      \
	X(fired, COUNTER, "prophet_tasks_fired_total",                         \
	  "Tasks claimed and handed to the Kafka producer")                    \
	X(published, COUNTER, "prophet_tasks_published_total",                 \
	  "Delivery reports with success")                                     \
	X(delivered, COUNTER, "prophet_tasks_delivered_total",                 \
	  "Tasks marked delivered in the database")                            \
	X(expired, COUNTER, "prophet_tasks_expired_total",                     \
	  "Tasks given up because their ttl_ms passed before publishing")      \
	X(occurrences, COUNTER, "prophet_cron_occurrences_total",              \
	  "Occurrences of recurring tasks recorded (published or skipped)")    \
	X(misfires, COUNTER, "prophet_cron_misfires_total",                    \
	  "Occurrences of recurring tasks fired later than "                   \
	  "worker.misfire_threshold_ms (published per fire_once, or skipped)") \
	X(publish_errors, COUNTER, "prophet_publish_errors_total",             \
	  "Produce calls or delivery reports that failed")                     \
	X(unknown_topic, COUNTER, "prophet_publish_unknown_topic_total",       \
	  "Publishes that failed because the task's Kafka topic does not "     \
	  "exist (the task stays due and is retried after worker.lease_ms)")   \
	X(lateness, HISTOGRAM, "prophet_fire_lateness_seconds",                \
	  "Publish time minus due time")                                       \
	X(claims, COUNTER, "prophet_claim_calls_total",                        \
	  "Redis claim round trips")                                           \
	X(claim_lost, COUNTER, "prophet_claim_lost_total",                     \
	  "Ids that were no longer due when claimed (cancelled, moved, or "    \
	  "claimed by another worker)")                                        \
	X(fenced, COUNTER, "prophet_fenced_writes_total",                      \
	  "Claims or state updates refused because a newer epoch owns the "    \
	  "slot")                                                              \
	X(requeued, COUNTER, "prophet_lease_requeued_total",                   \
	  "Claimed tasks whose lease ran out and went back to due")            \
	X(scan_read, COUNTER, "prophet_scan_read_total",                       \
	  "Entries of the due sets read by look-ahead scans (a full scan "     \
	  "reads again what the worker already holds)")                        \
	X(scans_full, COUNTER, "prophet_scans_full_total",                     \
	  "Look-ahead scans that read a due set from its start")               \
	X(loaded, COUNTER, "prophet_horizon_loaded_total",                     \
	  "Tasks moved from the database into Redis by the horizon loader")    \
	X(bucket_moved, COUNTER, "prophet_bucket_moved_total",                 \
	  "Tasks moved from their minute's bucket into the due set")           \
	X(bucket_dropped, COUNTER, "prophet_bucket_dropped_total",             \
	  "Bucket copies dropped when moved (cancelled, rescheduled or in "    \
	  "flight)")                                                           \
	X(mark_failures, COUNTER, "prophet_db_mark_failures_total",            \
	  "Failed database batches of state updates (retried)")                \
	X(backpressure, COUNTER, "prophet_kafka_backpressure_total",           \
	  "Claim rounds postponed because the producer queue was full")        \
	X(rebuilds, COUNTER, "prophet_redis_rebuilds_total",                   \
	  "Slot indexes rebuilt from the database (Redis data loss or "        \
	  "return from DB mode)")                                              \
	X(rebuild_tasks, COUNTER, "prophet_redis_rebuild_tasks_total",         \
	  "Tasks re-indexed in Redis by rebuilds")                             \
	X(rebuild_seconds, HISTOGRAM,                                          \
	  "prophet_redis_rebuild_duration_seconds",                            \
	  "Time to rebuild one slot's index")                                  \
	X(db_mode, GAUGE, "prophet_db_mode_slots",                             \
	  "Owned slots firing straight from the database (Redis fallback)")    \
	X(db_claims, COUNTER, "prophet_db_claimed_total",                      \
	  "Tasks claimed from the database in DB mode")                        \
	X(db_requeued, COUNTER, "prophet_db_lease_requeued_total",             \
	  "Tasks left firing in the database whose lease ran out, requeued")   \
	X(wheel_size, GAUGE, "prophet_wheel_tasks",                            \
	  "Tasks waiting in the in-memory timing wheel")                       \
	X(held, GAUGE, "prophet_tasks_held",                                   \
	  "Tasks this worker holds (wheel, claiming, publishing, marking)")    \
	X(kafka_queue, GAUGE, "prophet_kafka_queue_messages",                  \
	  "Messages in the producer queue")                                    \
	X(slots_owned, GAUGE, "prophet_slots_owned", "Slots this worker owns") \
	X(slots_gained, COUNTER, "prophet_slots_gained_total",                 \
	  "Slots this worker started owning")                                  \
	X(slots_lost, COUNTER, "prophet_slots_lost_total",                     \
	  "Slots this worker stopped owning (handover, reassignment, "         \
	  "session loss)")                                                     \
	X(is_master, GAUGE, "prophet_master",                                  \
	  "1 while this worker is the elected master")                         \
	X(rebalances, COUNTER, "prophet_rebalances_total",                     \
	  "Assignment changes written by this worker as master")               \
	X(rebalance_seconds, HISTOGRAM, "prophet_rebalance_duration_seconds",  \
	  "From a membership change to every slot settled on its target")      \
	X(self_fenced, GAUGE, "prophet_self_fenced",                           \
	  "1 while claiming is stopped because ZooKeeper is unreachable")      \
	X(redis_up, GAUGE, "prophet_redis_up", "1 when Redis is connected")    \
	X(redis_failovers, COUNTER, "prophet_redis_failovers_total",           \
	  "Redis failovers and restarts (new primary/run_id)")                 \
	X(db_up, GAUGE, "prophet_db_connections",                              \
	  "Database connections open (of db.pool_size)")                       \
	X(zk_up, GAUGE, "prophet_zookeeper_up",                                \
	  "1 when the ZooKeeper session is connected")                         \
	X(pause_held, COUNTER, "prophet_pause_held_total",                     \
	  "Claimed tasks of paused topics held back instead of published")     \
	X(pause_released, COUNTER, "prophet_pause_released_total",             \
	  "Held tasks of resumed topics moved back to due")                    \
	X(paused_topics, GAUGE, "prophet_paused_topics",                       \
	  "Topics this worker holds as paused")                                \
	X(clock_offset, GAUGE, "prophet_clock_offset_seconds",                 \
	  "The reference clock (Redis TIME) minus this host's clock")          \
	X(clock_skewed, GAUGE, "prophet_clock_skewed",                         \
	  "1 while this host's clock is off the reference by more than "       \
	  "worker.max_clock_skew_ms")                                          \
	X(eos_txns, COUNTER, "prophet_eos_transactions_total",                 \
	  "Exactly-once: Kafka transactions committed")                        \
	X(eos_records, COUNTER, "prophet_eos_transaction_tasks_total",         \
	  "Exactly-once: tasks published in committed transactions")           \
	X(eos_txn_failures, COUNTER, "prophet_eos_transaction_failures_total", \
	  "Exactly-once: transactions aborted or of unknown outcome (their "   \
	  "tasks fire again after their lease unless a marker shows them "     \
	  "committed)")                                                        \
	X(eos_txn_seconds, HISTOGRAM, "prophet_eos_transaction_seconds",       \
	  "Exactly-once: time to send and commit one transaction")             \
	X(eos_recorded, COUNTER, "prophet_eos_markers_recorded_total",         \
	  "Exactly-once: tasks a slot's new owner found published (a marker) " \
	  "and recorded delivered instead of firing them again")

struct worker_metrics {
#define WM_FIELD(f, t, n, h) struct metric *f;
	WORKER_METRICS(WM_FIELD)
#undef WM_FIELD
	struct metric *epoch; /* per slot */
};

enum wtask_state {
	WT_WHEEL,      /* waiting for its due millisecond */
	WT_CLAIMQ,     /* due, waiting for a claim round trip */
	WT_CLAIMING,   /* in a claim round trip */
	WT_EARLY,      /* claimed ahead, published at its due millisecond */
	WT_PUBLISHING, /* handed to Kafka, no delivery report yet */
	WT_MARKING,    /* delivered; database update pending */
};

/* A task this worker holds, from the look-ahead scan to its DB update. */
struct wtask {
	char id[TASK_ID_MAX + 1];
	int slot;
	enum wtask_state state;
	int64_t due_at;
	int64_t epoch;
	int attempt;
	int64_t fired_at;
	int expire;	     /* ttl passed: mark expired, do not publish */
	int from_db;	     /* claimed from the DB (status firing there) */
	int counted;	     /* its attempt is recorded in Redis */
	int64_t lease_until; /* Redis: the in-flight deadline its claim set */
	/* Recurring tasks: due_at is the occurrence being fired. */
	int recurring;
	int misfired;  /* fired later than the misfire threshold */
	int skip;      /* misfired under policy skip: recorded, not published */
	char *payload; /* to index the next occurrence with */
	char *ktopic;  /* publishing: the Kafka topic, for errors */
	char trace[48];	      /* " trace=<id>" for its log lines, or "" */
	struct task *early;   /* WT_EARLY: the claimed payload, decoded */
	struct eos_batch *eb; /* exactly-once: its committed transaction */
	int eos_apply;	      /* exactly-once: a marker found at open */
	struct timerwheel_timer timer;
	struct wtask *next; /* claim queue or mark batch */
	struct worker *w;
};

/* Where an owned slot fires from. */
enum slot_mode {
	SM_REDIS,   /* the Redis index (normal) */
	SM_REBUILD, /* the Redis index is being rebuilt from the DB; no claims */
	SM_DB,	    /* Redis unavailable: straight from the DB */
};

/*
 * The lifecycle of a slot in this worker. A phase changes only through
 * slot_phase_set() (worker/coord.c), along the moves slot_phase_allowed()
 * lists (worker/slotfsm.c, the one table; tests/model/handover.pml's
 * transitions are checked against it). Every change of phase or mode
 * bumps the slot's generation: an asynchronous call that touches a slot
 * carries the generation it was sent under and its answer is dropped
 * when the slot has moved on (slot_current()).
 */
enum slot_phase {
	SP_IDLE,     /* not ours here (ZooKeeper may say ours: not started) */
	SP_STARTING, /* ours at epoch in ZooKeeper: raising the fences */
	SP_OWNED,    /* scanning and claiming under epoch, in mode */
	SP_DRAINING, /* handover asked for: nothing new, in-flight finishes */
	SP_HANDING,  /* drained: the write giving it away is out */
	SP_N
};

/* worker/slotfsm.c: no servers, no loop (unit-tested alone). */
const char *slot_phase_name(enum slot_phase p);
int slot_phase_allowed(enum slot_phase from, enum slot_phase to);
/* The moves, one per call: *from, *to for i = 0, 1, ... while it answers
 * 1 (the table for tests and the model check). */
int slot_phase_move(int i, enum slot_phase *from, enum slot_phase *to);

struct wslot {
	enum slot_phase phase;
	unsigned gen; /* bumped on every phase or mode change */
	enum slot_mode mode;
	int64_t rebuild_started_ms;
	size_t rebuild_tasks;
	int dbclaiming;
	/* Ids whose delivery record committed while a DB-mode claim of this
	 * slot was out (dbmode.c): that claim may have taken them first. */
	struct hmap *marked_in_claim;
	int dbreaping;
	int64_t next_dbreap_ms;
	int64_t next_marker_ms;
	int fence_refused; /* Redis answered the fence with an error */
	int64_t release_started_ms;
	int busy; /* tasks claiming, publishing or marking */
	int64_t epoch;
	int scanning;
	int rescan; /* woken while a scan was out */
	/* Incremental scans: when the scan that set scan_hwm ran, in
	 * generation scan_gen, every task of due/ scored up to it was read;
	 * later scans read from there on. Whatever writes below it (a wake,
	 * a requeue, a task let go unclaimed) sets scan_full: the next scan
	 * reads from the start, as does one every full_scan_ms. */
	int64_t scan_hwm;
	unsigned scan_gen;
	int scan_full;
	int64_t next_full_scan_ms; /* monotonic */
	int claiming;
	int reaping;
	/* Wall ms: in-flight leases that end before it were taken by an
	 * earlier owner of the slot (ours end later), so they are requeued
	 * at once instead of when they run out; 0 once none is left. */
	int64_t takeover_before;
	int loading;
	int moving; /* a SCRIPT_MOVE is out */
	int64_t next_move_ms;
	long long moved_cursor; /* HSCAN of the moved entries (trim) */
	struct wtask *claimq_head, *claimq_tail;
	size_t claimq_n;
	int64_t next_load_ms;
	int64_t next_reap_ms;
	int64_t next_sweep_ms;
	int sweeping;
	/* While a sweep is out: ids of this slot whose final state this worker
	 * recorded since it started (keys owned), so that the sweep, which
	 * may have read them as still scheduled, does not index them again. */
	struct hmap *finished;
	/* While the slot is rebuilt (SM_REBUILD): "<due_at>:<id>" of each
	 * task whose final state (or occurrence) this worker recorded since,
	 * so that a page read before that record does not index it again
	 * (recovery.c); freed when the rebuild completes. */
	struct hmap *rebuild_done;
};

struct slot_node;

struct worker {
	struct cfg *cfg;
	struct event_base *base;
	struct daemon *daemon;
	struct evhttp *http;
	struct db_pool *db;
	struct db_dsn *dsn; /* where db connects, read at start */
	struct redis *redis;
	struct refclock *clock;	 /* due decisions: worker_now() */
	struct redis *redis_sub; /* wake-ups from the manager */
	struct zk *zk;
	struct kafka_producer *kafka;
	struct timerwheel *wheel;
	struct hmap *tasks; /* id -> struct wtask */
	char id[128];
	int nslots;
	struct wslot *slots;
	struct event *stop_ev;
	int64_t lookahead_ms;
	int64_t lease_ms;
	int64_t claim_ahead_ms;
	int64_t claim_group_ms; /* worker.claim_group_ms, >= 1 */
	int64_t horizon_ms;
	int64_t index_margin_ms; /* task.index_margin_ms */
	int64_t bucket_ms;	 /* task.bucket_ms, 0: no buckets */
	int64_t bucket_near_ms;	 /* task.bucket_near_ms */
	int64_t misfire_threshold_ms;
	int claim_batch;
	int scan_batch;
	int64_t full_scan_ms; /* see wslot.scan_hwm */
	int queue_max;
	const char *topic_prefix;
	int stopping;
	int64_t stop_deadline_ms;
	/* Coordination: cluster.root, and coord.c's own state. */
	char root[256];
	struct coord *co;
	struct pause *pause; /* paused topics (pause.c) */
	struct eos *eos;     /* exactly-once publishing (eos.c), or NULL */
	/* Degraded modes: recovery.c's own state; dbmode.c's event. */
	struct recovery *rec;
	struct event *dbfire_ev;
	struct firing *fi;  /* firing.c's own state */
	struct scanner *sc; /* scanner.c's own state */
	struct worker_metrics m;
};

/* scanner.c: look-ahead scan, timing wheel, claims, lease reaper, loader */
void scanner_start(struct worker *w);
void scanner_stop(struct worker *w);
/* Now, for every due decision: the earlier of this host's clock and the
 * reference (common/refclock.h), so a clock jumped forwards cannot fire
 * anything early. */
static inline int64_t
worker_now(const struct worker *w)
{
	return refclock_fire_ms(w->clock);
}

void scanner_tick(struct worker *w);
/* Forgets a held task (frees it). */
void wtask_release(struct worker *w, struct wtask *t);

/* firing.c: publishing and the delivered/expired state updates */
/* Decodes a task's Redis payload into pt; if it cannot be decoded, says
 * so, releases t and returns -1. */
int firing_decode(struct worker *w, struct wtask *t, const char *payload,
		  size_t len, struct task *pt);
void firing_dr_cb(void *opaque, rd_kafka_resp_err_t err, void *arg);
void firing_expire(struct worker *w, struct wtask *t);
void firing_start(struct worker *w);
void firing_stop(struct worker *w);
/* After everything else stopped (delivery reports may come until then). */
void firing_free(struct worker *w);
/* Publishes sent without a delivery report yet; n of them done (eos.c). */
size_t firing_publishing(const struct worker *w);
void firing_publishing_done(struct worker *w, size_t n);
/* Tasks publishing or waiting for their DB update. */
size_t firing_busy(const struct worker *w);

/* scanner.c */
/* Moves a slot's time pointer forward (never back); then() runs on the
 * loop when saved (status 0) or failed; NULL: failures are logged. */
void scanner_save_pointer(struct worker *w, int slot, int64_t until,
			  void (*then)(int status, const char *err, void *arg),
			  void *arg);
/* Redis answers again: claims whose reply was lost go back to due. */
void scanner_redis_up(struct worker *w);
struct limbo;
/* Scans a slot now (a recurring task's next occurrence was just indexed). */
void scanner_wake(struct worker *w, int slot);
/* The next scan of every slot reads its due set from the start. */
void scanner_scan_all(struct worker *w);
/* Drops the tasks of a slot that wait in the wheel or the claim queue
 * (they stay due in Redis for the next owner). */
void scanner_drop_slot(struct worker *w, int slot);
/* A task's final state (delivered, expired) was recorded in the DB. */
void scanner_task_finished(struct worker *w, const struct wtask *t);
/* At shutdown, before the loop's base goes: frees the scanner's events
 * and sends the lost claims back to due; then, at the very end,
 * scanner_free() frees what sweeps still out left and its state. */
void scanner_release(struct worker *w);
void scanner_free(struct worker *w);

/* firing.c: publish one task (payload already decoded). */
int firing_publish_task(struct worker *w, struct wtask *t,
			const struct task *pt);

/* firing.c: a task published (its delivery report, or its transaction
 * committed): on to its DB update. */
void firing_published(struct worker *w, struct wtask *t);
/* firing.c: on to the DB update (t is held, state WT_MARKING). */
void firing_mark(struct worker *w, struct wtask *t);

/* eos.c: exactly-once publishing (kafka.exactly_once); each is a no-op
 * (ready: 1) when it is off. */
void eos_start(struct worker *w);
void eos_stop(struct worker *w);
int eos_enabled(const struct worker *w);
/* A slot was gained: the previous owner's producer is fenced, ours
 * recorded as the slot's, and its markers read and recorded before it is
 * ready. */
void eos_slot_gained(struct worker *w, int slot);
void eos_slot_lost(struct worker *w, int slot);
/* A handover of slot may be written now (1), or waits for our producer
 * to be cleared from the slot's record (0; coord_slot_idle() follows).
 * drained: nothing of the slot is held (else the next owner fences us). */
int eos_release(struct worker *w, int slot, int drained);
/* Claims may go out for slot. */
int eos_slot_ready(const struct worker *w, int slot);
/* Records waiting for or in a transaction. */
size_t eos_queued(const struct worker *w);
/* Queues t's record for its slot's next transaction (hdrs taken over);
 * 0, or -1 when t was released (its slot is not ours any more). */
int eos_publish(struct worker *w, struct wtask *t, const char *topic,
		const char *key, size_t keylen, const void *value,
		size_t valuelen, rd_kafka_headers_t *hdrs);
/* t's DB update ran (recorded, or already final, or fenced). */
void eos_task_recorded(struct worker *w, struct wtask *t);

/* recovery.c: Redis loss detection, index rebuilds, mode switches */
void recovery_start(struct worker *w);
void recovery_stop(struct worker *w);
/* How long Redis has been unreachable (monotonic ms; 0: up or not yet
 * known). */
int64_t recovery_redis_down_ms(const struct worker *w);
/* A slot was just gained; marker tells whether its Redis index exists. */
void recovery_slot_ready(struct worker *w, int slot, int marker);
void recovery_rebuild(struct worker *w, int slot);
/* A Redis failover (Sentinel): every owned slot's index may lack writes,
 * so each is rebuilt from the DB (one under way starts again). */
void recovery_failover(struct worker *w);
/* A write failed with err: NOREPLICAS makes Redis count as down (the
 * slots fire from the DB) until a probe write goes through. */
void recovery_write_refused(struct worker *w, const char *err);
/* Ids of tasks a rebuild or reaper must not re-index: we hold them. */
int recovery_held(struct worker *w, const char *id);
/* t's final state (or occurrence) was recorded while its slot is rebuilt:
 * the rebuild's pages must not index it again. */
void recovery_task_finished(struct worker *w, const struct wtask *t);

/* dbmode.c: firing from the DB while Redis is away; the DB lease reaper */
void dbmode_start(struct worker *w);
void dbmode_stop(struct worker *w);
void dbmode_reap_slot(struct worker *w, int slot);
/* firing.c, on a committed delivery record of t: remembered if a DB-mode
 * claim of its slot is out. */
void dbmode_marked(struct worker *w, const struct wtask *t);
/* After the DB pool is gone. */
void dbmode_free(struct worker *w);

/* pause.c: paused topics, holding their tasks, draining them on resume */
void pause_start(struct worker *w);
void pause_stop(struct worker *w);
/* The paused topics were read once: claims may go out. */
int pause_ready(const struct worker *w);
int pause_is_paused(const struct worker *w, const char *topic);
/* A claimed task of a paused topic: held (t is released when Redis
 * answers) and 1; 0 if its topic is not paused. */
int pause_hold(struct worker *w, struct wtask *t, const struct task *pt);
/* The next occurrence of a recurring task, just indexed in its slot's due
 * set, that fell due while its topic was paused, the topic now draining at
 * a rate (a fire_all series catching up): moved to the held set, so that
 * the drain releases it at the rate (1); 0 if not. */
int pause_pace(struct worker *w, int slot, const char *topic, const char *id,
	       int64_t due);
/* A ZooKeeper event for the paused node (1: handled); a (re)connect. */
int pause_zk_event(struct worker *w, int type, const char *path);
void pause_zk_connected(struct worker *w);
/* A slot was gained or fires from Redis again: drains look at it. */
void pause_slot_ready(struct worker *w, int slot);

/* coord.c: membership, election, assignment, handover, fencing */
int coord_start(struct worker *w, char *err, size_t errlen);
void coord_stop(struct worker *w);
/* After everything else stopped: coord_fresh() is asked until then. */
void coord_free(struct worker *w);
/* ZooKeeper answered within 2/3 of the session timeout (monotonic). */
int coord_fresh(const struct worker *w);
/* Whether claims may go out for slot now (owned, not self-fenced). */
int coord_may_claim(struct worker *w, int slot);
/* A slot's busy count dropped: a handover may complete. */
void coord_slot_idle(struct worker *w, int slot);
/* Raises slot's DB fence to epoch (on a DB pool thread: it touches
 * nothing of the loop's). */
int coord_db_fence(struct db_conn *c, int slot, int64_t epoch);

/* slotfsm.c, on one slot's state: a phase change along the table (1; 0
 * if already there; -1 refused, nothing changed; the worker's code goes
 * through slot_phase_set()) and a mode change (the only way a mode
 * changes), each bumping the generation. */
int wslot_move(struct wslot *s, enum slot_phase to);
void wslot_set_mode(struct wslot *s, enum slot_mode mode);

/* A slot's ZooKeeper node as this worker reads it. */
struct slot_seen {
	int mine;	     /* owner is this worker */
	int requested_other; /* a handover to another worker is asked */
	int64_t epoch;
};

/* What reconciling a slot with its node does, in this order: */
enum {
	SD_LOSE = 1,	/* starting or owned -> idle (slot_lose) */
	SD_DROP = 2,	/* draining or handing -> idle: no longer ours */
	SD_RELEASE = 4, /* -> draining (begin_release) */
	SD_CANCEL = 8,	/* draining -> idle: the request taken back */
	SD_GAIN = 16,	/* idle -> starting at the node's epoch */
};
/* The SD_* set for slot s given its node v; fresh: coord_fresh(). */
int slot_decide(const struct wslot *s, const struct slot_seen *v, int fresh);

/* A scan tick's jobs for an owned slot in Redis mode (scanner.c), each at
 * most one at a time and at its interval (the scan whenever none is out
 * and the claim queue holds under two batches). */
/* Buckets are moved task.bucket_near_ms before they start: a second apart
 * leaves their tasks most of that window in due/task before they are due. */
#define SCAN_MOVE_INTERVAL_MS 1000
#define SCAN_REAP_INTERVAL_MS 1000
#define SCAN_LOAD_INTERVAL_MS 5000
#define SCAN_SWEEP_INTERVAL_MS 10000
enum { SJ_MOVE = 1, SJ_SCAN = 2, SJ_REAP = 4, SJ_LOAD = 8, SJ_SWEEP = 16 };
/* The SJ_* set to start now (mono: monotonic ms); the started ones'
 * next times move on by their intervals. */
int slot_scan_plan(struct wslot *s, int64_t mono, size_t claim_batch);
/* The one place a slot's phase changes (a move slot_phase_allowed()
 * refuses is a bug: logged, and the phase is left as it was); bumps the
 * generation. Answers whether it moved. */
int slot_phase_set(struct worker *w, int slot, enum slot_phase to,
		   const char *why);
/* Starting or owned -> idle: what runs for the slot stops (why: logged). */
void slot_lose(struct worker *w, int slot, const char *why);

static inline int
slot_owned(const struct worker *w, int slot)
{
	return w->slots[slot].phase == SP_OWNED;
}

/* t's slot is still owned at the epoch t was claimed in. */
static inline int
slot_holds(const struct worker *w, const struct wtask *t)
{
	return slot_owned(w, t->slot) && w->slots[t->slot].epoch == t->epoch;
}

/* Nothing of the slot changed since gen was read (and it is owned). */
static inline int
slot_current(const struct worker *w, int slot, unsigned gen)
{
	return w->slots[slot].phase == SP_OWNED && w->slots[slot].gen == gen;
}

#endif

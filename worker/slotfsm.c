/*
 * The slot lifecycle (enum slot_phase, worker/worker.h): the one table of
 * moves, the generation rule, what reconciling a slot with its ZooKeeper
 * node does, and what a scan tick starts for an owned slot. No servers and no loop here: worker/coord.c runs
 * it (slot_phase_set, slot_reconcile), tests/unit/test_slotfsm.c feeds it
 * events, and tests/model/run.sh checks the handover model's transitions
 * against the table (test_slotfsm --moves prints it).
 */
#include "worker.h"

static const char *const names[SP_N] = {
	[SP_IDLE] = "idle",	  [SP_STARTING] = "starting",
	[SP_OWNED] = "owned",	  [SP_DRAINING] = "draining",
	[SP_HANDING] = "handing",
};

/* from -> to, and what takes it (worker/coord.c unless said). */
static const struct {
	enum slot_phase from, to;
} moves[] = {
	/* slot_gain: ours in ZooKeeper at an epoch, fences going up */
	{SP_IDLE, SP_STARTING},
	/* the Redis fence raised (or, Redis down, the DB fence): gained */
	{SP_STARTING, SP_OWNED},
	/* the fence refused or not sent, a newer epoch, the node changed,
	 * the session lost */
	{SP_STARTING, SP_IDLE},
	/* slot_lose: reassigned, epoch changed, session lost, a rebuild
	 * fenced (worker/recovery.c) */
	{SP_OWNED, SP_IDLE},
	/* begin_release: the master asked for a handover (also before the
	 * slot was started here) */
	{SP_OWNED, SP_DRAINING},
	{SP_STARTING, SP_DRAINING},
	{SP_IDLE, SP_DRAINING},
	/* try_finish_release: drained (or the drain timed out): the write */
	{SP_DRAINING, SP_HANDING},
	/* the write failed: drained still, written again by the tick */
	{SP_HANDING, SP_DRAINING},
	/* the write done; or the node no longer ours, the session lost */
	{SP_HANDING, SP_IDLE},
	/* the request taken back, the node no longer ours, session lost */
	{SP_DRAINING, SP_IDLE},
};

#define NMOVES (sizeof(moves) / sizeof(moves[0]))

const char *
slot_phase_name(enum slot_phase p)
{
	return (unsigned)p < SP_N ? names[p] : "?";
}

int
slot_phase_allowed(enum slot_phase from, enum slot_phase to)
{
	for (size_t i = 0; i < NMOVES; i++)
		if (moves[i].from == from && moves[i].to == to)
			return 1;
	return 0;
}

int
slot_phase_move(int i, enum slot_phase *from, enum slot_phase *to)
{
	if (i < 0 || (size_t)i >= NMOVES)
		return 0;
	*from = moves[i].from;
	*to = moves[i].to;
	return 1;
}

int
wslot_move(struct wslot *s, enum slot_phase to)
{
	if (s->phase == to)
		return 0;
	if (!slot_phase_allowed(s->phase, to))
		return -1;
	s->phase = to;
	s->gen++;
	return 1;
}

void
wslot_set_mode(struct wslot *s, enum slot_mode mode)
{
	if (s->mode == mode)
		return;
	s->mode = mode;
	s->gen++;
}

int
slot_decide(const struct wslot *s, const struct slot_seen *v, int fresh)
{
	int act = 0;
	enum slot_phase p = s->phase;

	if (!v->mine) {
		if (p == SP_STARTING || p == SP_OWNED)
			act |= SD_LOSE;
		else if (p == SP_DRAINING || p == SP_HANDING)
			act |= SD_DROP;
		return act;
	}
	if (v->requested_other)
		return p == SP_DRAINING || p == SP_HANDING ? 0 : SD_RELEASE;
	if (p == SP_DRAINING) {
		act |= SD_CANCEL;
		p = SP_IDLE;
	}
	if ((p == SP_STARTING || p == SP_OWNED) && s->epoch != v->epoch) {
		act |= SD_LOSE;
		p = SP_IDLE;
	}
	if (p == SP_IDLE && fresh)
		act |= SD_GAIN;
	return act;
}

int
slot_scan_plan(struct wslot *s, int64_t mono, size_t claim_batch)
{
	int jobs = 0;

	if (s->phase != SP_OWNED || s->mode != SM_REDIS)
		return 0;
	if (!s->moving && mono >= s->next_move_ms) {
		s->next_move_ms = mono + SCAN_MOVE_INTERVAL_MS;
		jobs |= SJ_MOVE;
	}
	/* Kafka slow or down: what waits to be claimed is enough; reading
	 * more would only grow memory. */
	if (!s->scanning && s->claimq_n < 2 * claim_batch)
		jobs |= SJ_SCAN;
	if (!s->reaping && mono >= s->next_reap_ms) {
		s->next_reap_ms = mono + SCAN_REAP_INTERVAL_MS;
		jobs |= SJ_REAP;
	}
	if (!s->loading && mono >= s->next_load_ms) {
		s->next_load_ms = mono + SCAN_LOAD_INTERVAL_MS;
		jobs |= SJ_LOAD;
	}
	if (!s->sweeping && mono >= s->next_sweep_ms) {
		s->next_sweep_ms = mono + SCAN_SWEEP_INTERVAL_MS;
		jobs |= SJ_SWEEP;
	}
	return jobs;
}

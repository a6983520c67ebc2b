/*
 * The slot lifecycle (worker/slotfsm.c): the table of moves, the
 * generation rule every asynchronous answer is checked by, and what
 * reconciling a slot with its ZooKeeper node does, fed events without
 * servers. `test_slotfsm --moves` prints the table for tests/model/run.sh.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "worker.h"

static int
nmoves(void)
{
	enum slot_phase f, t;
	int n = 0;

	while (slot_phase_move(n, &f, &t))
		n++;
	return n;
}

/* The table's shape: the properties the protocol relies on. */
static void
test_table(void **state)
{
	enum slot_phase f, t;
	int reach[SP_N] = {[SP_IDLE] = 1}, grew = 1;

	(void)state;
	assert_true(nmoves() > 0);
	for (int i = 0; slot_phase_move(i, &f, &t); i++) {
		assert_true(f < SP_N && t < SP_N);
		assert_int_not_equal(f, t);
		assert_true(slot_phase_allowed(f, t));
		/* listed once */
		for (int j = i + 1; j < nmoves(); j++) {
			enum slot_phase f2, t2;

			slot_phase_move(j, &f2, &t2);
			assert_false(f == f2 && t == t2);
		}
		/* Claims only after the fences: owned is entered from
		 * starting alone. The handover write only once drained. */
		if (t == SP_OWNED)
			assert_int_equal(f, SP_STARTING);
		if (t == SP_HANDING)
			assert_int_equal(f, SP_DRAINING);
	}
	/* A lost session takes every phase straight to idle. */
	for (int p = 0; p < SP_N; p++)
		if (p != SP_IDLE)
			assert_true(slot_phase_allowed(p, SP_IDLE));
	/* Every phase is reachable from idle. */
	while (grew) {
		grew = 0;
		for (int i = 0; slot_phase_move(i, &f, &t); i++)
			if (reach[f] && !reach[t])
				reach[t] = grew = 1;
	}
	for (int p = 0; p < SP_N; p++)
		assert_true(reach[p]);
	/* Refused: no way back into owned but through the fences. */
	assert_false(slot_phase_allowed(SP_IDLE, SP_OWNED));
	assert_false(slot_phase_allowed(SP_DRAINING, SP_OWNED));
	assert_false(slot_phase_allowed(SP_HANDING, SP_OWNED));
	assert_false(slot_phase_allowed(SP_OWNED, SP_HANDING));
	assert_false(slot_phase_allowed(SP_N, SP_IDLE));
	assert_string_equal(slot_phase_name(SP_DRAINING), "draining");
	assert_string_equal(slot_phase_name(SP_N), "?");
}

/* Every change of phase or mode makes earlier answers stale, and an
 * answer is stale after the slot went away and came back (same phase,
 * same epoch), which the owned flag of before could not tell. */
static void
test_generation(void **state)
{
	struct wslot s;
	unsigned scan;

	(void)state;
	memset(&s, 0, sizeof(s));
	assert_int_equal(wslot_move(&s, SP_STARTING), 1);
	assert_int_equal(wslot_move(&s, SP_OWNED), 1);
	scan = s.gen; /* a scan sent now */
	assert_int_equal(s.gen, 2);
	assert_int_equal(wslot_move(&s, SP_OWNED), 0); /* no change */
	assert_int_equal(s.gen, scan);
	/* refused: nothing changes */
	assert_int_equal(wslot_move(&s, SP_HANDING), -1);
	assert_int_equal(s.phase, SP_OWNED);
	assert_int_equal(s.gen, scan);
	/* a mode change (Redis -> DB mode) makes the scan stale */
	wslot_set_mode(&s, SM_DB);
	assert_int_not_equal(s.gen, scan);
	scan = s.gen;
	wslot_set_mode(&s, SM_DB);
	assert_int_equal(s.gen, scan);
	/* handed over and back at the same epoch */
	s.epoch = 7;
	assert_int_equal(wslot_move(&s, SP_DRAINING), 1);
	assert_int_equal(wslot_move(&s, SP_HANDING), 1);
	assert_int_equal(wslot_move(&s, SP_IDLE), 1);
	assert_int_equal(wslot_move(&s, SP_STARTING), 1);
	assert_int_equal(wslot_move(&s, SP_OWNED), 1);
	assert_int_equal(s.phase, SP_OWNED);
	assert_int_equal(s.epoch, 7);
	assert_int_not_equal(s.gen, scan);
}

/* What coord.c's slot_reconcile runs for an SD_* set, in its order;
 * each move must be one of the table's. */
static void
apply(struct wslot *s, int act, int64_t epoch)
{
	if (act & SD_LOSE) {
		assert_true(s->phase == SP_STARTING || s->phase == SP_OWNED);
		assert_int_equal(wslot_move(s, SP_IDLE), 1);
		wslot_set_mode(s, SM_REDIS);
	}
	if (act & SD_DROP) {
		assert_true(s->phase == SP_DRAINING || s->phase == SP_HANDING);
		assert_int_equal(wslot_move(s, SP_IDLE), 1);
	}
	if (act & SD_RELEASE)
		assert_int_equal(wslot_move(s, SP_DRAINING), 1);
	if (act & SD_CANCEL) {
		assert_int_equal(s->phase, SP_DRAINING);
		assert_int_equal(wslot_move(s, SP_IDLE), 1);
	}
	if (act & SD_GAIN) {
		s->epoch = epoch;
		assert_int_equal(wslot_move(s, SP_STARTING), 1);
	}
}

/* Every phase against every kind of node: the moves are the table's and
 * the slot ends where the node says. */
static void
test_decide_all(void **state)
{
	(void)state;
	for (int p = 0; p < SP_N; p++)
		for (int bits = 0; bits < 16; bits++) {
			struct wslot s;
			struct slot_seen v;
			int fresh = bits & 1, act;

			memset(&s, 0, sizeof(s));
			s.phase = (enum slot_phase)p;
			s.epoch = 5;
			v.mine = (bits >> 1) & 1;
			v.requested_other = (bits >> 2) & 1;
			v.epoch = (bits >> 3) & 1 ? 6 : 5;
			act = slot_decide(&s, &v, fresh);
			apply(&s, act, v.epoch);
			if (!v.mine) {
				assert_int_equal(s.phase, SP_IDLE);
				continue;
			}
			if (v.requested_other) {
				assert_true(s.phase == SP_DRAINING ||
					    s.phase == SP_HANDING);
				continue;
			}
			/* ours, no handover asked for */
			if (s.phase == SP_STARTING || s.phase == SP_OWNED)
				assert_true(s.epoch == v.epoch);
			if (fresh)
				assert_true(s.phase != SP_IDLE &&
					    s.phase != SP_DRAINING);
			else
				assert_false(act & SD_GAIN);
			/* a second look at the same node changes nothing
			 * (but a gain still waiting for freshness) */
			act = slot_decide(&s, &v, fresh);
			assert_int_equal(act & ~SD_GAIN, 0);
		}
}

/* The events coord.c handles, as a small driver over the same functions:
 * the Redis fence's answer and the handover write's, each dropped when
 * its generation is stale. */
struct drv {
	struct wslot s;
	struct slot_seen v;
	unsigned fence_gen, write_gen;
};

static void
node(struct drv *d, int mine, int req_other, int64_t epoch)
{
	d->v.mine = mine;
	d->v.requested_other = req_other;
	d->v.epoch = epoch;
	apply(&d->s, slot_decide(&d->s, &d->v, 1), epoch);
	if (d->s.phase == SP_STARTING)
		d->fence_gen = d->s.gen; /* redis_fence_cb's token */
}

static void
fence_ok(struct drv *d, unsigned gen)
{
	if (d->s.phase == SP_STARTING && d->s.gen == gen)
		assert_int_equal(wslot_move(&d->s, SP_OWNED), 1);
}

static void
drained(struct drv *d)
{
	assert_int_equal(wslot_move(&d->s, SP_HANDING), 1);
	d->write_gen = d->s.gen;
}

static void
write_done(struct drv *d, unsigned gen, int ok)
{
	if (d->s.phase == SP_HANDING && d->s.gen == gen)
		assert_int_equal(wslot_move(&d->s, ok ? SP_IDLE : SP_DRAINING),
				 1);
}

static void
test_events(void **state)
{
	struct drv d;
	unsigned old_fence, old_write;

	(void)state;
	memset(&d, 0, sizeof(d));
	/* assigned at epoch 1: fence, then owned */
	node(&d, 1, 0, 1);
	assert_int_equal(d.s.phase, SP_STARTING);
	fence_ok(&d, d.fence_gen);
	assert_int_equal(d.s.phase, SP_OWNED);
	/* a handover asked for: draining; the write fails (the master
	 * changed the node meanwhile), then the request is taken back */
	node(&d, 1, 1, 1);
	assert_int_equal(d.s.phase, SP_DRAINING);
	drained(&d);
	old_write = d.write_gen;
	write_done(&d, d.write_gen, 0);
	assert_int_equal(d.s.phase, SP_DRAINING);
	node(&d, 1, 0, 1);
	assert_int_equal(d.s.phase, SP_STARTING); /* cancelled, gained */
	/* the fence's answer of this start arrives after the node moved
	 * on to epoch 2: the slot starts again at 2, the answer of 1's
	 * start is dropped */
	old_fence = d.fence_gen;
	node(&d, 1, 0, 2);
	assert_int_equal(d.s.phase, SP_STARTING);
	assert_int_equal(d.s.epoch, 2);
	fence_ok(&d, old_fence);
	assert_int_equal(d.s.phase, SP_STARTING);
	fence_ok(&d, d.fence_gen);
	assert_int_equal(d.s.phase, SP_OWNED);
	/* handed over for real; the late answer of the failed write
	 * changes nothing */
	node(&d, 1, 1, 2);
	drained(&d);
	write_done(&d, old_write, 0);
	assert_int_equal(d.s.phase, SP_HANDING);
	write_done(&d, d.write_gen, 1);
	assert_int_equal(d.s.phase, SP_IDLE);
	node(&d, 0, 0, 3);
	assert_int_equal(d.s.phase, SP_IDLE);
	/* reassigned while the write was out: idle at once, the write's
	 * answer dropped */
	node(&d, 1, 0, 4);
	fence_ok(&d, d.fence_gen);
	node(&d, 1, 1, 4);
	drained(&d);
	old_write = d.write_gen;
	node(&d, 0, 0, 5);
	assert_int_equal(d.s.phase, SP_IDLE);
	write_done(&d, old_write, 1);
	assert_int_equal(d.s.phase, SP_IDLE);
}

/* The scanner's tick, fed 60 s of 100 ms ticks: each job kind starts at
 * its interval, never twice at a time, and one slower than its interval
 * starts again only once done; nothing for a slot not owned in Redis
 * mode; no scan while the claim queue holds two batches. */
struct job {
	int bit;
	int *busy;
	int64_t done_at;
	int starts;
};

static void
test_scan_plan(void **state)
{
	struct wslot s;
	struct job jobs[5];
	const size_t batch = 100;
	int n;

	(void)state;
	memset(&s, 0, sizeof(s));
	assert_int_equal(slot_scan_plan(&s, 0, batch), 0); /* idle */
	s.phase = SP_STARTING;
	assert_int_equal(slot_scan_plan(&s, 0, batch), 0);
	s.phase = SP_OWNED;
	s.mode = SM_DB;
	assert_int_equal(slot_scan_plan(&s, 0, batch), 0);
	s.mode = SM_REBUILD;
	assert_int_equal(slot_scan_plan(&s, 0, batch), 0);
	s.mode = SM_REDIS;
	jobs[0] = (struct job){SJ_MOVE, &s.moving, 0, 0};
	jobs[1] = (struct job){SJ_SCAN, &s.scanning, 0, 0};
	jobs[2] = (struct job){SJ_REAP, &s.reaping, 0, 0};
	jobs[3] = (struct job){SJ_LOAD, &s.loading, 0, 0};
	jobs[4] = (struct job){SJ_SWEEP, &s.sweeping, 0, 0};
	for (int64_t t = 0; t < 60000; t += 100) {
		int plan;

		/* the load is slow between 20 and 27 s: 7 s a round */
		for (int j = 0; j < 5; j++)
			if (*jobs[j].busy && t >= jobs[j].done_at)
				*jobs[j].busy = 0;
		plan = slot_scan_plan(&s, t, batch);
		for (int j = 0; j < 5; j++) {
			if (!(plan & jobs[j].bit))
				continue;
			assert_false(*jobs[j].busy); /* one at a time */
			*jobs[j].busy = 1;
			jobs[j].starts++;
			jobs[j].done_at =
				t + (jobs[j].bit == SJ_LOAD && t >= 20000 &&
						     t < 27000
					     ? 7000
					     : 50);
		}
	}
	assert_int_equal(jobs[0].starts, 60);  /* move: every second */
	assert_int_equal(jobs[1].starts, 600); /* scan: every tick */
	assert_int_equal(jobs[2].starts, 60);  /* reap: every second */
	assert_int_equal(jobs[4].starts, 6);   /* sweep: every 10 s */
	/* load: every 5 s, but the one started at 20 s ran until 27 s and
	 * the next started at once when it ended: 0, 5, 10, 15, 20, 27,
	 * 32, ... 57 */
	assert_int_equal(jobs[3].starts, 12);
	/* a full claim queue: no scan */
	s.scanning = 0;
	s.claimq_n = 2 * batch;
	assert_int_equal(slot_scan_plan(&s, 60000, batch) & SJ_SCAN, 0);
	s.claimq_n = 2 * batch - 1;
	n = slot_scan_plan(&s, 60000, batch);
	assert_int_not_equal(n & SJ_SCAN, 0);
}

int
main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_table),
		cmocka_unit_test(test_generation),
		cmocka_unit_test(test_decide_all),
		cmocka_unit_test(test_events),
		cmocka_unit_test(test_scan_plan),
	};

	if (argc > 1 && strcmp(argv[1], "--moves") == 0) {
		enum slot_phase f, t;

		for (int i = 0; slot_phase_move(i, &f, &t); i++)
			printf("%s %s\n", slot_phase_name(f),
			       slot_phase_name(t));
		return 0;
	}
	return cmocka_run_group_tests(tests, NULL, NULL);
}

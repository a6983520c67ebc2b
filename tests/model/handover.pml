/*
 * Promela model of Prophet's slot handover and claim protocol, for spin.
 * tests/model/run.sh checks it (`make model-check`; a test in make check).
 *
 * What it mirrors (one slot, one task T that is due, two workers):
 *   - ZooKeeper slot node {owner, requested, epoch} with versioned writes,
 *     ephemeral /workers nodes = sessions: docs/architecture.md, and
 *     worker/coord.c: rebalance() (the master: a dead owner's slot given
 *     directly with epoch+1, a live owner's moved through "requested"),
 *     begin_release() + try_finish_release() (the owner drains, then
 *     writes owner=requested, epoch+1 with the node's version),
 *     slot_reconcile() / slot_gain() / redis_fence_cb() (the new owner
 *     raises the Redis fence, then claims; the DB fence is raised
 *     asynchronously: submit_fence() / fence_run()),
 *     slot_lose(), coord_fresh() / coord_may_claim() (self-fencing: a
 *     worker whose session may have expired sends no claim).
 *   - proto/scripts.h SCRIPT_FENCE and SCRIPT_CLAIM (the claim is refused
 *     when the slot's Redis fence is above the claim's epoch, and raises
 *     it otherwise), SCRIPT_REQUEUE (worker/scanner.c reap_slot: the
 *     owner requeues expired leases), SCRIPT_FORGET (worker/firing.c
 *     forget(), called after every DB batch, fenced rows included).
 *   - worker/firing.c firing_publish_task() (publish), firing_dr_cb() and
 *     mark_run() (the delivered update, refused when the DB fence
 *     SQL_SLOT_FENCE_SHARED is above the task's epoch), and
 *     worker/scanner.c sweep_slot() (overdue DB tasks missing from Redis
 *     are re-indexed).
 *
 * A claim is two steps, as in the code: the worker sends it (while it
 * believes itself owner and fresh) and Redis runs it later; a message in
 * flight can outlive the sender's session, which is what the fence is for.
 * ZooKeeper session expiry implies the worker has self-fenced (it stops
 * sending claims at 2/3 of the session timeout, measured on the monotonic
 * clock, before the server expires the session). A crash (kill -9) drops
 * the worker's memory; a claim it sent may still run in Redis.
 *
 * Checked:
 *   S1 (assert) never two publishers of one task under one epoch: every
 *      publish under epoch e comes from the single worker that owned e.
 *   S2 (assert) the claim fence: no claim under epoch e succeeds once the
 *      owner of a higher epoch has started (raised its fence), so at any
 *      time one epoch claims.
 *   L1 (ltl live) every claimed task is eventually delivered (published
 *      and marked delivered in the DB), under weak fairness, once the
 *      bounded faults (MAXX expiries, MAXC crashes, MAXH handovers) stop.
 * Not modelled: Redis losing the fence key (restart, flush; the DB fence
 * and the rebuild cover that, tests/chaos exercises it), DB mode, several
 * tasks and slots (claims are per task; slots are independent).
 *
 * -DBROKEN drops the fence check from the claim script: spin must find a
 * violation of S2 (tests/model/run.sh asserts that it does).
 *
 * -DEOS models kafka.exactly_once (worker/eos.c, docs/architecture.md,
 * "Exactly-once publishing"): the slot's transactional id has a producer
 * epoch at the transaction coordinator (kPE); a worker's open of the slot
 * (eos_slot_gained -> run_open) bumps it (init_transactions, which also
 * aborts an open transaction of an older producer) and then reads the
 * marker partition from the checkpoint: a committed marker not yet behind
 * the checkpoint is recorded delivered (apply_found -> the mark path and
 * forget) before the slot is ready (eos_slot_ready gates the claims).
 * The open waits until the worker holds nothing of the slot (tasks of an
 * earlier ownership of its own finish first), and a task claimed under
 * an older ownership is never published (eos_publish). Publishing is a
 * transaction: begun with the worker's producer epoch,
 * committed only if that is still the coordinator's (a fenced zombie's
 * commit is refused); the commit makes the task's record and its marker
 * visible together. The checkpoint moves past the marker once the task's
 * delivered update ran under an epoch the DB fence still allows (advance
 * -> SQL_EOS_CKPT_SET ... WHERE epoch = ours).
 *   S3 (assert) no task committed twice (read_committed consumers see
 *      each task once).
 * -DEOS -DBROKEN_EOS: the open does not read the markers; spin must find
 * a violation of S3.
 */

#ifndef MAXX
#define MAXX 2 /* session expiries */
#endif
#ifndef MAXC
#define MAXC 1 /* crashes */
#endif
#ifndef MAXH
#define MAXH 2 /* handovers requested by the master */
#endif
/* Epochs the faults can use up: the first assignment, two per expiry or
 * crash (given to nobody, then to someone), one per handover. */
#define MAXE (1 + 2 * (MAXX + MAXC) + MAXH)

#define NONE 0
#define other(w) (3 - (w))

/* Redis: the task's place */
#define R_DUE 1
#define R_INFL 2
#define R_GONE 3
/* DB status */
#define DB_SCHED 0
#define DB_DELIV 1
/* what a worker holds of T */
#define H_NONE 0
#define H_CLAIMED 1
#define H_PUBLISHED 2
#define H_TXN 3 /* EOS: in an open transaction */

/* ZooKeeper */
byte zOwner, zReq, zE, zVer;
bool zAlive[3];

/* Redis */
byte rFence;
byte rT = R_DUE;
byte rHolder;

/* DB */
byte dbFence;
byte dbSt = DB_SCHED;

/* Workers' memory */
bool owned[3], fresh[3], releasing[3], dbFencePending[3];
byte myE[3];
byte vOwner[3], vReq[3], vE[3], vVer[3];
bool vValid[3];
byte pend[3];   /* epoch of a claim in flight to Redis, 0: none */
bool pendLive[3]; /* its sender is still the same process (no crash) */
byte held[3], hE[3];

#ifdef EOS
/* Kafka: the slot's transactional id and the marker partition */
byte kPE;	    /* the coordinator's producer epoch */
bool kOpen;	    /* a transaction holding T is open */
byte kOpenPE;	    /* the producer epoch it was begun with */
bool kMarker;	    /* T's marker committed */
bool ckptPast;	    /* the checkpoint is past T's marker */
byte kCommits;	    /* ghost: committed records of T */
byte pE[3];	    /* each worker's producer epoch */
bool ready[3];	    /* eos_slot_ready */
#define READY(w) ready[w]
#define UNREADY(w) ready[w] = false
#else
#define READY(w) true
#define UNREADY(w) skip
#endif

/* Ghosts (checks only) */
byte started;      /* highest epoch whose owner raised the fence */
byte pubBy[MAXE + 1];
bool claimed, published;
byte nExp, nCrash, nHand;

#define delivered (dbSt == DB_DELIV && published)

ltl live { [] (claimed -> <> delivered) }

/* The master (with ZooKeeper), session expiry and crashes. */
active proctype Env()
{
	byte w;
end:	do
	/* unowned slot: give it to a live worker */
	:: atomic { zOwner == NONE && (zAlive[1] || zAlive[2]) ->
		if
		:: zAlive[1] -> zOwner = 1
		:: zAlive[2] -> zOwner = 2
		fi;
		zReq = NONE; zE++; zVer++ }
	/* dead owner: give it directly, next epoch */
	:: atomic { zOwner != NONE && !zAlive[zOwner] ->
		if
		:: zAlive[other(zOwner)] -> zOwner = other(zOwner)
		:: else -> zOwner = NONE
		fi;
		zReq = NONE; zE++; zVer++ }
	/* rebalance: ask the live owner to hand over */
	:: atomic { zOwner != NONE && zAlive[zOwner] &&
		zAlive[other(zOwner)] && zReq == NONE && nHand < MAXH ->
		zReq = other(zOwner); zVer++; nHand++ }
	/* the requested worker died: take the request back */
	:: atomic { zReq != NONE && !zAlive[zReq] -> zReq = NONE; zVer++ }
	/* session expiry (partition, SIGSTOP): the worker self-fenced first */
	:: atomic { nExp < MAXX ->
		if
		:: w = 1
		:: w = 2
		fi;
		if
		:: zAlive[w] -> zAlive[w] = false; fresh[w] = false; nExp++
		:: else -> skip
		fi }
	/* kill -9: memory gone; a claim already sent may still run */
	:: atomic { nCrash < MAXC ->
		if
		:: w = 1
		:: w = 2
		fi;
		if
		:: zAlive[w] ->
			zAlive[w] = false; fresh[w] = false; owned[w] = false;
			releasing[w] = false; dbFencePending[w] = false;
			held[w] = H_NONE; pendLive[w] = false; vValid[w] = false;
			UNREADY(w); nCrash++
		:: else -> skip
		fi }
	/* Redis runs a claim in flight (SCRIPT_CLAIM) */
	:: atomic { pend[1] != 0 || pend[2] != 0 ->
		if
		:: pend[1] != 0 -> w = 1
		:: pend[2] != 0 -> w = 2
		fi;
#ifndef BROKEN
		if
		:: rFence > pend[w] -> goto refused
		:: else -> skip
		fi;
#endif
		if
		:: rFence < pend[w] -> rFence = pend[w]
		:: else -> skip
		fi;
		if
		:: rT == R_DUE ->
			assert(pend[w] >= started);	/* S2 */
			rT = R_INFL; rHolder = w; claimed = true;
			if
			:: pendLive[w] -> held[w] = H_CLAIMED; hE[w] = pend[w]
			:: else -> skip
			fi
		:: else -> skip
		fi;
refused:
		pend[w] = 0; pendLive[w] = false }
	od
}

proctype Worker(byte me)
{
end:	do
	/* (re)connect: a new session, registered, nothing owned */
	:: atomic { !zAlive[me] ->
		zAlive[me] = true; fresh[me] = true; owned[me] = false;
		releasing[me] = false; vValid[me] = false; UNREADY(me) }
	/* a watch fired: re-read the slot node */
	:: atomic { fresh[me] && (!vValid[me] || vVer[me] != zVer) ->
		vOwner[me] = zOwner; vReq[me] = zReq; vE[me] = zE;
		vVer[me] = zVer; vValid[me] = true }
	/* slot_reconcile: reassigned or epoch changed -> lose */
	:: atomic { owned[me] && vValid[me] &&
		(vOwner[me] != me || vE[me] != myE[me]) ->
		owned[me] = false; UNREADY(me) }
	/* slot_gain + redis_fence_cb: fence, then claim; DB fence async */
	:: atomic { fresh[me] && vValid[me] && vOwner[me] == me &&
		vReq[me] == NONE && !owned[me] && !releasing[me] ->
		if
		:: rFence > vE[me] -> vValid[me] = false /* fenced: re-read */
		:: else ->
			rFence = vE[me]; myE[me] = vE[me]; owned[me] = true;
			dbFencePending[me] = true;
			if
			:: started < myE[me] -> started = myE[me]
			:: else -> skip
			fi
		fi }
	:: atomic { dbFencePending[me] ->
		if
		:: dbFence < myE[me] -> dbFence = myE[me]
		:: else -> skip
		fi;
		dbFencePending[me] = false }
	/* begin_release: handover requested (owned or just restarted and
	 * still named owner), stop claiming */
	:: atomic { fresh[me] && vValid[me] && vOwner[me] == me &&
		vReq[me] != NONE && vReq[me] != me && !releasing[me] ->
		owned[me] = false; releasing[me] = true; UNREADY(me) }
	/* try_finish_release: drained, versioned write of the next epoch */
	:: atomic { releasing[me] && fresh[me] && pend[me] == 0 &&
		held[me] == H_NONE ->
		if
		:: zVer == vVer[me] && vReq[me] != NONE ->
			zOwner = vReq[me]; zReq = NONE; zE++; zVer++
		:: else -> skip	/* version moved */
		fi;
		vValid[me] = false; /* release_done_cb: read_slot */
		releasing[me] = false }
	/* scanner: send a claim for the due task (coord_may_claim) */
	:: atomic { owned[me] && fresh[me] && pend[me] == 0 &&
		held[me] == H_NONE && rT == R_DUE && READY(me) ->
		pend[me] = myE[me]; pendLive[me] = true }
#ifndef EOS
	/* firing_publish_task: to Kafka under the claim's epoch */
	:: atomic { held[me] == H_CLAIMED ->
		assert(pubBy[hE[me]] == NONE || pubBy[hE[me]] == me); /* S1 */
		pubBy[hE[me]] = me; published = true; held[me] = H_PUBLISHED }
#else
	/* eos_slot_gained -> run_open: init_transactions (fences the older
	 * producer, aborts its open transaction), read the markers from the
	 * checkpoint, record what they show (apply_found), then ready */
	:: atomic { owned[me] && fresh[me] && !ready[me] &&
		held[me] == H_NONE ->
		kPE++; pE[me] = kPE; kOpen = false;
#ifndef BROKEN_EOS
		if
		:: kMarker && !ckptPast ->
			/* the delivered update (fenced) and forget */
			if
			:: dbFence <= myE[me] && dbSt == DB_SCHED ->
				dbSt = DB_DELIV
			:: else -> skip
			fi;
			rT = R_GONE;
			if
			:: dbFence <= myE[me] && dbSt == DB_DELIV ->
				ckptPast = true
			:: else -> skip
			fi
		:: else -> skip
		fi;
#endif
		ready[me] = true }
	/* eos_publish -> run_send: the record and its marker in a
	 * transaction begun with this worker's producer epoch */
	:: atomic { held[me] == H_CLAIMED ->
		if
		:: owned[me] && ready[me] && hE[me] == myE[me] ->
			kOpen = true; kOpenPE = pE[me]; held[me] = H_TXN
		:: else -> held[me] = H_NONE /* claimed under an older
						  * ownership: not published */
		fi }
	/* commit_transaction: refused for a fenced producer (a zombie woken
	 * after the next owner's init); its task stays in flight */
	:: atomic { held[me] == H_TXN ->
		if
		:: kOpen && kOpenPE == pE[me] && pE[me] == kPE ->
			kOpen = false; kMarker = true; kCommits++;
			assert(kCommits <= 1);	/* S3 */
			assert(pubBy[hE[me]] == NONE || pubBy[hE[me]] == me); /* S1 */
			pubBy[hE[me]] = me; published = true;
			held[me] = H_PUBLISHED
		:: else -> held[me] = H_NONE
		fi }
#endif
	/* delivery report -> mark_run (DB fence) -> forget */
	:: atomic { held[me] == H_PUBLISHED ->
		if
		:: dbFence <= hE[me] && dbSt == DB_SCHED -> dbSt = DB_DELIV
		:: else -> skip	/* fenced, or already final */
		fi;
		/* SCRIPT_FORGET drops the in-flight entry and the payload: a
		 * copy in due (requeued meanwhile) can no longer be claimed */
		rT = R_GONE;
#ifdef EOS
		/* advance: the checkpoint passes the marker, for an epoch the
		 * DB still allows */
		if
		:: dbSt == DB_DELIV && dbFence <= hE[me] -> ckptPast = true
		:: else -> skip
		fi;
#endif
		held[me] = H_NONE }
	/* reap_slot: a lease ran out (holder gone or stale) */
	:: atomic { owned[me] && fresh[me] && rT == R_INFL &&
		!(rHolder == me && (held[me] != H_NONE || pend[me] != 0)) ->
		rT = R_DUE }
	/* sweep_slot: overdue in the DB, missing from Redis */
	:: atomic { owned[me] && fresh[me] && rT == R_GONE &&
		dbSt == DB_SCHED && held[me] == H_NONE ->
		rT = R_DUE }
	od
}

init
{
	atomic {
		zAlive[1] = true; fresh[1] = true;
		zAlive[2] = true; fresh[2] = true;
		run Worker(1);
		run Worker(2)
	}
}
